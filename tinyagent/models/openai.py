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

Every call is bounded: `deadline` seconds in all (retries and reading included), `max_response_bytes`
of any body, `max_new_tokens` content pieces of a stream (models/sse.py). `context_window`, given or
read from the server's model list, lets the agent fit prompts as it does for local models; their
tokens are estimated (`text.estimate_tokens`), there being no tokenizer at hand.

The tools protocol sends `tools=` and reads the reply's `tool_calls` (also streamed, in pieces), which
vLLM, LMDeploy, the llama.cpp server, Ollama and `transformers serve` return; the run's replies go back
as assistant turns with their `tool_calls` and `tool` messages naming each call's id.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Sequence

import requests

from ..format.messages import Message, fold_scratchpad
from ..format.step_format import pattern_of, require_outlines
from ..jsonhttp import MAX_BODY_BYTES, Deadline, RequestFailed, Session, body_chunks, json_body, post_json
from ..redaction import register_secret, register_url
from ..text import TextCallback, estimate_tokens, trim_at_stop
from .model import BaseModel, Reply
from .openai_calls import MESSAGE_KEYS
from .sse import error_detail, read_body, read_stream

log = logging.getLogger(__name__)

SCRATCHPAD_MODES = ("continue", "fold")
GUIDED_DECODING_FIELDS = ("structured_outputs", "guided_regex")
#: OpenAI's own API accepts at most 4 stop strings; any further ones are applied here only.
MAX_SERVER_STOPS = 4
#: Seconds one `generate` call may take in all, retries and reading included.
DEFAULT_DEADLINE = 600.0
#: An error answer's body is read up to this many bytes, for its message.
ERROR_BODY_BYTES = 64 * 1024
#: Where a model list entry states the context window: vLLM, OpenRouter, Groq, LM Studio, llama.cpp.
CONTEXT_WINDOW_KEYS = ("max_model_len", "context_length", "context_window", "max_context_length", "n_ctx")
#: Tokens a chat template adds around each message (role markers), in the prompt estimate.
MESSAGE_OVERHEAD_TOKENS = 8


class OpenAIChatModel(BaseModel):
    """A chat model behind `POST {base_url}/chat/completions`.

    `api_key` defaults to the OPENAI_API_KEY environment variable; it is sent as a bearer token and
    never appears in logs, errors or the repr, nor do credentials in `base_url`. Timeouts, refused
    connections, 429 and 5xx are retried `max_retries` times with bounded backoff, within `deadline`.
    Passing `on_text` to `generate` streams the reply (server-sent events). `context_window` (tokens;
    None: asked of the server's model list) makes the agent fit prompts to it. `control_tokens`: the
    served model's chat-template tokens, broken up in tool output. Safe to share between threads.
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
        deadline: float | None = DEFAULT_DEADLINE,
        max_response_bytes: int = MAX_BODY_BYTES,
        context_window: int | None = None,
        control_tokens: Sequence[str] = (),
        **generation_defaults,
    ):
        if scratchpad not in SCRATCHPAD_MODES:
            raise ValueError(f"scratchpad must be one of {SCRATCHPAD_MODES}, not {scratchpad!r}")
        if guided_decoding not in (None, *GUIDED_DECODING_FIELDS):
            raise ValueError(
                f"guided_decoding must be None or one of {GUIDED_DECODING_FIELDS}, not {guided_decoding!r}"
            )
        if deadline is not None and not deadline > 0:
            raise ValueError(f"deadline must be a positive number of seconds or None, not {deadline!r}")
        if guided_decoding is not None:
            require_outlines()  # it builds the regex
        self.check_generation_options(generation_defaults, where="__init__", agent_options=False)
        self.base_url = base_url.rstrip("/")
        self.shown_url = register_url(self.base_url)  # its credentials are secrets from now on
        self.url = f"{self.base_url}/chat/completions"
        self.model = model
        self.timeout = float(timeout)
        self.max_retries = int(max_retries)
        self.scratchpad = scratchpad
        self.backoff = float(backoff)
        self.deadline = deadline
        self.max_response_bytes = int(max_response_bytes)
        self.control_tokens = tuple(t for t in control_tokens if t)
        self.generation_defaults = dict(generation_defaults)
        self.guided_decoding = guided_decoding
        self._warned_unconstrained = False
        self._api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY") or None
        register_secret(self._api_key)
        self._local = threading.local()
        self._window, self._window_known = context_window, context_window is not None
        self._window_lock = threading.Lock()

    @property
    def continue_supported(self) -> bool:
        """True when a trailing assistant message is sent as is and continued by the server
        (scratchpad="continue"); False when it is folded into the last user message."""
        return self.scratchpad == "continue"

    provider = "openai"  # the API it speaks, whatever serves it (vLLM, LMDeploy, transformers serve)
    model_id = property(lambda self: self.model)

    def __repr__(self) -> str:
        return f"OpenAIChatModel(base_url={self.shown_url!r}, model={self.model!r}, scratchpad={self.scratchpad!r})"

    # --- the context window ------------------------------------------------------------------

    @property
    def context_window(self) -> int | None:
        """The window in tokens: as given, else what the server's model list says (asked once), else None."""
        with self._window_lock:
            if not self._window_known:
                self._window, self._window_known = self._listed_window(), True
            return self._window

    def _listed_window(self) -> int | None:
        """The served model's context window from `GET {base_url}/models`, where the entry says it."""
        url = f"{self.base_url}/models"
        try:
            with self._session().get(url, headers=self._headers(), timeout=self.timeout, stream=True) as response:
                body = json_body(response, url, self.max_response_bytes, Deadline(self.timeout)) if response.ok else {}
        except (requests.RequestException, RequestFailed) as e:
            log.info("%s: no model list (%s); prompts are not fitted to a window", self.shown_url, e)
            return None
        entries = body.get("data") if isinstance(body.get("data"), list) else []
        for entry in (e for e in entries if isinstance(e, dict) and e.get("id") == self.model):
            for where in (entry, entry.get("meta")):
                for key in CONTEXT_WINDOW_KEYS:
                    value = where.get(key) if isinstance(where, dict) else None
                    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                        return value
        return None

    def count_tokens(self, messages: list[Message], tools: list[dict] | None = None) -> int:
        """The prompt's tokens, estimated (the server's tokenizer is not at hand): each message's text and tool
        calls, and the `tools` the server shows the model."""
        total = sum(estimate_tokens(str(m.get("content") or "")) + MESSAGE_OVERHEAD_TOKENS for m in messages)
        shown = [m["tool_calls"] for m in messages if m.get("tool_calls")] + ([tools] if tools else [])
        return total + sum(estimate_tokens(json.dumps(part, ensure_ascii=False, default=str)) for part in shown)

    # --- the BaseModel interface -------------------------------------------------------------

    def generate(self, messages: list[Message], stop: list[str] | None = None, **kwargs) -> Reply:
        """The model's next text for `messages`, cut before the first stop string, with usage counts
        (estimated where the server sent none)."""
        on_text: TextCallback | None = kwargs.pop("on_text", None)
        stops = [s for s in stop or () if s]
        payload = self.build_payload(messages, stops, **kwargs)
        if on_text is not None:
            payload["stream"] = True
            payload["stream_options"] = {"include_usage": True}
        started, deadline = time.perf_counter(), Deadline(self.deadline)
        response = self._post(payload, deadline)
        try:
            if on_text is not None and "text/event-stream" in response.headers.get("Content-Type", ""):
                text, usage, calls = read_stream(
                    response,
                    self.url,
                    stops,
                    on_text,
                    payload.get("max_tokens"),
                    self.max_response_bytes,
                    deadline,
                    self.timeout,
                )
            else:  # also a server that ignored "stream" and sent one JSON body
                text, usage, calls = read_body(response, self.url, self.max_response_bytes, deadline)
                text = trim_at_stop(text, stops)
                if on_text is not None and text:
                    on_text(text)
        finally:
            response.close()
        prompt_tokens, completion_tokens = usage.get("prompt_tokens"), usage.get("completion_tokens")
        return Reply(
            text,
            prompt_tokens=self.count_tokens(payload["messages"], payload.get("tools"))
            if prompt_tokens is None
            else prompt_tokens,
            completion_tokens=estimate_tokens(text) if completion_tokens is None else completion_tokens,
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
                log.warning(
                    "%s: replies are not constrained: set guided_decoding='structured_outputs' "
                    "(vLLM >= 0.12) or 'guided_regex' (older vLLM) for a server with regex-guided "
                    "decoding",
                    self.shown_url,
                )
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
            session = self._local.session = Session()
        return session

    def _headers(self) -> dict:
        headers = {"Content-Type": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return headers

    def _post(self, payload: dict, deadline: Deadline) -> requests.Response:
        log.debug("POST %s (%d messages, stream=%s)", self.url, len(payload["messages"]), bool(payload.get("stream")))
        response = post_json(
            self.url,
            payload,
            headers=self._headers(),
            timeout=self.timeout,
            max_retries=self.max_retries,
            backoff=self.backoff,
            session=self._session(),
            deadline=deadline,
        )
        if response.status_code >= 400:
            try:
                message = self._http_error(response, payload, deadline)
            finally:
                response.close()
            raise RequestFailed(message, status=response.status_code)
        return response

    def _http_error(self, response: requests.Response, payload: dict, deadline: Deadline) -> str:
        """A one-line message for a 4xx answer, with a hint when an optional field may have been refused."""
        try:
            data = b"".join(body_chunks(response, self.url, ERROR_BODY_BYTES, deadline))
        except RequestFailed as e:
            data = str(e).encode()
        try:
            body = json.loads(data)
        except (ValueError, RecursionError):
            body = data.decode("utf-8", errors="replace")
        message = f"{self.url} answered HTTP {response.status_code}: {error_detail(body)}"
        if "continue_final_message" in payload and response.status_code in (400, 422):
            message += (
                " (this server may not support continuing an assistant message with "
                "continue_final_message; set scratchpad='fold')"
            )
        guided = [f for f in GUIDED_DECODING_FIELDS if f in payload]
        if guided and response.status_code in (400, 422):
            message += (
                f" (this server may not support regex-guided decoding through {guided[0]}; "
                "try the other guided_decoding field, or None for unconstrained replies)"
            )
        return message
