"""An evaluation's results folder: never overwritten by accident, resumable, written so a crash loses
at most the question in progress.

Each mode's records file (`results.jsonl` for the agent, `direct.jsonl` for the model alone) gets one
line per question as it finishes, flushed; at the end it is rewritten in suite order, and `summary.json`
written, each to a temporary file renamed over the old one, so a reader
never sees half a file. A folder that holds results is refused unless `resume` (keep the questions
that ran, run the rest; a run that crashed is run again) or `overwrite` is asked for.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

from ..redaction import redact

log = logging.getLogger(__name__)

RESULTS, SUMMARY = "results.jsonl", "summary.json"
#: What every record has held since the first results format: one without them is run again on --resume.
RECORD_FIELDS = (
    "id",
    "question",
    "answer",
    "prediction",
    "success",
    "format_valid",
    "steps",
    "valid_replies",
    "format_errors",
    "tool_errors",
    "stop_reason",
    "prompt_tokens",
    "completion_tokens",
    "seconds",
    "error",
)
#: Fields later versions added, and what an older record means by their absence (approval came later: none
#: of its calls were refused or edited).
ADDED_FIELDS = {"repeated_calls": 0, "refused_calls": 0, "edited_calls": 0}


class ResultsError(Exception):
    """The results folder cannot be used as asked; the message says why and what to pass."""


def holds_results(out: Path, names: Sequence[str] = (RESULTS,)) -> bool:
    return (out / SUMMARY).exists() or any((out / n).exists() and (out / n).stat().st_size > 0 for n in names)


def prepare(
    out: Path, resume: bool = False, overwrite: bool = False, names: Sequence[str] = (RESULTS,)
) -> dict[str, list[dict]]:
    """For each records file in `names`, the records to keep from an earlier run in `out` (none unless
    `resume`); ResultsError when the folder holds results and neither `resume` nor `overwrite` says what
    to do with them."""
    if resume and overwrite:
        raise ResultsError("--resume and --overwrite cannot be used together")
    if not holds_results(out, names) or overwrite:
        return {name: [] for name in names}
    if not resume:
        raise ResultsError(
            f"{out} already holds results; pass --resume to finish that run or --overwrite to replace it"
        )
    kept = {}
    for name in names:
        records = (upgraded(record, out / name) for record in read_records(out / name))
        kept[name] = [r for r in records if r is not None and r.get("error") is None]
    return kept


def upgraded(record: dict, path: Path) -> dict | None:
    """An earlier run's record in the current format: the fields added since get their defaults
    (ADDED_FIELDS); a record without one of RECORD_FIELDS is not one to keep (None: its question runs again)."""
    missing = [key for key in RECORD_FIELDS if key not in record]
    if missing:
        log.warning(
            "%s: the record of %s has no %s; that question runs again", path, record.get("id"), ", ".join(missing)
        )
        return None
    return {**ADDED_FIELDS, **record}


def read_records(path: Path) -> list[dict]:
    """The records of a results.jsonl, the last one for each id; a line cut off by a crash is skipped."""
    if not path.exists():
        return []
    records: dict[str, dict] = {}
    with open(path, encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, 1):
            try:
                record = json.loads(line)
            except (ValueError, RecursionError):
                log.warning(
                    "%s, line %d: not a whole record (cut off by a crash?); that question runs again", path, number
                )
                continue
            if isinstance(record, dict) and isinstance(record.get("id"), str):
                records[record["id"]] = record
    return list(records.values())


def in_suite_order(ids: Sequence[str], records: Iterable[dict]) -> list[dict]:
    """`records` in the order of `ids`; records of other ids (an earlier, longer run) follow as they were."""
    by_id = {r["id"]: r for r in records}
    ordered = [by_id.pop(i) for i in ids if i in by_id]
    return ordered + list(by_id.values())


class Appender:
    """results.jsonl open for appending: the kept records first (rewritten whole), then one line per
    question as it finishes, flushed, so a crash keeps every finished question."""

    def __init__(self, out: Path, kept: Sequence[dict], name: str = RESULTS):
        write_atomically(out / name, _lines(kept))
        self._file = open(out / name, "a", encoding="utf-8")

    def append(self, record: dict) -> None:
        self._file.write(_lines([record]))
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> Appender:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def write_records(path: Path, records: Sequence[dict]) -> None:
    """A mode's final records file, replacing the old one in one rename."""
    write_atomically(path, _lines(records))


def write_summary(out: Path, summary: dict) -> None:
    """summary.json (redacted), replacing the old one in one rename."""
    write_atomically(out / SUMMARY, json.dumps(redact(summary), ensure_ascii=False, indent=2) + "\n")


def write_atomically(path: Path, text: str) -> None:
    """`path` holds `text` afterwards, or (after a crash) what it held before: written aside, then renamed."""
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _lines(records: Iterable[dict]) -> str:
    return "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records)
