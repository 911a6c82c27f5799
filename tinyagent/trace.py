"""JSONL traces of agent steps, and the redaction that keeps API keys out of everything we write."""
from __future__ import annotations

import dataclasses
import json
import os
import threading
from collections.abc import Iterable

#: Environment variables whose values are secrets wherever they appear.
SECRET_ENV_VARS = ("SERPER_API_KEY", "OPENAI_API_KEY")
REDACTED = "[REDACTED]"
_extra_secrets: set[str] = set()
_lock = threading.Lock()


def register_secret(value: str | None) -> None:
    """Treat `value` (e.g. an api_key passed as an argument) as a secret from now on."""
    if value and len(value) >= 4:
        with _lock:
            _extra_secrets.add(value)


def secrets() -> list[str]:
    """The secret values known now: registered ones and those in SECRET_ENV_VARS."""
    values = {os.environ.get(name, "") for name in SECRET_ENV_VARS} | set(_extra_secrets)
    return sorted((v for v in values if len(v) >= 4), key=len, reverse=True)


def redact(value, known: Iterable[str] | None = None):
    """Replace every secret inside `value` (a str, or str leaves of dicts / lists) by [REDACTED]."""
    known = list(known) if known is not None else secrets()
    if not known:
        return value
    if isinstance(value, str):
        for secret in known:
            value = value.replace(secret, REDACTED)
        return value
    if isinstance(value, dict):
        return {redact(k, known): redact(v, known) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact(v, known) for v in value]
    return value


def to_jsonable(obj):
    """Dataclasses (steps, results) and containers -> plain JSON values."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if obj is None or isinstance(obj, (bool, int, float)):
        return obj
    return str(obj)


def dumps(obj) -> str:
    """One redacted JSON line."""
    return json.dumps(redact(to_jsonable(obj)), ensure_ascii=False)


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
