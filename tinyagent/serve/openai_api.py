"""`tinyagent serve`: the agent behind an OpenAI-compatible API, on Starlette (served by uvicorn).

    GET  /v1/models             the one model: the agent, by its name
    POST /v1/chat/completions   the client's messages as the conversation (conversation.py); plain JSON, or
                                server-sent events with `"stream": true`
    GET  /health                {"status": "ok"}, without a key

While the agent works, its steps stream as `reasoning_content` deltas (the field reasoning models use, which
Open WebUI and others show folded); the final answer is the `content`. `usage` counts every model call of
the run, and `tinyagent` (an extra field) says how the run ended. Each request gets a fresh Agent; they share
the model (a local one decodes concurrent requests together) and the tools. A client that goes away stops
its run after the step in progress. With an `api_key`, every /v1 route wants `Authorization: Bearer KEY`.
Sampling fields of a request (temperature, max_tokens, ...) are ignored: the agent's config decides.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass
from secrets import token_hex

from ..agent import AgentResult, StopReason
from ..redaction import redact
from ..text import one_line
from .conversation import BadRequest, Conversation, conversation_of
from .running import Admission, AgentFactory, AgentRun, Full

log = logging.getLogger(__name__)

DEFAULT_MAX_REQUEST_BYTES = 1_000_000
DEFAULT_MAX_QUESTION_CHARS = 4000
DEFAULT_MAX_RUNS = 4
DEFAULT_MAX_WAITING = 16
INSTALL_HINT = "tinyagent serve needs starlette and uvicorn: pip install 'tinyagent[serving]'"
#: Runs that end without an answer from the model, as the request's error: (HTTP status, error code).
FAILURES = {
    StopReason.MODEL_ERROR: (502, "model_error"),
    StopReason.HOOK_ERROR: (500, "hook_error"),
    StopReason.CONTEXT_OVERFLOW: (400, "context_length_exceeded"),
}


def require_server() -> None:
    """Fail early, with the install command, when starlette or uvicorn is missing."""
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as e:
        raise ImportError(INSTALL_HINT) from e


@dataclass
class Limits:
    max_runs: int = DEFAULT_MAX_RUNS  # questions answered at once; more wait their turn
    max_waiting: int = DEFAULT_MAX_WAITING  # requests waiting; more are refused with 429
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES  # the largest request body read
    max_question_chars: int = DEFAULT_MAX_QUESTION_CHARS


@dataclass
class Ask:
    """What one chat completion request asks for."""

    conversation: Conversation
    stream: bool
    include_usage: bool


def ask_of(body, model: str, limits: Limits) -> Ask:
    """The request body read, or a BadRequest naming what is wrong."""
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    if body.get("model") not in (None, model):
        raise BadRequest(
            f"the model {body['model']!r} does not exist; this server has {model!r}",
            param="model",
            status=404,
            code="model_not_found",
        )
    if body.get("n") not in (None, 1):
        raise BadRequest("n: only one choice per request is supported", param="n")
    conversation = conversation_of(body.get("messages"))
    if len(conversation.question) > limits.max_question_chars:
        raise BadRequest(
            f"the question is too long ({len(conversation.question)} characters; the limit is "
            f"{limits.max_question_chars})",
            param="messages",
        )
    options = body.get("stream_options") or {}
    return Ask(
        conversation,
        stream=bool(body.get("stream")),
        include_usage=bool(options.get("include_usage")) if isinstance(options, dict) else False,
    )


def usage_of(result: AgentResult | None) -> dict | None:
    """OpenAI `usage` from every model call of the run; None when the model reported no counts."""
    if result is None or result.prompt_tokens is None and result.completion_tokens is None:
        return None
    prompt, completion = result.prompt_tokens or 0, result.completion_tokens or 0
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def outcome_of(run: AgentRun) -> tuple[str, str, dict | None]:
    """(answer, finish_reason, error) of a finished run; the error as OpenAI's `error` object, or None."""
    result = run.result
    if result is None:
        return (
            "",
            "stop",
            {
                "message": f"the run failed: {redact(one_line(run.error))}",
                "type": "server_error",
                "code": "run_failed",
                "status": 500,
            },
        )
    if result.stop_reason in FAILURES:
        status, code = FAILURES[result.stop_reason]
        return (
            "",
            "stop",
            {
                "message": redact(result.error or str(result.stop_reason)),
                "code": code,
                "type": "invalid_request_error" if status == 400 else "server_error",
                "status": status,
            },
        )
    return redact(result.answer), "stop" if result.finished else "length", None


def details_of(result: AgentResult | None) -> dict:
    """The `tinyagent` field of a response: how the run ended."""
    if result is None:
        return {"stop_reason": "error"}
    return {
        "stop_reason": str(result.stop_reason),
        "steps": len(result.steps),
        "model_calls": result.generate_calls,
        "seconds": round(result.seconds, 3),
    }


def create_app(
    factory: AgentFactory,
    model: str,
    api_key: str | None = None,
    limits: Limits | None = None,
    created: int | None = None,
):
    """The Starlette app serving `factory()`'s agents under the model name `model`."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, StreamingResponse
    from starlette.routing import Route

    limits = limits or Limits()
    created = int(time.time()) if created is None else created
    admission = Admission(limits.max_runs, limits.max_waiting)

    def error(
        status: int,
        message: str,
        kind: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: dict | None = None,
    ) -> JSONResponse:
        body = {"error": {"message": redact(message), "type": kind, "param": param, "code": code}}
        return JSONResponse(body, status_code=status, headers=headers)

    def refused(request: Request) -> JSONResponse | None:
        """401 unless the request carries the key (when there is one)."""
        if api_key is None:
            return None
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), api_key.encode()):
            return None
        return error(
            401,
            "a valid API key is required: Authorization: Bearer KEY",
            code="invalid_api_key",
            headers={"WWW-Authenticate": "Bearer"},
        )

    def model_card() -> dict:
        return {"id": model, "object": "model", "created": created, "owned_by": "tinyagent"}

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    async def models(request: Request) -> JSONResponse:
        return refused(request) or JSONResponse({"object": "list", "data": [model_card()]})

    async def one_model(request: Request) -> JSONResponse:
        if (denied := refused(request)) is not None:
            return denied
        if request.path_params["name"] != model:
            return error(404, f"the model {request.path_params['name']!r} does not exist", code="model_not_found")
        return JSONResponse(model_card())

    async def completions(request: Request):
        if (denied := refused(request)) is not None:
            return denied
        try:
            ask = ask_of(await _json_body(request, limits.max_request_bytes), model, limits)
            admission.admit()
        except BadRequest as e:
            return error(e.status, e.message, param=e.param, code=e.code)
        except Full as e:
            return error(429, str(e), kind="rate_limit_error", code="busy", headers={"Retry-After": "1"})
        ident = f"chatcmpl-{token_hex(12)}"
        if ask.stream:
            return StreamingResponse(
                _events(request, ask, ident),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
            )
        return await _answer(request, ask, ident)

    async def _answer(request: Request, ask: Ask, ident: str):
        async with _watched(request) as client:
            if not await admission.enter(client.gone):
                return error(499, "the client went away")
            run = client.run = admission.start(factory, ask.conversation)
            reasoning = "".join([delta async for delta, _ in run.deltas()])
        answer, finish, failure = outcome_of(run)
        if failure is not None:
            status = failure.pop("status")
            return error(
                status,
                failure["message"],
                kind=failure["type"],
                code=failure["code"],
                headers={"x-should-retry": "false"},
            )  # the OpenAI client would run it again
        message = {"role": "assistant", "content": answer, "reasoning_content": reasoning}
        body = {
            "id": ident,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "tinyagent": details_of(run.result),
        }
        if (usage := usage_of(run.result)) is not None:
            body["usage"] = usage
        return JSONResponse(body)

    async def _events(request: Request, ask: Ask, ident: str):
        stamp = int(time.time())

        def chunk(delta: dict, finish: str | None = None, **extra) -> str:
            body = {
                "id": ident,
                "object": "chat.completion.chunk",
                "created": stamp,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                **extra,
            }
            return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"

        async with _watched(request) as client:
            yield chunk({"role": "assistant", "content": ""})
            if not await admission.enter(client.gone):
                return
            run = client.run = admission.start(factory, ask.conversation)
            async for delta, _ in run.deltas():
                if delta:
                    yield chunk({"reasoning_content": delta})
        answer, finish, failure = outcome_of(run)
        if failure is not None:
            failure.pop("status")
            yield f"data: {json.dumps({'error': {**failure, 'param': None}}, ensure_ascii=False)}\n\n"
            yield "data: [DONE]\n\n"
            return
        if answer:
            yield chunk({"content": answer})
        yield chunk({}, finish, tinyagent=details_of(run.result))
        if ask.include_usage:
            body = {
                "id": ident,
                "object": "chat.completion.chunk",
                "created": stamp,
                "model": model,
                "choices": [],
                "usage": usage_of(run.result),
            }
            yield f"data: {json.dumps(body)}\n\n"
        yield "data: [DONE]\n\n"

    @asynccontextmanager
    async def lifespan(app):
        try:
            yield
        finally:
            admission.stop_all()  # runs end after their step; their threads do not hold the exit

    routes = [
        Route("/health", health),
        Route("/v1/models", models),
        Route("/v1/models/{name:path}", one_model),
        Route("/v1/chat/completions", completions, methods=["POST"]),
    ]
    return Starlette(routes=routes, lifespan=lifespan)


class _Client:
    """A request's connection, watched: when it closes, `gone` is set and the run (if any) is stopped."""

    def __init__(self):
        self.gone = asyncio.Event()
        self.run: AgentRun | None = None

    def went_away(self) -> None:
        self.gone.set()
        if self.run is not None and self.run.running:
            log.info("the client went away: its run stops after the step in progress")
            self.run.stop()


@asynccontextmanager
async def _watched(request):
    """Watch the connection while the body runs; a run the body started and left running (the client went
    away, the server is shutting down) is stopped on the way out."""
    client = _Client()

    async def watch() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass
        client.went_away()

    watcher = asyncio.ensure_future(watch())
    try:
        yield client
    finally:
        watcher.cancel()
        if client.run is not None and client.run.running:
            log.info("the response ended before its run: the run stops after the step in progress")
            client.run.stop()


async def _json_body(request, limit: int):
    """The request body as JSON, read up to `limit` bytes (a longer one is refused with 413)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BadRequest(
            f"the request is too large ({declared} bytes; the limit is {limit})", status=413, code="request_too_large"
        )
    from starlette.requests import ClientDisconnect

    data = bytearray()
    try:
        async for piece in request.stream():
            data += piece
            if len(data) > limit:
                raise BadRequest(f"the request is too large (over {limit} bytes)", status=413, code="request_too_large")
    except ClientDisconnect:  # nobody reads the answer
        raise BadRequest("the client went away", status=499) from None
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise BadRequest(f"the request body is not JSON ({one_line(e, with_type=False)})") from None
