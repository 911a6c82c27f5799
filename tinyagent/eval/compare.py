"""`python -m tinyagent.eval compare DIR...`: several result folders (models, protocols, constrained or free,
configs) in one table, the questions that flip between them with every answer, and a chart (PNG and an HTML
page with the per-question table and each question's trace).

A folder is read in the current format (2: "agent", "direct", "run") or the older one (1: the agent's totals
at the top level, before the baseline and the provenance); anything else is refused with one line.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import charts
from .harness import disagreements
from .provenance import compared
from .table import AGENT, DIRECT, MODES, RAG, format_disagreements, side_by_side

READS = (1, 2)  # the summary.json formats this version reads
FILES = {AGENT: "results.jsonl", DIRECT: "direct.jsonl", RAG: "rag.jsonl"}
SHOWN_FLIPS = 30  # questions listed on the terminal (the HTML page has all)


class ResultsError(ValueError):
    """A folder that cannot be compared; the message is one line naming it."""


@dataclass
class Results:
    """One results folder: its summary in the current format, its records by mode, what to say about it."""

    folder: Path
    summary: dict
    records: dict[str, list[dict]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def modes(self) -> list[str]:
        return [m for m in MODES if self.summary.get(m)]

    @property
    def run(self) -> dict:
        return self.summary.get("run") or {}


def _json(path: Path, what: str):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise ResultsError(f"{path}: cannot read the {what} ({type(e).__name__})") from None
    except ValueError as e:
        raise ResultsError(f"{path}: not valid JSON ({e})") from None


def upgraded(summary, path: Path) -> dict:
    """`summary` in the current format; format 1 (flat agent totals) becomes {"agent": ..., "run": ...}."""
    if not isinstance(summary, dict):
        raise ResultsError(f"{path}: not an eval summary (a JSON object was expected)")
    version = summary.get("format_version")
    if version is None:
        if not {"n", "n_success", "success_rate"} <= summary.keys():
            raise ResultsError(
                f"{path}: not an eval summary (no format_version, and not the older format's totals "
                "n, n_success, success_rate)"
            )
        agent = {k: v for k, v in summary.items() if k != "run"}
        ran = summary["n"] - (summary.get("n_errors") or 0)
        for total in ("prompt_tokens", "completion_tokens"):  # format 1 had the totals only
            if summary.get(total) is not None and ran:
                agent[f"mean_{total}"] = round(summary[total] / ran, 1)
        return {"format_version": 1, AGENT: {**agent, "mode": AGENT}, DIRECT: None, "run": summary.get("run") or {}}
    if version not in READS:
        newer = isinstance(version, int) and version > max(READS)
        raise ResultsError(
            f"{path}: summary format {version!r} "
            + ("was written by a newer TinyAgent" if newer else "is unknown")
            + f"; this one reads formats "
            f"{READS[0]}-{READS[-1]}"
        )
    if not any(isinstance(summary.get(m), dict) for m in MODES):
        raise ResultsError(f"{path}: the summary holds neither an agent nor a direct run")
    return summary


#: What compare reads of each record (a question's id and text, the answer given, whether it was right).
COMPARED_FIELDS = ("id", "question", "prediction", "success")


def read_records(path: Path) -> list[dict]:
    """A results JSONL file; a line that is not a record, or one without a field compare reads (COMPARED_FIELDS),
    is an error naming the file, the line and the fields."""
    records = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as e:
            raise ResultsError(f"{path}:{number}: not valid JSON ({e})") from None
        if not isinstance(record, dict) or not {"id", "success"} <= record.keys():
            raise ResultsError(f"{path}:{number}: not a result record (no id and success)")
        missing = [key for key in COMPARED_FIELDS if key not in record]
        if missing:
            raise ResultsError(
                f"{path}:{number}: the record of {str(record['id'])[:60]!r} has no "
                f"{', '.join(missing)}, which compare reads"
            )
        if not isinstance(record["id"], str) or not isinstance(record["success"], bool):
            raise ResultsError(f"{path}:{number}: not a result record (its id must be text and success true or false)")
        records.append(record)
    return records


def load_results(folder: str | Path) -> Results:
    """Read a folder written by `python -m tinyagent.eval`; raise ResultsError with one line if it cannot be."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ResultsError(f"{folder}: no such results folder")
    path = folder / "summary.json"
    if not path.is_file():
        raise ResultsError(f"{folder}: no summary.json (not a results folder of python -m tinyagent.eval)")
    results = Results(folder, upgraded(_json(path, "summary"), path))
    for mode in results.modes:
        file = folder / FILES[mode]
        if file.is_file():
            results.records[mode] = read_records(file)
        else:
            results.notes.append(f"no {FILES[mode]}: no per-question results for {mode}")
    return results


def labels(runs: list[Results]) -> list[str]:
    """A short name per folder: its name, or its path when two folders share a name."""
    names = [r.folder.name for r in runs]
    return [str(r.folder) if names.count(n) > 1 else n for r, n in zip(runs, names)]


def columns_of(runs: list[Results]) -> list[tuple[str, Results, str]]:
    """(label, folder, mode) per column: each folder's agent and direct runs."""
    out = []
    for run, name in zip(runs, labels(runs)):
        for mode in run.modes:
            out.append((mode if len(runs) == 1 else f"{name} {mode}", run, mode))
    return out


def differences(run: Results, first: Results, mode: str = AGENT) -> str:
    """What `run` was made with that `first` was not (the first folder is the reference), in a few words; for a
    direct or rag column, the agent's own settings (tools, turn cap, constrained decoding) do not count, and
    rag's search tool counts only for a rag column."""
    if run.summary["format_version"] < max(READS):
        return "not recorded (older format)"
    if run is first:
        return "reference"
    mine, theirs = run.run, first.run
    keys = compared(mode)
    changed = [f"{key}={_short(mine.get(key))}" for key in keys if key in mine and mine.get(key) != theirs.get(key)]
    if mine.get("suite_sha256") != theirs.get("suite_sha256"):
        changed.insert(0, "OTHER SUITE")
    return ", ".join(changed) or "same"


def _short(value) -> str:
    """A setting in a few characters: JSON for a mapping or list, a checksum's first 12 hex digits."""
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    text = str(value)
    return text[:12] if re.fullmatch(r"[0-9a-f]{64}", text) else text


def comparison(runs: list[Results]) -> dict:
    """Everything `compare` shows, as JSON: the columns with their summaries, and the flips."""
    cols = columns_of(runs)
    return {
        "columns": [
            {
                "label": label,
                "folder": str(run.folder),
                "mode": mode,
                "summary": run.summary[mode],
                "run": run.run,
                "settings": differences(run, runs[0], mode),
                "notes": run.notes,
            }
            for label, run, mode in cols
        ],
        "flips": disagreements(
            [(label, run.records.get(mode, [])) for label, run, mode in cols if run.records.get(mode)]
        ),
    }


def format_comparison(data: dict) -> str:
    cols = data["columns"]
    notes = [("settings", [c["settings"] for c in cols])]
    if any(c["notes"] for c in cols):
        notes.append(("notes", ["; ".join(c["notes"]) or "-" for c in cols]))
    suites = {c["run"].get("suite_sha256") or c["run"].get("suite") for c in cols if c["run"].get("suite")}
    notes.append(("suite", [Path(c["run"]["suite"]).name if c["run"].get("suite") else "?" for c in cols]))
    table = side_by_side([(c["label"], c["summary"]) for c in cols], notes)
    if len(suites) > 1:
        table += "\nwarning: the folders ran different suites; only the questions they share are compared"
    return table + "\n" + format_disagreements(data["flips"], SHOWN_FLIPS)


def _parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description="Compare result folders of python -m tinyagent.eval in one "
        "table, and write a chart (PNG, and an HTML page with every question and trace).",
    )
    p.add_argument("folders", nargs="+", metavar="DIR", help="results folders (the first is the reference)")
    p.add_argument("--out", help="where the chart goes (default out/compare-<time>)")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    return p


def main(argv: list[str] | None = None, prog: str = "python -m tinyagent.eval compare") -> int:
    args = _parser(prog).parse_args(argv)
    try:
        runs = [load_results(folder) for folder in args.folders]
    except ResultsError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    data = comparison(runs)
    out = Path(args.out or f"out/compare-{time.strftime('%Y%m%d-%H%M%S')}")
    try:
        out.mkdir(parents=True, exist_ok=True)
        written = charts.write_all(out, data, {str(r.folder): r for r in runs})
    except OSError as e:
        print(f"error: cannot write the chart into {out}: {e.strerror or e}", file=sys.stderr)
        return 1
    stream = sys.stderr if args.json else sys.stdout
    if not args.json:
        print(format_comparison(data), flush=True)
    for line in written:
        print(line, file=stream, flush=True)
    if args.json:
        print(json.dumps(data, ensure_ascii=False, indent=2))
    return 0
