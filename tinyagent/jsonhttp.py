"""JSON over HTTP with a timeout and bounded retries, shared by the Serper tool and the OpenAI backend.

Every body is read in pieces and refused past `max_bytes` (MAX_BODY_BYTES by default), so a server
cannot fill memory; a `Deadline` bounds a whole call, retries and reading included, even against a
server that trickles bytes forever. A redirect to another host, port or scheme drops every header
but the harmless ones (requests itself drops only Authorization: a key in X-API-KEY went along).
Error messages name the URL and the reason, never request headers (where API keys live).
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator

import requests

from .redaction import redact
from .text import clip

log = logging.getLogger(__name__)

RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
MAX_BACKOFF_S = 8.0
#: The most bytes of one answer read into memory (a reply of a few thousand tokens is tens of KB).
MAX_BODY_BYTES = 8 * 1024 * 1024
#: Bytes asked of the connection at a time: a chunked stream still arrives chunk by chunk.
READ_BYTES = 16 * 1024
#: Headers a redirect to another host keeps; every other header the caller set (keys) is dropped.
REDIRECT_SAFE_HEADERS = frozenset(
    {"accept", "accept-encoding", "content-type", "content-length", "user-agent", "connection"}
)
MAX_REDIRECTS = 5


class RequestFailed(Exception):
    """The request did not get a usable answer; `status` is the last HTTP status, if any.

    The message is redacted here, once, for every caller."""

    def __init__(self, message: str, status: int | None = None, retryable: bool = False):
        super().__init__(redact(message))  # a server may echo a key back in what the message quotes
        self.status = status
        self.retryable = retryable


class Session(requests.Session):
    """A requests Session whose redirects to another host, port or scheme carry no key."""

    def __init__(self) -> None:
        super().__init__()
        self.max_redirects = MAX_REDIRECTS

    def rebuild_auth(self, prepared_request, response) -> None:
        super().rebuild_auth(prepared_request, response)
        if self.should_strip_auth(response.request.url, prepared_request.url):
            for name in list(prepared_request.headers):
                if name.lower() not in REDIRECT_SAFE_HEADERS:
                    del prepared_request.headers[name]


class Deadline:
    """The end of a call's overall time limit (`seconds` None: no limit)."""

    def __init__(self, seconds: float | None):
        self.seconds = seconds
        self._end = None if seconds is None else time.monotonic() + seconds

    def remaining(self) -> float | None:
        return None if self._end is None else max(0.0, self._end - time.monotonic())

    def expired(self) -> bool:
        return self._end is not None and time.monotonic() >= self._end

    def failure(self, url: str) -> RequestFailed:
        return RequestFailed(
            f"{url} gave no complete answer within {self.seconds:g}s (the call's deadline)", retryable=True
        )

    @contextlib.contextmanager
    def watching(self, response: requests.Response) -> Iterator[None]:
        """While inside, the response's connection is shut when the deadline passes, which ends a read
        blocked on it (a socket timeout alone restarts with every byte that trickles in)."""
        remaining = self.remaining()
        if remaining is None:
            yield
            return
        timer = threading.Timer(remaining, _shut_connection, (response,))
        timer.daemon = True
        timer.start()
        try:
            yield
        finally:
            timer.cancel()


def _shut_connection(response: requests.Response) -> None:
    sock = getattr(getattr(response.raw, "_connection", None), "sock", None)
    with contextlib.suppress(OSError, AttributeError):
        sock.shutdown(socket.SHUT_RDWR)


def post_json(
    url: str,
    payload: dict,
    headers: dict | None = None,
    timeout: float = 30.0,
    max_retries: int = 2,
    backoff: float = 0.5,
    session: requests.Session | None = None,
    deadline: Deadline | None = None,
) -> requests.Response:
    """POST `payload`; retry timeouts, refused connections, 429 and 5xx with exponential backoff.

    Returns the response, its body not read yet (`json_body`, `body_chunks`), for any other status
    (the caller decides what a 4xx means); raises RequestFailed once the retries or the deadline are spent.
    """
    poster = session or Session()
    deadline = deadline or Deadline(None)
    attempts = max(0, int(max_retries)) + 1
    reason, status = "", None
    for attempt in range(attempts):
        if attempt:
            delay = min(MAX_BACKOFF_S, backoff * 2 ** (attempt - 1))
            left = deadline.remaining()
            if left is not None and left <= delay:
                raise deadline.failure(url)
            log.info("retrying %s in %.1fs (%s)", url, delay, reason)
            time.sleep(delay)
        limit = timeout if deadline.remaining() is None else min(timeout, deadline.remaining())
        if limit <= 0:
            raise deadline.failure(url)
        try:
            response = poster.post(url, json=payload, headers=headers or {}, timeout=limit, stream=True)
        except requests.Timeout:
            reason, status = f"no answer within {limit:g}s (timeout)", None
            continue
        except requests.ConnectionError:
            reason, status = "connection failed (is the server running?)", None
            continue
        except requests.RequestException as e:
            raise RequestFailed(f"request to {url} failed: {type(e).__name__}") from None
        if response.status_code in RETRY_STATUS:
            status = response.status_code
            reason = f"HTTP {status}" + (" (rate limited)" if status == 429 else " (server error)")
            response.close()
            continue
        return response
    if deadline.expired():
        raise deadline.failure(url)
    raise RequestFailed(
        f"request to {url} failed after {attempts} attempt{'s' * (attempts > 1)}: {reason}",
        status=status,
        retryable=True,
    )


def body_chunks(
    response: requests.Response,
    url: str,
    max_bytes: int = MAX_BODY_BYTES,
    deadline: Deadline | None = None,
    timeout: float | None = None,
    broke: Callable[[str], str] | None = None,
) -> Iterator[bytes]:
    """The body piece by piece as it arrives; RequestFailed past `max_bytes`, the deadline, or a broken
    read (its message `broke(reason)`, by default naming the bytes that came; `timeout` is named in it)."""
    deadline = deadline or Deadline(None)
    declared = response.headers.get("Content-Length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise _too_long(url, max_bytes, response.status_code)
    size = 0
    with deadline.watching(response):
        try:
            for chunk in response.iter_content(READ_BYTES):
                size += len(chunk)
                if size > max_bytes:
                    raise _too_long(url, max_bytes, response.status_code)
                if deadline.expired():
                    raise deadline.failure(url)
                yield chunk
        except requests.RequestException as e:
            if deadline.expired():
                raise deadline.failure(url) from None
            timed_out = isinstance(e, requests.Timeout) or "timed out" in str(e)
            reason = (
                (f"no data for {timeout:g}s (timeout)" if timeout else "no data in time (timeout)")
                if timed_out
                else type(e).__name__
            )
            message = broke(reason) if broke else f"the answer from {url} broke off after {size} bytes: {reason}"
            raise RequestFailed(message, retryable=True) from None
    if deadline.expired():  # the watchdog ended the read: the body is cut short
        raise deadline.failure(url)


def _too_long(url: str, max_bytes: int, status: int | None) -> RequestFailed:
    return RequestFailed(
        f"{url} sent an answer over {max_bytes} bytes (the limit); it was not read further", status=status
    )


def json_body(
    response: requests.Response, url: str, max_bytes: int = MAX_BODY_BYTES, deadline: Deadline | None = None
) -> dict:
    """The response body as a JSON object, or RequestFailed saying what came back instead."""
    data = b"".join(body_chunks(response, url, max_bytes, deadline))
    try:
        body = json.loads(data.decode(response.encoding or "utf-8", errors="replace"))
    except (ValueError, RecursionError, LookupError):
        snippet = clip(" ".join(data.decode("utf-8", errors="replace").split()), 80)  # redacted, then cut
        raise RequestFailed(f"{url} answered with non-JSON text: {snippet!r}", status=response.status_code) from None
    if not isinstance(body, dict):
        raise RequestFailed(f"{url} answered with JSON that is not an object", status=response.status_code)
    return body
