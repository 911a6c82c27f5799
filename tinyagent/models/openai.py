"""OpenAIChatModel: any OpenAI-compatible chat server (vLLM, LMDeploy, `transformers serve`, hosted APIs).

Plain `requests`, no vendor SDK. The agent's scratchpad (a trailing assistant message) is sent one
of two ways, chosen by `scratchpad`:

- "continue": the assistant message goes last with `continue_final_message: true` and
  `add_generation_prompt: false`, so the server's chat template leaves it open and the model
  continues it. vLLM accepts these fields. `transformers serve` (5.x) rejects them (HTTP 422),
  and LMDeploy ignores them and starts a new turn, so use "fold" there.
- "fold": the scratchpad is appended to the last user message with an instruction to continue it;
  no assistant message is sent. Works with every OpenAI-compatible server.

A `constraint` (the agent's `constrained=True`) is sent as a regex for servers with regex-guided
decoding, chosen by `guided_decoding`: "structured_outputs" (vLLM 0.12 and later) or "guided_regex"
(older vLLM). `response_format` is not used: a ReAct step is text around a JSON object, not JSON.
Without `guided_decoding` the reply is not constrained, and a warning says so.

The tools protocol sends `tools=` and reads the reply's `tool_calls` (also streamed, in pieces), which
vLLM, LMDeploy, the llama.cpp server, Ollama and `transformers serve` return; the run's replies go back
as assistant turns with their `tool_calls` and `tool` messages naming each call's id.

A little over 300 lines: one HTTP client whose request and reply each have their two shapes.
"""
from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Iterator

import requests

from ..format.messages import Message, fold_scratchpad
from ..format.step_format import pattern_of, require_outlines
from ..http import RequestFailed, json_body, post_json
from ..secrets import register_secret
from ..text import StopHoldback, TextCallback, trim_at_stop
from .base import BaseModel, Completion
from .openai_calls import MESSAGE_KEYS, ToolCallPieces

log = logging.getLogger(__name__)

SCRATCHPAD_MODES = ("continue", "fold")
GUIDED_DECODING_FIELDS = ("structured_outputs", "guided_regex")
#: OpenAI's own API accepts at most 4 stop strings; any further ones are applied here only.
MAX_SERVER_STOPS = 4

class OpenAIChatModel(BaseModel):
    """A chat model behind `POST {base_url}/chat/completions`.

    `api_key` defaults to the OPENAI_API_KEY environment variable; it is sent as a bearer token and
    never appears in logs, errors or the repr. Timeouts, refused connections, 429 and 5xx are
    retried `max_retries` times with bounded backoff. Passing `on_text` to `generate` streams the
    reply (server-sent events). One instance is safe to share between threads.
    """

    #: the tools protocol: the server shows the tools and parses the calls (its own format, whatever it is)
    native_tools = True
    tool_call_turns = True

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 2,
        scratchpad: str = "continue",
        backoff: float = 0.5,
        guided_decoding: str | None = None,
        **generation_defaults,
    ):
        if scratchpad not in SCRATCHPAD_MODES:
            raise ValueError(f"scratchpad must be one of {SCRATCHPAD_MODES}, not {scratchpad!r}")
        if guided_decoding not in (None, *GUIDED_DECODING_FIELDS):
            raise ValueError(f"guided_decoding must be None or one of {GUIDED_DECODING_FIELDS}, "
                             f"not {guided_decoding!r}")
        if guided_decoding is not None:
            require_outlines()  # it builds the regex
        self.check_generation_options(generation_defaults, where="__init__", agent_options=False)
        self.base_url = base_url.rstrip("/")
        self.url = f"{self.base_url}/chat/completions"
        self.model = model
        self.timeout = float(timeout)
        self.max_retries = int(max_retries)
        self.scratchpad = scratchpad
        self.backoff = float(backoff)
        self.generation_defaults = dict(generation_defaults)
        self.guided_decoding = guided_decoding
        self._warned_unconstrained = False
        self._api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY") or None
        register_secret(self._api_key)
        self._local = threading.local()

    @property
    def continue_supported(self) -> bool:
        """True when a trailing assistant message is sent as is and continued by the server
        (scratchpad="continue"); False when it is folded into the last user message."""
        return self.scratchpad == "continue"

    provider = "openai"  # the API it speaks, whatever serves it (vLLM, LMDeploy, transformers serve)
    model_id = property(lambda self: self.model)

    def __repr__(self) -> str:
        return (f"OpenAIChatModel(base_url={self.base_url!r}, model={self.model!r}, "
                f"scratchpad={self.scratchpad!r})")

    # --- the BaseModel interface -------------------------------------------------------------

    def generate(self, messages: list[Message], stop: list[str] | None = None, **kwargs) -> Completion:
        """The model's next text for `messages`, cut before the first stop string, with usage counts."""
        on_text: TextCallback | None = kwargs.pop("on_text", None)
        stops = [s for s in stop or () if s]
        payload = self.build_payload(messages, stops, **kwargs)
        if on_text is not None:
            payload["stream"] = True
            payload["stream_options"] = {"include_usage": True}
        started = time.perf_counter()
        response = self._post(payload)
        try:
            if on_text is not None and "text/event-stream" in response.headers.get("Content-Type", ""):
                text, usage, calls = self._read_stream(response, stops, on_text)
            else:  # also a server that ignored "stream" and sent one JSON body
                text, usage, calls = self._read_body(response)
                text = trim_at_stop(text, stops)
                if on_text is not None and text:
                    on_text(text)
        finally:
            response.close()
        return Completion(
            text,
            prompt_tokens=usage.get("prompt_tokens"),
            completion_tokens=usage.get("completion_tokens"),
            seconds=time.perf_counter() - started,
            cached_tokens=usage.get("cached_tokens"),
            tool_calls=calls,
            finish_reason=usage.get("finish_reason"),
        )

    def build_payload(self, messages: list[Message], stop: list[str] | None = None, **kwargs) -> dict:
        """The request body for `messages`: the scratchpad placed per `self.scratchpad`, settings applied."""
        self.check_generation_options(kwargs, where="generate")
        settings = {**self.generation_defaults, **{k: v for k, v in kwargs.items() if k in self.generation_options}}
        chat = [{k: m[k] for k in MESSAGE_KEYS if k in m} for m in messages]
        payload: dict = {"model": self.model}
        if kwargs.get("tools"):
            payload["tools"] = list(kwargs["tools"])
        if chat and chat[-1]["role"] == "assistant":
            if self.scratchpad == "continue":
                payload["continue_final_message"] = True
                payload["add_generation_prompt"] = False
            else:
                chat = fold_scratchpad(chat)
        payload["messages"] = chat
        if stop:
            payload["stop"] = list(stop)[:MAX_SERVER_STOPS]
        if settings.get("max_new_tokens") is not None:
            payload["max_tokens"] = int(settings["max_new_tokens"])
        for key in ("temperature", "top_p"):
            if settings.get(key) is not None:
                payload[key] = float(settings[key])
        if kwargs.get("constraint") is not None:
            self._add_constraint(payload, kwargs["constraint"])
        return payload

    def _add_constraint(self, payload: dict, constraint) -> None:
        """Send the reply format as a regex in the field the server reads, or warn (once) that it is not sent."""
        if self.guided_decoding is None:
            if not self._warned_unconstrained:
                self._warned_unconstrained = True
                log.warning("%s: replies are not constrained: set guided_decoding='structured_outputs' "
                            "(vLLM >= 0.12) or 'guided_regex' (older vLLM) for a server with regex-guided "
                            "decoding", self.base_url)
            return
        regex = pattern_of(constraint)
        if self.guided_decoding == "structured_outputs":
            payload["structured_outputs"] = {"regex": regex}
        else:
            payload["guided_regex"] = regex

    # --- HTTP --------------------------------------------------------------------------------

    def _session(self) -> requests.Session:
        """One connection pool per thread: requests.Session is not documented as thread safe."""
        session = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = requests.Session()
        return session

    def _post(self, payload: dict) -> requests.Response:
        headers = {"Content-Type": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        log.debug("POST %s (%d messages, stream=%s)", self.url, len(payload["messages"]),
                  bool(payload.get("stream")))
        response = post_json(self.url, payload, headers=headers, timeout=self.timeout,
                             max_retries=self.max_retries, backoff=self.backoff,
                             stream=bool(payload.get("stream")), session=self._session())
        if response.status_code >= 400:
            message = self._http_error(response, payload)
            response.close()
            raise RequestFailed(message, status=response.status_code)
        return response

    def _http_error(self, response: requests.Response, payload: dict) -> str:
        """A one-line message for a 4xx answer, with a hint when an optional field may have been refused."""
        try:
            body = response.json()
        except ValueError:
            body = response.text
        detail = _error_detail(body)
        message = f"{self.url} answered HTTP {response.status_code}: {detail}"
        if "continue_final_message" in payload and response.status_code in (400, 422):
            message += (" (this server may not support continuing an assistant message with "
                        "continue_final_message; set scratchpad='fold')")
        guided = [f for f in GUIDED_DECODING_FIELDS if f in payload]
        if guided and response.status_code in (400, 422):
            message += (f" (this server may not support regex-guided decoding through {guided[0]}; "
                        "try the other guided_decoding field, or None for unconstrained replies)")
        return message

    def _read_body(self, response: requests.Response) -> tuple[str, dict, list[dict] | None]:
        body = json_body(response, self.url)
        choice = _first_choice(body)
        message = choice.get("message") if choice is not None else None
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(message, dict) or not isinstance(content, (str, type(None))):
            keys = ", ".join(sorted(map(str, body))) or "none"
            raise RequestFailed(f"{self.url} answered without choices[0].message.content "
                                f"(top-level keys: {keys})", status=response.status_code)
        calls = ToolCallPieces()
        calls.add(message.get("tool_calls"))
        return content or "", {**_usage(body.get("usage")), "finish_reason": _finish_reason(choice)}, calls.result()

    def _read_stream(self, response: requests.Response, stops: list[str],
                     on_text: TextCallback) -> tuple[str, dict, list[dict] | None]:
        """Collect the streamed reply; on_text gets only text that cannot become part of a stop string."""
        holdback = StopHoldback(on_text, stops)
        text, usage, events, finish, calls = "", {}, 0, None, ToolCallPieces()
        for event in self._events(response, lambda: len(holdback.sent)):
            events += 1
            if isinstance(event.get("usage"), dict):
                usage = _usage(event["usage"])
            choice = _first_choice(event)
            finish = _finish_reason(choice) or finish
            delta = choice.get("delta") if choice is not None else None
            piece = delta.get("content") if isinstance(delta, dict) else None
            if isinstance(delta, dict):
                calls.add(delta.get("tool_calls"))
            if isinstance(piece, str) and piece and not holdback.stopped:
                text += piece  # after a stop string, read on only for the usage counts
                holdback.update(text)
        if not events:
            raise RequestFailed(f"{self.url} ended the stream without sending any data")
        text = trim_at_stop(text, stops)
        holdback.finish(text)
        return text, {**usage, "finish_reason": finish}, calls.result()

    def _events(self, response: requests.Response, received) -> Iterator[dict]:
        """The JSON objects of a server-sent event stream, up to `[DONE]` or the end of the body."""
        try:
            # chunk_size=None: each chunk of the (chunked) body as it arrives, not 512-byte blocks
            for raw in response.iter_lines(chunk_size=None):
                line = raw.decode("utf-8", errors="replace").strip()
                if not line.startswith("data:"):
                    continue  # blank separators, comments, `event:` / `id:` fields
                data = line[5:].strip()
                if data == "[DONE]":
                    return
                try:
                    event = json.loads(data)
                except ValueError:
                    raise RequestFailed(f"{self.url} streamed non-JSON data: {data[:80]!r}") from None
                if not isinstance(event, dict):
                    raise RequestFailed(f"{self.url} streamed JSON that is not an object")
                if "error" in event:
                    raise RequestFailed(f"{self.url} reported an error while streaming: {_error_detail(event)}")
                yield event
        except requests.RequestException as e:
            timed_out = isinstance(e, requests.Timeout) or "timed out" in str(e)
            reason = f"no data for {self.timeout:g}s (timeout)" if timed_out else type(e).__name__
            raise RequestFailed(f"the stream from {self.url} broke off after {received()} characters: {reason}",
                                retryable=True) from None


def _first_choice(body: dict) -> dict | None:
    choices = body.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        return choices[0]
    return None


def _finish_reason(choice: dict | None) -> str | None:
    return choice["finish_reason"] if choice and isinstance(choice.get("finish_reason"), str) else None


def _usage(usage) -> dict:
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


def _error_detail(body) -> str:
    """The human part of an error body: OpenAI's error.message, FastAPI's detail, or the text itself."""
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
    text = body if isinstance(body, str) else json.dumps(body, ensure_ascii=False)
    text = " ".join(text.split())
    return text[:200] + ("..." if len(text) > 200 else "") if text else "(empty body)"
