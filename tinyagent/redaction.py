"""The redaction that keeps API keys out of everything TinyAgent writes. A leaf: no project imports.

Secrets are the values of SECRET_ENV_VARS plus every value passed to `register_secret` (each
tool or model built with a key registers it; `register_url` the credentials a URL carries,
`register_args` the values of a command line's key-like flags). `redact` replaces them in text
we write, and strips any URL's credentials (`//user:pass@`, `?api-key=...`) even unregistered;
log records of every `tinyagent.*` logger are redacted as they are made (see `RedactingFilter`),
so a library user's own handlers never see a key either.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
from collections.abc import Iterable, Iterator, Sequence
from urllib.parse import parse_qsl, unquote, urlsplit

#: Environment variables whose values are secrets wherever they appear.
SECRET_ENV_VARS = ("SERPER_API_KEY", "OPENAI_API_KEY")
REDACTED = "[REDACTED]"
MIN_SECRET_CHARS = 4  # shorter values would redact ordinary words
#: Containers deeper than this are not walked: what lies below is replaced by NESTED_TOO_DEEPLY.
MAX_REDACT_DEPTH = 100
NESTED_TOO_DEEPLY = "[nested too deeply]"
#: Parts of a name (a query parameter, a command-line flag) that say its value is a credential.
KEY_WORDS = ("key", "token", "secret", "passw", "pwd", "credential", "signature")
_KEY_NAME_PARTS = frozenset({"auth", "sig"})
_extra_secrets: set[str] = set()
_lock = threading.Lock()


def register_secret(value: str | None) -> None:
    """Treat `value` (e.g. an api_key passed as an argument) as a secret from now on, in this process."""
    if value and len(value) >= MIN_SECRET_CHARS:
        with _lock:
            _extra_secrets.add(value)


@contextlib.contextmanager
def secret_scope(fresh: bool = False) -> Iterator[None]:
    """Forget, on leaving, the secrets registered inside (tests use it so none leak into the next);
    `fresh` also starts the scope with none registered."""
    global _extra_secrets
    with _lock:
        saved = set(_extra_secrets)
        if fresh:
            _extra_secrets = set()
    try:
        yield
    finally:
        with _lock:
            _extra_secrets = saved


def secrets() -> list[str]:
    """The secret values known now: registered ones and those in SECRET_ENV_VARS, longest first."""
    values = {os.environ.get(name, "") for name in SECRET_ENV_VARS} | set(_extra_secrets)
    return sorted((v for v in values if len(v) >= MIN_SECRET_CHARS), key=len, reverse=True)


def redact(value, known: Iterable[str] | None = None, _depth: int = 0):
    """Replace every secret inside `value` (a str, or str leaves of dicts / lists) by [REDACTED], and
    the credentials of any URL in it; containers past MAX_REDACT_DEPTH become NESTED_TOO_DEEPLY."""
    known = list(known) if known is not None else secrets()
    if isinstance(value, str):
        for secret in known:
            value = value.replace(secret, REDACTED)
        return strip_url_credentials(value)
    if isinstance(value, (dict, list, tuple)) and _depth >= MAX_REDACT_DEPTH:
        return NESTED_TOO_DEEPLY
    if isinstance(value, dict):
        return {redact(k, known, _depth + 1): redact(v, known, _depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact(v, known, _depth + 1) for v in value]
    return value


# --- credentials in URLs and command lines -----------------------------------------------------

_USERINFO = re.compile(r"(?<=://)[^/\s@'\"<>?#]+@")
_QUERY_VALUE = re.compile(r"(?<=[?&;])([^=&;\s#'\"<>]+)=([^&;\s#'\"<>]+)")


def key_like(name: str) -> bool:
    """True for a name whose value is a credential: api-key, access_token, X-Secret, --password, sig."""
    name = name.lower().lstrip("-")
    return any(word in name for word in KEY_WORDS) or bool(_KEY_NAME_PARTS & set(re.split(r"[-_.]", name)))


def strip_url_credentials(text: str) -> str:
    """`text` with every URL's user info and key-like query values replaced by [REDACTED]."""
    if "://" in text and "@" in text:
        text = _USERINFO.sub(REDACTED + "@", text)
    if "=" in text:
        text = _QUERY_VALUE.sub(
            lambda m: (
                f"{m.group(1)}={REDACTED}" if key_like(unquote(m.group(1))) and m.group(2) != REDACTED else m.group(0)
            ),
            text,
        )
    return text


def register_url(url: str | None) -> str | None:
    """Register the credentials `url` carries (its password, user info, key-like query values, each
    as written and percent-decoded) as secrets; return the URL without them, for display."""
    if not url:
        return url
    try:
        parts = urlsplit(url)
        query = parse_qsl(parts.query, keep_blank_values=False)
    except ValueError:  # not a URL after all; nothing of it is known to be a credential
        return strip_url_credentials(url)
    userinfo = parts.netloc.rpartition("@")[0]
    found = [userinfo, userinfo.partition(":")[2]] if userinfo else []
    found += [v for k, v in query if key_like(k)]
    found += [raw.partition("=")[2] for raw in parts.query.split("&") if key_like(unquote(raw.partition("=")[0]))]
    for value in found:
        register_secret(value)
        register_secret(unquote(value))
    return strip_url_credentials(url)


def register_args(args: Sequence[str], secret_flags: Iterable[str] = ()) -> None:
    """Register the values of a command line's key-like flags (`--api-token X`, `--api-token=X`) and of
    the flags named in `secret_flags`, and the credentials of every URL in it."""
    named = {f.lstrip("-").lower() for f in secret_flags}
    for i, arg in enumerate(args):
        flag, eq, value = arg.partition("=")
        secret = flag.startswith("-") and (key_like(flag) or flag.lstrip("-").lower() in named)
        if secret and eq:
            register_secret(value)
        elif secret and i + 1 < len(args):
            register_secret(args[i + 1])
        if "://" in arg:
            register_url(value if eq else arg)


# --- logging -----------------------------------------------------------------------------------


class RedactingFilter(logging.Filter):
    """Redacts a log record in place: its message, its arguments, its traceback and stack text.

    The traceback is formatted here into `record.exc_text`, redacted; `exc_info` stays, so a
    formatter sees there was an exception and prints `exc_text` instead of formatting it again.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        known = secrets()
        if isinstance(record.msg, str):
            record.msg = redact(record.msg, known)
        if isinstance(record.args, dict):
            record.args = {k: _redact_arg(v, known) for k, v in record.args.items()}
        elif record.args:
            record.args = tuple(_redact_arg(a, known) for a in record.args)
        try:
            message = record.getMessage()
        except (TypeError, ValueError):  # a malformed call: logging reports it itself
            message = ""
        if redact(message, known) != message:  # a secret split across the message and its arguments
            record.msg, record.args = redact(message, known), ()
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        for attr in ("exc_text", "stack_info"):
            if getattr(record, attr, None):
                setattr(record, attr, redact(getattr(record, attr), known))
        return True


def _redact_arg(value, known: list[str]):
    """A log argument with secrets replaced; a non-str argument whose text holds one becomes that text."""
    if isinstance(value, str):
        return redact(value, known)
    try:
        text = str(value)
    except Exception:  # noqa: BLE001 - a broken __str__ is logging's to report, not ours
        return value
    cleaned = redact(text, known)
    return cleaned if cleaned != text else value


LOG_FILTER = RedactingFilter()
_LOGGER = "tinyagent"


def _install_log_redaction() -> None:
    """Run LOG_FILTER on every record made for `tinyagent` and its children, through the record factory.

    A filter on the `tinyagent` logger alone would miss records logged on `tinyagent.agent` and
    the other module loggers, and filters on handlers miss the handlers a library user adds.
    """
    previous = logging.getLogRecordFactory()
    if getattr(previous, "_tinyagent_redacts", False):
        return

    def factory(name, *args, **kwargs) -> logging.LogRecord:
        record = previous(name, *args, **kwargs)
        if name == _LOGGER or name.startswith(_LOGGER + "."):
            LOG_FILTER.filter(record)
        return record

    factory._tinyagent_redacts = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(factory)


_install_log_redaction()
