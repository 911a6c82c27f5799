"""OpenTelemetry traces of runs: one span per run, per model call and per tool call, named after the
GenAI semantic conventions (`invoke_agent`, `chat`, `execute_tool`; gen_ai.* attributes).

`Agent(hooks=[Tracing()])`, `agent.otel: true` in a config, or `tinyagent ... --otel`. Needs the
optional extra (`pip install 'tinyagent[otel]'`); nothing here imports opentelemetry until a
`Tracing` is made, so an agent without one pays nothing. Spans go to the global TracerProvider
(or the one given); `configure()` sets one up from the standard OTEL_* environment variables.

Parents: a span is opened in the thread that runs its part and made current there, so a model
call's span is the caller's `generate` call even when a batcher decodes it on another thread; a
tool's own spans (it runs in a worker thread that copies the caller's context) are children of its
`execute_tool` span; `run_many` starts each run in a copy of the caller's context.

Redaction: every attribute passes through `secrets.redact`. Prompt, reply and tool text is left out
unless `capture_text` is on (its default: the standard OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT
variable); sizes and counts are always there.

Telemetry never costs an answer: a span processor or exporter that raises is logged (once per Tracing) and
the run goes on without that span; `shutdown` bounds the export of what is still queued at exit to
SHUTDOWN_SECONDS, so a collector that never answers does not hold the command.
"""

from __future__ import annotations

import atexit
import functools
import importlib.util
import json
import logging
import os
import sys
import threading

from ..models.model import Reply
from ..redaction import redact
from ..text import one_line
from ..version import __version__
from .hooks import Hooks, ModelCall, Run, ToolCall
from .results import Step

INSTALL_HINT = "OpenTelemetry tracing needs the otel extra: pip install 'tinyagent[otel]'"
CAPTURE_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
AGENT_NAME = "tinyagent"
#: The most seconds the CLI waits at exit for the spans still queued to be exported (the SDK waits 30).
SHUTDOWN_SECONDS = 3.0
#: Each OTLP export's timeout, unless OTEL_EXPORTER_OTLP(_TRACES)_TIMEOUT says otherwise (the SDK's is 10 s).
EXPORT_SECONDS = 2.0

log = logging.getLogger(__name__)


def _quiet(hook):
    """A hook method that logs what fails in it (the SDK, a span processor, an exporter) instead of raising."""

    @functools.wraps(hook)
    def quiet(self, *args):
        try:
            hook(self, *args)
        except Exception as e:
            self._failed(e)

    return quiet


def available() -> bool:
    """True when the OpenTelemetry API is installed."""
    try:
        return importlib.util.find_spec("opentelemetry.trace") is not None
    except ModuleNotFoundError:
        return False


def _trace():
    try:
        from opentelemetry import context, trace
    except ImportError as e:
        raise ImportError(INSTALL_HINT) from e
    return trace, context


class Tracing(Hooks):
    """Spans for every run, model call and tool call of the agents it is given to (see the module docstring).

    One Tracing may serve many agents in many threads: each span is keyed by the call it traces.
    """

    def __init__(self, tracer_provider=None, capture_text: bool | None = None):
        self._trace, self._context = _trace()
        self.tracer = self._trace.get_tracer("tinyagent", __version__, tracer_provider=tracer_provider)
        if capture_text is None:
            capture_text = os.environ.get(CAPTURE_ENV, "").strip().lower() in ("1", "true", "yes")
        self.capture_text = capture_text
        self._open: dict[int, tuple[object, object]] = {}  # id(call) -> (span, context token)
        self._warned = threading.Event()

    def _failed(self, error: Exception) -> None:
        """Telemetry failed: said once, then only with --verbose; the run goes on."""
        if self._warned.is_set():
            log.info("tracing failed again: %s", one_line(error))
        else:
            self._warned.set()
            log.warning("tracing failed (%s); the run goes on, without that span", one_line(error))

    # --- spans ----------------------------------------------------------------------------------

    def _start(self, call, name: str, kind, attributes: dict) -> None:
        try:
            span = self.tracer.start_span(name, kind=kind, attributes=_clean(attributes))
        except Exception as e:  # a span processor's on_start raised: this part goes untraced
            self._failed(e)
            return
        self._open[id(call)] = span, self._context.attach(self._trace.set_span_in_context(span))

    def _end(self, call, attributes: dict, error: str | None = None, error_type: str | None = None) -> None:
        entry = self._open.pop(id(call), None)
        if entry is None:  # its start failed
            return
        span, token = entry
        try:
            span.set_attributes(_clean(attributes))
            if error is not None:
                span.set_attribute("error.type", error_type or "error")
                span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, redact(error)))
        except Exception as e:
            self._failed(e)
        finally:
            try:
                span.end()  # a span processor's on_end runs here
            except Exception as e:
                self._failed(e)
            self._context.detach(token)

    def _text(self, key: str, value) -> dict:
        """{key: value as JSON or text} when text is captured, else nothing."""
        if not self.capture_text or value is None:
            return {}
        return {key: value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)}

    # --- the hooks ------------------------------------------------------------------------------

    @_quiet
    def before_run(self, run: Run) -> None:
        self._start(
            run,
            f"invoke_agent {AGENT_NAME}",
            self._trace.SpanKind.INTERNAL,
            {
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": AGENT_NAME,
                "gen_ai.provider.name": run.model.provider,
                "gen_ai.request.model": run.model.model_id,
                "tinyagent.lang": run.lang,
                "tinyagent.tools": sorted(run.tools),
                **self._text("tinyagent.question", run.question),
            },
        )

    @_quiet
    def after_run(self, run: Run) -> None:
        result = run.result
        reason = str(result.stop_reason) or "interrupted"
        failed = not result.stop_reason or result.stop_reason.failed
        self._end(
            run,
            {
                "tinyagent.stop_reason": reason,
                "tinyagent.finished": result.finished,
                "tinyagent.steps": len(result.steps),
                "tinyagent.generate_calls": result.generate_calls,
                "gen_ai.usage.input_tokens": result.prompt_tokens,
                "gen_ai.usage.output_tokens": result.completion_tokens,
                **self._text("tinyagent.answer", result.answer),
            },
            error=(result.error or reason) if failed else None,
            error_type=reason,
        )

    @_quiet
    def on_step(self, step: Step) -> None:
        self._trace.get_current_span().add_event(
            "tinyagent.step",
            _clean(
                {
                    "tinyagent.step.index": step.index,
                    "tinyagent.step.kind": str(step.kind),
                    "gen_ai.tool.name": step.action,
                    "tinyagent.step.error": step.error,
                }
            ),
        )

    @_quiet
    def before_model(self, call: ModelCall) -> None:
        model = call.run.model if call.run is not None else None
        model_id = model.model_id if model is not None else "unknown"
        options = call.options
        self._start(
            call,
            f"chat {model_id}",
            self._trace.SpanKind.CLIENT,
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": model.provider if model else None,
                "gen_ai.request.model": model_id,
                "gen_ai.request.max_tokens": options.get("max_new_tokens"),
                "gen_ai.request.temperature": options.get("temperature"),
                "gen_ai.request.top_p": options.get("top_p"),
                "gen_ai.request.stop_sequences": options.get("stop"),
                "tinyagent.purpose": call.purpose,
                "tinyagent.step.index": call.index,
                "tinyagent.prompt_chars": sum(len(m["content"]) for m in call.messages),
                **self._text(
                    "gen_ai.input.messages",
                    [{"role": m["role"], "parts": [{"type": "text", "content": m["content"]}]} for m in call.messages],
                ),
            },
        )

    @_quiet
    def after_model(self, call: ModelCall) -> None:
        usage = Reply.of(call.reply).usage if call.reply is not None else {}
        reply = str(call.reply) if call.reply is not None else None
        self._end(
            call,
            {
                "gen_ai.usage.input_tokens": usage.get("prompt_tokens"),
                "gen_ai.usage.output_tokens": usage.get("completion_tokens"),
                "gen_ai.usage.cache_read.input_tokens": usage.get("cached_tokens"),
                "gen_ai.response.finish_reasons": [usage["finish_reason"]] if usage.get("finish_reason") else None,
                "tinyagent.seconds": call.seconds,
                "tinyagent.reply_chars": len(reply) if reply is not None else None,
                **self._text(
                    "gen_ai.output.messages",
                    None if reply is None else [{"role": "assistant", "parts": [{"type": "text", "content": reply}]}],
                ),
            },
            error=one_line(call.error) if call.error is not None else None,
            error_type=type(call.error).__name__ if call.error is not None else None,
        )

    @_quiet
    def before_tool(self, call: ToolCall) -> None:
        arguments = json.dumps(call.arguments, ensure_ascii=False, default=str)
        self._start(
            call,
            f"execute_tool {call.name}",
            self._trace.SpanKind.INTERNAL,
            {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": call.name,
                "gen_ai.tool.type": "function",
                "gen_ai.tool.call.id": f"step-{call.step.index + 1}",
                "tinyagent.tool.arguments_chars": len(arguments),
                "tinyagent.tool.edited": call.edited_from is not None,
                **self._text("gen_ai.tool.call.arguments", arguments),
            },
        )

    @_quiet
    def after_tool(self, call: ToolCall) -> None:
        kind = "refused" if call.refusal is not None else str(call.kind)
        self._end(
            call,
            {
                "tinyagent.step.kind": kind,
                "tinyagent.seconds": call.seconds,
                "tinyagent.tool.result_chars": len(call.output) if call.output is not None else None,
                **self._text("gen_ai.tool.call.result", call.output),
                **self._text("tinyagent.refusal", call.refusal),
            },
            error=call.error,
            error_type=kind,
        )


def _clean(attributes: dict) -> dict:
    """Attributes as OpenTelemetry takes them: None left out, text redacted, lists of text."""
    out = {}
    for key, value in attributes.items():
        if value is None:
            continue
        if isinstance(value, (list, tuple)):
            value = [redact(str(v)) for v in value]
        elif isinstance(value, str):
            value = redact(value)
        out[key] = value
    return out


def configure(environ=None):
    """A global TracerProvider from the standard OTEL_* variables, unless one is set already (e.g. by
    `opentelemetry-instrument`); returns it (call its `shutdown()` to flush), or None when one was set.

    OTEL_TRACES_EXPORTER: otlp (the default: OTLP over HTTP, OTEL_EXPORTER_OTLP_ENDPOINT and the
    other OTEL_EXPORTER_OTLP_* variables), console (to stderr) or none, comma-separated.
    OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES name the service (default service.name: tinyagent);
    OTEL_TRACES_SAMPLER and OTEL_SDK_DISABLED are read by the SDK itself.
    """
    environ = os.environ if environ is None else environ
    trace, _ = _trace()
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
    except ImportError as e:
        raise ImportError(INSTALL_HINT) from e
    if isinstance(trace.get_tracer_provider(), TracerProvider):
        return None
    named = "OTEL_SERVICE_NAME" in environ or "service.name=" in environ.get("OTEL_RESOURCE_ATTRIBUTES", "")
    provider = TracerProvider(resource=Resource.create({} if named else {"service.name": AGENT_NAME}))
    for name in [n.strip() for n in environ.get("OTEL_TRACES_EXPORTER", "otlp").split(",") if n.strip()]:
        if name == "console":
            provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter(out=sys.stderr)))
        elif name == "otlp":
            provider.add_span_processor(BatchSpanProcessor(_otlp_exporter(environ)))
        elif name != "none":
            raise ValueError(f"OTEL_TRACES_EXPORTER: {name!r} is not one of otlp, console, none")
    trace.set_tracer_provider(provider)
    return provider


def shutdown(provider, seconds: float = SHUTDOWN_SECONDS) -> bool:
    """`provider.shutdown()` (exports the spans still queued), waited for at most `seconds`: a collector that never
    answers must not hold the command at exit. True when it finished in time; else a warning, and the export
    goes on in a daemon thread that exit ends."""
    atexit.unregister(provider.shutdown)  # the SDK's own call at exit would wait for the collector again
    done = threading.Event()

    def close() -> None:
        try:
            provider.shutdown()
        except Exception as e:
            log.info("tracing: shutdown failed: %s", one_line(e))
        finally:
            done.set()

    threading.Thread(target=close, name="tinyagent-otel-shutdown", daemon=True).start()
    if done.wait(seconds):
        return True
    log.warning("tracing: the spans still queued were not exported within %g s; leaving without them", seconds)
    return False


def _otlp_exporter(environ):
    protocol = environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
    if protocol not in (None, "", "http/protobuf"):
        raise ValueError(f"OTEL_EXPORTER_OTLP_PROTOCOL: {protocol!r} is not supported; use http/protobuf")
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError as e:
        raise ImportError(INSTALL_HINT) from e
    timed = "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT" in environ or "OTEL_EXPORTER_OTLP_TIMEOUT" in environ
    return OTLPSpanExporter() if timed else OTLPSpanExporter(timeout=EXPORT_SECONDS)
