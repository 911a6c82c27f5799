"""A folder corpus started again: the first start (every file read and indexed), a second start on the unchanged
folder (no file read), and a start after one file was edited, one removed and one added; in one run.

    python bench/folder_index.py                    # 10,000 passages in 500 Markdown files
    python bench/folder_index.py --passages 100000

The folder is written by bench/passages.py (the shipped corpus's paragraphs and distractors, 20 sections a
file) and the index goes to a temporary TINYAGENT_CACHE; each start is a fresh LocalSearch, as a new process's
would be (`--process` runs each start as its own process, imports included).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from passages import write_folder

ROOT = Path(__file__).resolve().parent.parent
QUERIES = ["When was the Eiffel Tower completed?", "周杰伦哪年出生", "speed of light in vacuum", "长江有多长"]


def start(folder: Path, in_process: bool) -> tuple[float, dict]:
    """Seconds for LocalSearch(folder) to be ready, and what its sync did."""
    code = (
        "import json, sys, time; t = time.perf_counter(); from tinyagent.tools import LocalSearch; "
        "s = LocalSearch(sys.argv[1]); c = s.index.changes; "
        "print(json.dumps({'s': time.perf_counter() - t, 'read': len(c.read), 'added': len(c.added), "
        "'edited': len(c.edited), 'removed': len(c.removed), 'passages': s.index.count()}))"
    )
    if in_process:
        from tinyagent.tools import LocalSearch

        started = time.perf_counter()
        search = LocalSearch(folder)
        seconds = time.perf_counter() - started
        c = search.index.changes
        return seconds, {
            "read": len(c.read),
            "added": len(c.added),
            "edited": len(c.edited),
            "removed": len(c.removed),
            "passages": search.index.count(),
        }
    out = subprocess.run(
        [sys.executable, "-c", code, str(folder)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    ).stdout
    report = json.loads(out)
    return report.pop("s"), report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passages", type=int, default=10_000)
    parser.add_argument("--process", action="store_true", help="each start in a new process (imports counted)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="folder-bench-"))
    os.environ["TINYAGENT_CACHE"] = str(work / "cache")
    folder = work / "docs"
    files = write_folder(folder, args.passages)
    print(f"{args.passages} passages in {files} Markdown files under {folder}")
    rows = {}
    first, rows["first"] = start(folder, not args.process)
    second, rows["second"] = start(folder, not args.process)
    edited = folder / "part000" / "file00003.md"
    edited.write_text(
        edited.read_text(encoding="utf-8") + "\n## Added note\n\nThe grommet wizard arrives.\n", encoding="utf-8"
    )
    (folder / "part000" / "file00004.md").unlink()
    (folder / "part000" / "new.md").write_text("# New\n\nA new file about walruses.\n", encoding="utf-8")
    third, rows["after_changes"] = start(folder, not args.process)
    from tinyagent.tools import LocalSearch

    search = LocalSearch(folder)
    times = []
    for _ in range(5):
        for q in QUERIES:
            started = time.perf_counter()
            search(search_query=q)
            times.append((time.perf_counter() - started) * 1000)
    for name, seconds in (("first", first), ("second", second), ("after_changes", third)):
        rows[name]["seconds"] = round(seconds, 3)
        print(f"{name:14} {seconds:8.3f} s  {first / seconds:7.1f}x faster than the first  {rows[name]}")
    print(f"query: {statistics.median(times):.2f} ms median, {max(times):.2f} ms max ({len(times)} queries)")
    print(f"index file: {search.index.path} ({search.index.path.stat().st_size / 2**20:.1f} MB)")
    rows["query_ms_median"] = round(statistics.median(times), 2)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
