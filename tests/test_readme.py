"""The README's Python example runs and prints what it says, and every relative link of the README and the
docs pages points to a file that exists and, with an #anchor, to a heading of that file."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md")), ROOT / "bench" / "README.md", ROOT / "evals" / "README.md"]
LINK = re.compile(r"(?<!!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*```.*?^\s*```", re.S | re.M)


def test_readme_python_example_runs():
    block = re.search(r"```python\n(from tinyagent import Agent, BaseModel, tool.*?)```", README.read_text(), re.S)
    assert block, "the README lost its Python example"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block.group(1), "README.md", "exec"), {})
    assert out.getvalue().strip() == "6 words True 6"


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    for line in FENCE.sub("", page.read_text(encoding="utf-8")).splitlines():
        match = HEADING.match(line)
        if match:
            s = slug(match.group(1))
            seen[s] = seen.get(s, 0) + 1
            if seen[s] > 1:  # GitHub numbers a repeated heading's anchor
                seen[f"{s}-{seen[s] - 1}"] = 1
    return set(seen)


def test_docs_links_resolve():
    broken = []
    for page in PAGES:
        for target in LINK.findall(FENCE.sub("", page.read_text(encoding="utf-8"))):
            if re.match(r"[a-z]+:", target):  # https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and (dest.suffix != ".md" or anchor not in anchors(dest)):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)
