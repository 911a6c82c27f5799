"""Reading an OpenAI-style chat answer: a streamed reply of server-sent events, bounded, or one JSON body.

A stream is read only as long as it is needed: it is closed as soon as the reply reaches a stop
string, or when the server sends more content pieces than the `max_tokens` it was asked for (each
piece carries at least one token). Bytes and time are bounded by `http.body_chunks`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator

import requests

from ..jsonhttp import Deadline, RequestFailed, body_chunks, json_body
from ..text import StopHoldback, TextCallback, clip, estimate_tokens, trim_at_stop
from .openai_calls import ToolCallPieces

log = logging.getLogger(__name__)


def read_stream(
    response: requests.Response,
    url: str,
    stops: list[str],
    on_text: TextCallback,
    max_tokens: int | None,
    max_bytes: int,
    deadline: Deadline,
    timeout: float,
) -> tuple[str, dict, list[dict] | None]:
    """The streamed reply, its usage counts (estimated when the server sent none before the stream was
    closed) and its tool calls; on_text gets only text that cannot become part of a stop string."""
    holdback = StopHoldback(on_text, stops)
    text, usage, events, pieces, finish, calls = "", {}, 0, 0, None, ToolCallPieces()
    for event in _events(response, url, max_bytes, deadline, timeout, lambda: len(holdback.sent)):
        events += 1
        if isinstance(event.get("usage"), dict):
            usage = usage_counts(event["usage"])
        choice = first_choice(event)
        finish = finish_reason(choice) or finish
        delta = choice.get("delta") if choice is not None else None
        piece = delta.get("content") if isinstance(delta, dict) else None
        if isinstance(delta, dict):
            calls.add(delta.get("tool_calls"))
        if not isinstance(piece, str) or not piece:
            continue
        if max_tokens is not None and pieces >= max_tokens:
            log.info("%s streamed past max_tokens=%d; the reply ends there", url, max_tokens)
            finish = "length"
            break
        text, pieces = text + piece, pieces + 1
        holdback.update(text)
        if holdback.stopped:  # the reply is complete: no need to read on
            finish = "stop"
            break
    if not events:
        raise RequestFailed(f"{url} ended the stream without sending any data")
    text = trim_at_stop(text, stops)
    holdback.finish(text)
    if usage.get("completion_tokens") is None:
        usage = {**usage, "completion_tokens": max(pieces, estimate_tokens(text))}
    return text, {**usage, "finish_reason": finish}, calls.result()


def read_body(
    response: requests.Response, url: str, max_bytes: int, deadline: Deadline
) -> tuple[str, dict, list[dict] | None]:
    """The reply of a JSON (non-streamed) answer, its usage counts and its tool calls."""
    body = json_body(response, url, max_bytes, deadline)
    choice = first_choice(body)
    message = choice.get("message") if choice is not None else None
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(message, dict) or not isinstance(content, (str, type(None))):
        keys = ", ".join(sorted(map(str, body))) or "none"
        raise RequestFailed(
            f"{url} answered without choices[0].message.content (top-level keys: {clip(keys, 200)})",
            status=response.status_code,
        )
    calls = ToolCallPieces()
    calls.add(message.get("tool_calls"))
    return content or "", {**usage_counts(body.get("usage")), "finish_reason": finish_reason(choice)}, calls.result()


def _events(
    response: requests.Response,
    url: str,
    max_bytes: int,
    deadline: Deadline,
    timeout: float,
    received: Callable[[], int],
) -> Iterator[dict]:
    """The JSON objects of a server-sent event stream, up to `[DONE]` or the end of the body."""

    def broke(reason: str) -> str:
        return f"the stream from {url} broke off after {received()} characters: {reason}"

    for raw in _lines(body_chunks(response, url, max_bytes, deadline, timeout, broke)):
        line = raw.decode("utf-8", errors="replace").strip()
        if not line.startswith("data:"):
            continue  # blank separators, comments, `event:` / `id:` fields
        data = line[5:].strip()
        if data == "[DONE]":
            return
        try:
            event = json.loads(data)
        except (ValueError, RecursionError):
            raise RequestFailed(f"{url} streamed non-JSON data: {clip(data, 80)!r}") from None
        if not isinstance(event, dict):
            raise RequestFailed(f"{url} streamed JSON that is not an object")
        if "error" in event:
            raise RequestFailed(f"{url} reported an error while streaming: {error_detail(event)}")
        yield event


def _lines(chunks: Iterator[bytes]) -> Iterator[bytes]:
    """The lines of a body that arrives in chunks, each yielded as soon as its newline has come."""
    pending, scanned = bytearray(), 0
    for chunk in chunks:
        pending += chunk
        while (end := pending.find(b"\n", scanned)) >= 0:
            yield bytes(pending[:end])
            del pending[: end + 1]
            scanned = 0
        scanned = len(pending)
    if pending:
        yield bytes(pending)


def first_choice(body: dict) -> dict | None:
    choices = body.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        return choices[0]
    return None


def finish_reason(choice: dict | None) -> str | None:
    return choice["finish_reason"] if choice and isinstance(choice.get("finish_reason"), str) else None


def usage_counts(usage) -> dict:
    """prompt / completion / cached token counts from an OpenAI `usage` object; missing ones are None."""
    if not isinstance(usage, dict):
        return {}
    details = usage.get("prompt_tokens_details")
    counts = {
        "prompt_tokens": usage.get("prompt_tokens"),
        "completion_tokens": usage.get("completion_tokens"),
        "cached_tokens": details.get("cached_tokens") if isinstance(details, dict) else None,
    }
    return {k: v if isinstance(v, int) and not isinstance(v, bool) else None for k, v in counts.items()}


def error_detail(body) -> str:
    """The human part of an error body: OpenAI's error.message, FastAPI's detail, or the text itself;
    redacted, then cut to 200 characters."""
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and error.get("message"):
            body = error["message"]
        elif error:
            body = error
        elif "detail" in body:
            body = body["detail"]
        elif "message" in body:
            body = body["message"]
    try:
        text = body if isinstance(body, str) else json.dumps(body, ensure_ascii=False, default=str)
    except (ValueError, RecursionError):  # nested past what json can write back
        text = "(an error body too deeply nested to show)"
    return clip(" ".join(text.split()), 200, "...") if text.strip() else "(empty body)"
