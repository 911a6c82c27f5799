"""A real OpenAI-compatible HTTP server on 127.0.0.1 with canned replies and injected faults.

For tests of clients that must survive what real servers do: 5xx / 429 answers, slow or hung
responses, dropped connections, non-JSON or malformed bodies. Example:

    with OpenAIStub(replies=["Final Answer: 42"], fail_rate=0.1, delay=0.05) as stub:
        model = OpenAIChatModel(stub.base_url, "stub")
        ...
        assert stub.requests[0]["body"]["messages"][-1]["role"] == "user"

`replies` is a string, a list (served in order; the last one repeats) or a function
`(request_body) -> str`. A reply may also be {"content": str, "tool_calls": [{"name", "arguments"}]}:
the calls are sent as OpenAI `tool_calls` (streamed: the arguments text in pieces, as vLLM sends them). Like `transformers serve`, the stub does not cut replies at `stop`
strings unless `honour_stop=True`. `script` (or `push`) queues one fault per coming request;
then `fault_for(request_body)` may name one; then `fail_rate` applies. `meet=n` holds the first n
requests until n are in flight at once, so a test of parallel clients does not depend on timing. Faults:

    "500" / "503" / "429" / any status   answer that status with a JSON error body
    "slow"                               wait `slow_seconds` before answering normally
    "hang"                               wait `slow_seconds`, then close without answering
    "drop"                               close the connection without answering
    "non_json"                           200 with an HTML body
    "no_choices"                         200 with JSON that has no `choices`
    "bad_stream"                         (streaming) a few chunks, then a non-JSON data line
    "stall_stream"                       (streaming) a few chunks, then silence for `slow_seconds`
    "endless_stream"                     (streaming) the reply, then its last chunk again and again, never
                                         a finish: only a client that stops reading ends it
    "idle_stream"                        (streaming) events without content, forever
    "huge_body"                          200 with a JSON body of `huge_bytes` bytes (Content-Length set)
    "huge_chunked"                       200 with a chunked JSON body that never ends

`models` is the list `GET /v1/models` answers (default: one entry for `model`, without a window).
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class OpenAIStub:
    """`POST /v1/chat/completions` (JSON or SSE), `GET /v1/models`, `GET /health`."""

    def __init__(
        self,
        replies: str | list[str] | Callable[[dict], str] = "Final Answer: ok",
        *,
        model: str = "stub-model",
        fail_rate: float = 0.0,
        fail_status: int = 500,
        delay: float = 0.0,
        jitter: float = 0.0,
        slow_seconds: float = 5.0,
        script: Iterable[str] = (),
        fault_for: Callable[[dict], str | None] | None = None,
        honour_stop: bool = False,
        chunk_chars: int = 3,
        require_key: str | None = None,
        reject_fields: Iterable[str] = (),
        done_marker: bool = True,
        meet: int = 0,
        seed: int = 0,
        huge_bytes: int = 30_000_000,
        models: list[dict] | None = None,
    ):
        self.replies = replies
        self.model = model
        self.huge_bytes = huge_bytes
        self.models = models if models is not None else [{"id": model, "object": "model"}]
        self.model_list_requests = 0
        self.bytes_sent = 0  # of streamed and chunked bodies, so a test can see where a client stopped
        self.fail_rate = fail_rate
        self.fail_status = fail_status
        self.delay = delay
        self.jitter = jitter
        self.slow_seconds = slow_seconds
        self.honour_stop = honour_stop
        self.chunk_chars = max(1, chunk_chars)
        self.require_key = require_key
        self.reject_fields = set(reject_fields)
        self.done_marker = done_marker  # `data: [DONE]` at the end (transformers serve sends none)
        self.requests: list[dict] = []  # {"body", "headers", "fault"} per chat request, in arrival order
        self._script = deque(script)
        self.fault_for = fault_for
        self.in_flight = 0
        self.max_in_flight = 0  # the most chat requests handled at once
        # The first `meet` chat requests wait (up to 30 s) until all of them are in flight: a client that
        # really sends them in parallel then shows max_in_flight == meet, with no timing luck involved.
        self.meet = meet
        self._meeting = threading.Barrier(meet) if meet > 1 else None
        self._arrived = 0
        self._random = random.Random(seed)
        self._served = 0
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    # --- lifecycle ---------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def start(self) -> OpenAIStub:
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="openai-stub", daemon=True
        )
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> OpenAIStub:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    # --- behaviour ---------------------------------------------------------------------------

    def push(self, *faults: str) -> None:
        """Queue faults for the next requests, one each."""
        with self._lock:
            self._script.extend(faults)

    @property
    def chat_requests(self) -> int:
        with self._lock:
            return len(self.requests)

    def _next_fault(self, body: dict, headers: dict) -> str | None:
        with self._lock:
            fault = self._script.popleft() if self._script else None
            if fault is None and self.fault_for is not None:
                fault = self.fault_for(body)
            if fault is None and self.fail_rate and self._random.random() < self.fail_rate:
                fault = str(self.fail_status)
            self.requests.append({"body": body, "headers": headers, "fault": fault})
            return fault

    def reply_for(self, body: dict) -> str:
        if callable(self.replies):
            return self.replies(body)
        if isinstance(self.replies, str):
            return self.replies
        with self._lock:
            index = min(self._served, len(self.replies) - 1)
            self._served += 1
        return self.replies[index]

    def _wait_to_meet(self) -> None:
        with self._lock:
            self._arrived += 1
            waits = self._meeting is not None and self._arrived <= self.meet
        if waits:
            try:
                self._meeting.wait(timeout=30)
            except threading.BrokenBarrierError:  # fewer came at once: max_in_flight tells the test
                pass

    def _pause(self) -> None:
        if self.delay or self.jitter:
            with self._lock:
                extra = self._random.uniform(0, self.jitter) if self.jitter else 0.0
            time.sleep(self.delay + extra)


def count_words(text: str) -> int:
    """The stub's token count: whitespace-separated words (deterministic, easy to check in tests)."""
    return len(text.split())


def _handler_for(stub: OpenAIStub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:  # keep test output quiet
            pass

        def do_GET(self) -> None:
            if self.path.rstrip("/") in ("/v1/models", "/models"):
                with stub._lock:
                    stub.model_list_requests += 1
                self._json(200, {"object": "list", "data": stub.models})
            elif self.path == "/health":
                self._json(200, {"status": "ok"})
            else:
                self._json(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            if not self.path.rstrip("/").endswith("/chat/completions"):
                return self._json(404, {"error": {"message": f"no route {self.path}"}})
            try:
                body = json.loads(raw)
            except ValueError:
                return self._json(400, {"error": {"message": "body is not JSON"}})
            fault = stub._next_fault(body, dict(self.headers))
            with stub._lock:
                stub.in_flight += 1
                stub.max_in_flight = max(stub.max_in_flight, stub.in_flight)
            try:
                stub._wait_to_meet()
                self._answer(body, fault)
            finally:
                with stub._lock:
                    stub.in_flight -= 1

        def _answer(self, body: dict, fault: str | None) -> None:
            if stub.require_key and self.headers.get("Authorization") != f"Bearer {stub.require_key}":
                return self._json(401, {"error": {"message": "invalid API key"}})
            refused = stub.reject_fields & set(body)
            if refused:
                return self._json(422, {"detail": f"Unexpected fields in the request: {sorted(refused)}"})
            stub._pause()
            if fault in ("slow", "hang"):
                time.sleep(stub.slow_seconds)
            if fault in ("hang", "drop"):
                self.close_connection = True
                return
            if fault and fault.isdigit():
                return self._json(int(fault), {"error": {"message": f"injected HTTP {fault}"}})
            if fault == "non_json":
                return self._send(200, "text/html", b"<html><body>502 Bad Gateway</body></html>")
            if fault == "no_choices":
                return self._json(200, {"id": "x", "object": "chat.completion", "result": "?"})
            if fault == "huge_body":
                return self._send(200, "application/json", b'{"x": "' + b"y" * stub.huge_bytes + b'"}')
            if fault == "huge_chunked":
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                return self._repeat(b'{"x": "', b"y" * 65536)
            text = stub.reply_for(body)
            calls = None
            if isinstance(text, dict):
                calls = [
                    {
                        "id": f"call_{i}",
                        "type": "function",
                        "function": {"name": c["name"], "arguments": c["arguments"]},
                    }
                    for i, c in enumerate(text.get("tool_calls", []))
                ]
                text = text.get("content") or ""
            if stub.honour_stop:
                text = _cut(text, body.get("stop"))
            if body.get("max_tokens"):
                text = " ".join(text.split(" ")[: int(body["max_tokens"])])
            prompt = " ".join(str(m.get("content") or "") for m in body.get("messages", []))
            usage = {"prompt_tokens": count_words(prompt), "completion_tokens": count_words(text)}
            usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
            if body.get("stream"):
                return self._stream(text, usage, fault, calls)
            message = {"role": "assistant", "content": text or (None if calls else "")}
            if calls:
                message["tool_calls"] = calls
            self._json(
                200,
                {
                    "id": "chatcmpl-stub",
                    "object": "chat.completion",
                    "model": stub.model,
                    "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
                    "usage": usage,
                },
            )

        def _stream(self, text: str, usage: dict, fault: str | None, calls: list | None = None) -> None:
            """Server-sent events in chunked transfer encoding, as uvicorn and vLLM send them."""
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            pieces = [text[i : i + stub.chunk_chars] for i in range(0, len(text), stub.chunk_chars)]
            events = [{"choices": [{"index": 0, "delta": {"role": "assistant"}}]}]
            events += [{"choices": [{"index": 0, "delta": {"content": p}}]} for p in pieces]
            for i, c in enumerate(calls or []):  # the name first, then the arguments in pieces
                args, n = c["function"]["arguments"], stub.chunk_chars
                events.append(
                    {
                        "choices": [
                            {
                                "index": 0,
                                "delta": {
                                    "tool_calls": [
                                        {
                                            "index": i,
                                            "id": c["id"],
                                            "type": "function",
                                            "function": {"name": c["function"]["name"], "arguments": ""},
                                        }
                                    ]
                                },
                            }
                        ]
                    }
                )
                events += [
                    {
                        "choices": [
                            {
                                "index": 0,
                                "delta": {"tool_calls": [{"index": i, "function": {"arguments": args[k : k + n]}}]},
                            }
                        ]
                    }
                    for k in range(0, len(args), n)
                ]
            events.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
            events.append({"choices": [], "usage": usage})
            lines = [f"data: {json.dumps(e, ensure_ascii=False)}\n\n" for e in events]
            lines += ["data: [DONE]\n\n"] if stub.done_marker else []
            if fault == "endless_stream":  # the role event and the content, then the last piece forever
                return self._repeat("".join(lines[: 1 + len(pieces)]).encode(), lines[len(pieces)].encode())
            if fault == "idle_stream":
                return self._repeat(lines[0].encode(), lines[0].encode())
            for i, line in enumerate(lines):
                if fault == "bad_stream" and i == 2:
                    line = "data: {not json\n\n"
                if fault == "stall_stream" and i == 2:
                    time.sleep(stub.slow_seconds)
                    self.close_connection = True
                    return
                self._chunk(line.encode())
            self._chunk(b"")

        def _repeat(self, head: bytes, again: bytes) -> None:
            """Chunks of a body whose headers are sent: `head`, then `again` until the client hangs up."""
            self._chunk(head)
            try:
                while True:
                    self._chunk(again)
                    time.sleep(0.001)
            except OSError:  # the client closed the connection: what a bounded client does
                self.close_connection = True

        def _chunk(self, data: bytes) -> None:
            self.wfile.write(f"{len(data):X}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()
            with stub._lock:
                stub.bytes_sent += len(data)

        def _json(self, status: int, obj: dict) -> None:
            self._send(status, "application/json", json.dumps(obj, ensure_ascii=False).encode())

        def _send(self, status: int, content_type: str, data: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def handle(self) -> None:
            try:
                super().handle()
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (e.g. its timeout fired): nothing to answer

    return Handler


def _cut(text: str, stop) -> str:
    stops = [stop] if isinstance(stop, str) else list(stop or [])
    cut = min([i for i in (text.find(s) for s in stops if s) if i >= 0], default=len(text))
    return text[:cut]
