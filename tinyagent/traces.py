"""JSON records of runs: dataclasses as plain JSON values, one redacted line each, and the JSONL trace
writer the CLI, the eval harness and the demo append to."""

from __future__ import annotations

import dataclasses
import json
import os
import threading

from .redaction import NESTED_TOO_DEEPLY, redact
from .text import escape_controls

#: Containers deeper than this in a record are written as NESTED_TOO_DEEPLY (a run's own records nest
#: about 6 deep; a tool's arguments add their own levels, at most format.arguments.MAX_ARGS_DEPTH).
MAX_DEPTH = 64


def to_jsonable(obj, _depth: int = 0):
    """Dataclasses (steps, results) and containers -> plain JSON values, at most MAX_DEPTH levels deep."""
    container = isinstance(obj, (dict, list, tuple)) or dataclasses.is_dataclass(obj) and not isinstance(obj, type)
    if container and _depth >= MAX_DEPTH:
        return NESTED_TOO_DEEPLY
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_jsonable(getattr(obj, f.name), _depth + 1) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v, _depth + 1) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v, _depth + 1) for v in obj]
    if obj is None or isinstance(obj, (bool, int, float)):
        return obj
    return str(obj)


def dumps(obj) -> str:
    """One redacted JSON line; DEL and the C1 controls (which JSON leaves as they are) written as JSON escapes,
    so a line printed on a terminal (`--json`) cannot drive it either."""
    return escape_controls(json.dumps(redact(to_jsonable(obj)), ensure_ascii=False))


class TraceWriter:
    """Appends one redacted JSON line per record to a file; flushes each line so a crash keeps them."""

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        self._file = open(self.path, "a", encoding="utf-8")
        self._lock = threading.Lock()

    def write(self, record) -> None:
        with self._lock:
            self._file.write(dumps(record) + "\n")
            self._file.flush()

    __call__ = write

    def close(self) -> None:
        with self._lock:
            self._file.close()

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
