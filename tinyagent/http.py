"""JSON over HTTP with a timeout and bounded retries, shared by the Serper tool and the OpenAI backend.

Error messages name the URL and the reason, never request headers (where API keys live).
"""
from __future__ import annotations

import logging
import time

import requests

from .secrets import redact

log = logging.getLogger(__name__)

RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
MAX_BACKOFF_S = 8.0


class RequestFailed(Exception):
    """The request did not get a usable answer; `status` is the last HTTP status, if any.

    The message is redacted here, once, for every caller."""

    def __init__(self, message: str, status: int | None = None, retryable: bool = False):
        super().__init__(redact(message))  # a server may echo a key back in what the message quotes
        self.status = status
        self.retryable = retryable


def post_json(
    url: str,
    payload: dict,
    headers: dict | None = None,
    timeout: float = 30.0,
    max_retries: int = 2,
    backoff: float = 0.5,
    stream: bool = False,
    session: requests.Session | None = None,
) -> requests.Response:
    """POST `payload`; retry timeouts, refused connections, 429 and 5xx with exponential backoff.

    Returns the response for any other status (the caller decides what a 4xx means);
    raises RequestFailed once the retries are spent.
    """
    poster = session or requests
    attempts = max(0, int(max_retries)) + 1
    reason, status = "", None
    for attempt in range(attempts):
        if attempt:
            delay = min(MAX_BACKOFF_S, backoff * 2 ** (attempt - 1))
            log.info("retrying %s in %.1fs (%s)", url, delay, reason)
            time.sleep(delay)
        try:
            response = poster.post(url, json=payload, headers=headers or {}, timeout=timeout, stream=stream)
        except requests.Timeout:
            reason, status = f"no answer within {timeout:g}s (timeout)", None
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
    raise RequestFailed(
        f"request to {url} failed after {attempts} attempt{'s' * (attempts > 1)}: {reason}",
        status=status, retryable=True,
    )


def json_body(response: requests.Response, url: str) -> dict:
    """The response body as a JSON object, or RequestFailed saying what came back instead."""
    try:
        body = response.json()
    except ValueError:
        snippet = response.text[:80].replace("\n", " ")
        raise RequestFailed(f"{url} answered with non-JSON text: {snippet!r}", status=response.status_code) from None
    if not isinstance(body, dict):
        raise RequestFailed(f"{url} answered with JSON that is not an object", status=response.status_code)
    return body
