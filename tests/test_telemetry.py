"""OpenTelemetry traces (tinyagent.agent.telemetry) with the real SDK and its in-memory exporter: the span
tree of a two-step run, of 4 runs in threads (on a server model and on a local model whose batcher
decodes them together), of tool calls running at the same time; token counts equal to the run's own;
no secret in any attribute. And `--otel` end to end: a real OTLP/HTTP receiver on 127.0.0.1."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from conftest import ScriptedModel
from openai_stub import OpenAIStub
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from test_cli import ROOT, SECRET, TINYAGENT

from tinyagent import Agent, ReAct, StopReason, tool
from tinyagent.agent.approval import Verdict
from tinyagent.agent.hooks import Hooks
from tinyagent.agent.telemetry import Tracing
from tinyagent.redaction import register_secret
from tinyagent.runs import run_many
from tinyagent.tools import Calculator

#: ReAct from the first reply: these tests drive the loop itself (the working first: test_working.py)
CLASSIC = ReAct(working_first=False, search="tool")

CALC = 'Thought: compute.\nAction: calculator\nAction Input: {"expression": "6*7"}'
WAIT_S = 60


@pytest.fixture
def spans():
    """(provider, finished spans getter): a fresh SDK TracerProvider with an in-memory exporter."""
    exporter, provider = InMemorySpanExporter(), TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter.get_finished_spans
    provider.shutdown()


def tree(finished) -> dict:
    """{span name: [child span names]} by parent span id, children in start order."""
    by_id = {s.context.span_id: s for s in finished}
    out: dict = {}
    for s in sorted(finished, key=lambda s: s.start_time):
        parent = by_id.get(s.parent.span_id).name if s.parent is not None and s.parent.span_id in by_id else None
        out.setdefault(parent, []).append(s.name)
    return out


def children(finished, parent) -> list:
    return sorted(
        (s for s in finished if s.parent is not None and s.parent.span_id == parent.context.span_id),
        key=lambda s: s.start_time,
    )


def test_a_two_step_run_is_one_agent_span_over_its_model_and_tool_calls(spans):
    provider, finished = spans
    model = ScriptedModel([CALC, "Thought: done.\nFinal Answer: 42"], usage=(120, 9))
    result = Agent(model, [Calculator()], max_new_tokens=64, hooks=[Tracing(provider)], protocol=CLASSIC).run(
        "What is 6*7?"
    )
    got = finished()
    assert tree(got) == {
        None: ["invoke_agent tinyagent"],
        "invoke_agent tinyagent": ["chat ScriptedModel", "execute_tool calculator", "chat ScriptedModel"],
    }
    run = next(s for s in got if s.name == "invoke_agent tinyagent")
    chat1, tool_span, chat2 = children(got, run)
    assert (
        run.attributes["gen_ai.operation.name"] == "invoke_agent" and run.attributes["gen_ai.agent.name"] == "tinyagent"
    )
    assert run.attributes["tinyagent.stop_reason"] == "final_answer" and run.attributes["tinyagent.steps"] == 2
    assert [e.attributes["tinyagent.step.kind"] for e in run.events] == ["action", "final_answer"]
    assert chat1.attributes["gen_ai.operation.name"] == "chat" and chat1.attributes["gen_ai.request.max_tokens"] == 64
    assert (
        chat1.attributes["gen_ai.request.model"] == "ScriptedModel" and chat1.attributes["tinyagent.purpose"] == "step"
    )
    assert tool_span.attributes["gen_ai.operation.name"] == "execute_tool"
    assert (
        tool_span.attributes["gen_ai.tool.name"] == "calculator"
        and tool_span.attributes["tinyagent.tool.result_chars"] == 2
    )
    assert tool_span.attributes["tinyagent.tool.arguments_chars"] == len('{"expression": "6*7"}')
    # token counts: each call's, and the run's own totals
    calls = [chat1, chat2]
    assert sum(c.attributes["gen_ai.usage.input_tokens"] for c in calls) == result.prompt_tokens == 240
    assert sum(c.attributes["gen_ai.usage.output_tokens"] for c in calls) == result.completion_tokens == 18
    assert run.attributes["gen_ai.usage.input_tokens"] == 240 and run.attributes["gen_ai.usage.output_tokens"] == 18
    # text is not captured unless asked for
    names = {k for s in got for k in s.attributes}
    assert not names & {
        "gen_ai.input.messages",
        "gen_ai.output.messages",
        "gen_ai.tool.call.arguments",
        "gen_ai.tool.call.result",
        "tinyagent.question",
        "tinyagent.answer",
    }


def test_captured_text_and_every_attribute_are_redacted(spans, monkeypatch):
    provider, finished = spans
    register_secret(SECRET)

    @tool
    def whoami() -> str:
        """Who am I."""
        return f"token {SECRET}"

    model = ScriptedModel(
        [f"Thought: my key is {SECRET}.\nAction: whoami\nAction Input: {{}}", f"Final Answer: {SECRET}"], usage=(10, 2)
    )
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")  # the standard switch
    Agent(model, [whoami], hooks=[Tracing(provider)], protocol=CLASSIC).run(f"Is {SECRET} my key?")
    got = finished()
    values = json.dumps(
        [[dict(s.attributes), [dict(e.attributes) for e in s.events], s.status.description] for s in got], default=list
    )
    assert SECRET not in values and "[REDACTED]" in values
    chat = next(s for s in got if s.name.startswith("chat"))
    messages = json.loads(chat.attributes["gen_ai.input.messages"])
    assert messages[-1] == {"role": "user", "parts": [{"type": "text", "content": "Is [REDACTED] my key?"}]}
    tool_span = next(s for s in got if s.name == "execute_tool whoami")
    assert tool_span.attributes["gen_ai.tool.call.result"] == "token [REDACTED]"


def test_a_model_error_and_a_refused_call_are_in_the_trace(spans):
    provider, finished = spans
    register_secret(SECRET)

    class Breaks(ScriptedModel):
        def generate(self, messages, stop=None, **kwargs):
            if len(self.calls) == 1:
                raise RuntimeError(f"server said 401 for {SECRET}")
            return super().generate(messages, stop, **kwargs)

    result = Agent(
        Breaks([CALC, "unused"]),
        [Calculator()],
        approve=lambda r: Verdict.refuse("not now"),
        hooks=[Tracing(provider)],
        protocol=CLASSIC,
    ).run("6*7?")
    assert result.stop_reason == StopReason.MODEL_ERROR
    got = finished()
    run = next(s for s in got if s.name.startswith("invoke_agent"))
    failed = [s for s in got if s.name.startswith("chat")][-1]
    assert failed.status.status_code == StatusCode.ERROR and failed.attributes["error.type"] == "RuntimeError"
    assert failed.status.description == "RuntimeError: server said 401 for [REDACTED]"
    assert run.status.status_code == StatusCode.ERROR and run.attributes["error.type"] == "model_error"
    assert [e.attributes["tinyagent.step.kind"] for e in run.events] == ["refused", "model_error"]
    assert not [s for s in got if s.name.startswith("execute_tool")]  # the approver is first: nothing ran


def test_a_hook_that_fails_ends_the_run_span_as_a_hook_error(spans):
    provider, finished = spans

    class Broken(Hooks):
        def after_tool(self, call):
            raise OSError("cache full")

    Agent(ScriptedModel([CALC, "unused"]), [Calculator()], hooks=[Broken(), Tracing(provider)], protocol=CLASSIC).run(
        "6*7?"
    )
    run = next(s for s in finished() if s.name.startswith("invoke_agent"))
    assert run.attributes["tinyagent.stop_reason"] == "hook_error" and run.attributes["error.type"] == "hook_error"
    assert run.status.description == "the hook Broken.after_tool raised OSError: cache full"
    assert [s.name for s in children(finished(), run)] == ["chat ScriptedModel", "execute_tool calculator"]


class Meet(Hooks):
    """Holds every run at its start until `n` runs are there, so they overlap whatever the timing."""

    def __init__(self, n: int):
        self.barrier = threading.Barrier(n, timeout=WAIT_S)

    def before_run(self, run):
        self.barrier.wait()


def runs_under(finished, parent) -> dict[str, object]:
    """The agent spans under `parent`, by their question (see `Tagged`)."""
    return {s.attributes["tinyagent.question_id"]: s for s in children(finished, parent)}


class Tagged(Tracing):
    """Tracing that also tags each run span with its question (text capture off), for the test to match."""

    def before_run(self, run):
        super().before_run(run)
        from opentelemetry import trace

        trace.get_current_span().set_attribute("tinyagent.question_id", run.question)


def test_four_runs_in_threads_are_children_of_the_callers_span_each_with_its_own_calls(spans):
    provider, finished = spans
    tracing, meet = Tagged(provider), Meet(4)
    questions = [f"{a}*{b}" for a, b in ((6, 7), (2, 5), (3, 3), (9, 9))]

    expressions, lock = iter(questions), threading.Lock()

    def factory():
        with lock:
            reply = CALC.replace("6*7", next(expressions))
        return Agent(
            ScriptedModel([reply, "Final Answer: ok"], usage=(30, 4)),
            [Calculator()],
            hooks=[meet, tracing],
            protocol=CLASSIC,
        )

    with provider.get_tracer("test").start_as_current_span("batch") as batch:
        items = run_many(factory, questions, concurrency=4)
    assert all(item.ok for item in items)
    got = finished()
    top = next(s for s in got if s.name == "batch")
    assert batch.get_span_context().span_id == top.context.span_id
    runs = runs_under(got, top)
    assert len(runs) == 4 and len({s.context.trace_id for s in got}) == 1  # one trace, not four roots
    for item in items:
        run = runs[item.question]
        calls = children(got, run)
        assert [c.name for c in calls] == ["chat ScriptedModel", "execute_tool calculator", "chat ScriptedModel"]
        tool_span = calls[1]
        assert tool_span.attributes["tinyagent.tool.result_chars"] == len(item.result.steps[0].observation)
        assert sum(c.attributes["gen_ai.usage.input_tokens"] for c in calls[::2]) == item.result.prompt_tokens


def test_tool_calls_running_at_once_parent_their_own_spans_under_their_own_call(spans):
    provider, finished = spans
    inside = threading.Barrier(4, timeout=WAIT_S)
    tracer = provider.get_tracer("tool")

    @tool
    def fetch(url: str) -> str:
        """Fetch a page.

        Args:
            url: the page
        """
        inside.wait()  # all four calls are in their worker threads at once
        with tracer.start_as_current_span("http GET") as span:
            span.set_attribute("url.full", url)
        return f"page {url}"

    urls, lock, tracing = iter(f"http://example.test/{i}" for i in range(4)), threading.Lock(), Tracing(provider)

    def factory():
        with lock:
            url = next(urls)
        return Agent(
            ScriptedModel([f'Action: fetch\nAction Input: {{"url": "{url}"}}', "Final Answer: ok"]),
            [fetch],
            hooks=[tracing],
            protocol=CLASSIC,
        )

    items = run_many(factory, ["q"] * 4, concurrency=4)
    assert all(item.ok for item in items)
    got = finished()
    by_id = {s.context.span_id: s for s in got}
    gets = [s for s in got if s.name == "http GET"]
    assert len(gets) == 4
    for get in gets:
        call = by_id[get.parent.span_id]
        assert call.name == "execute_tool fetch"
        run = by_id[call.parent.span_id]
        assert run.name == "invoke_agent tinyagent" and run.parent is None
        assert [e.attributes.get("gen_ai.tool.name") for e in run.events][0] == "fetch"
    assert len({by_id[g.parent.span_id].parent.span_id for g in gets}) == 4  # each under its own run


@pytest.mark.slow
def test_runs_batched_on_a_local_model_keep_their_model_spans_under_their_own_run(spans, tiny_llama_dir):
    from tinyagent.models.hf import HFChatModel

    provider, finished = spans
    model = HFChatModel(tiny_llama_dir, max_batch=4, dtype="float32")
    tracing, meet = Tagged(provider), Meet(4)
    questions = ["What is 1+1?", "Who wrote Hamlet?", "Capital of France?", "2**10?"]
    items = run_many(
        lambda: Agent(model, [Calculator()], max_turns=2, max_new_tokens=12, hooks=[meet, tracing], protocol=CLASSIC),
        questions,
        concurrency=4,
    )
    assert all(item.ok for item in items), [item.error for item in items]
    assert model._batcher.stepped > model._batcher.passes  # some passes decoded several runs together
    got = finished()
    runs = {s.attributes["tinyagent.question_id"]: s for s in got if s.name == "invoke_agent tinyagent"}
    assert set(runs) == set(questions) and all(s.parent is None for s in runs.values())
    for item in items:
        calls = [c for c in children(got, runs[item.question]) if c.name.startswith("chat")]
        assert (
            len(calls) == item.result.generate_calls and calls[0].attributes["gen_ai.provider.name"] == "transformers"
        )
        assert sum(c.attributes["gen_ai.usage.input_tokens"] for c in calls) == item.result.prompt_tokens
        assert sum(c.attributes["gen_ai.usage.output_tokens"] for c in calls) == item.result.completion_tokens
        assert {c.attributes["gen_ai.response.finish_reasons"][0] for c in calls} <= {"stop", "length"}


def test_import_tinyagent_imports_no_opentelemetry():
    code = (
        "import sys, tinyagent, tinyagent.agent.telemetry, tinyagent.cli; "
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


class OTLPReceiver:
    """A real OTLP/HTTP trace receiver on 127.0.0.1: keeps every ExportTraceServiceRequest it is sent."""

    def __init__(self):
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        self.requests, self.raw = [], []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.raw.append(body)
                receiver.requests.append(ExportTraceServiceRequest.FromString(body))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def spans(self) -> list:
        return [
            (span, resource.resource)
            for request in self.requests
            for resource in request.resource_spans
            for scope in resource.scope_spans
            for span in scope.spans
        ]

    def close(self):
        self.server.shutdown()


def test_otel_exports_the_run_over_otlp_http_as_the_otel_variables_say():
    receiver = OTLPReceiver()
    try:
        with OpenAIStub(replies=[CALC, "Final Answer: 42"], require_key=SECRET) as stub:
            env = {
                **os.environ,
                "OPENAI_API_KEY": SECRET,
                "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
                "OTEL_SERVICE_NAME": "my-agents",
                "HF_HUB_OFFLINE": "1",
            }
            env.pop("OTEL_TRACES_EXPORTER", None)
            done = subprocess.run(
                [
                    TINYAGENT,
                    "ask",
                    "--otel",
                    "--tools",
                    "calculator",
                    "--base-url",
                    stub.base_url,
                    "--model",
                    "stub-model",
                    "What is 6*7?",
                ],
                capture_output=True,
                text=True,
                env=env,
                cwd=ROOT,
                timeout=WAIT_S,
            )
        assert done.returncode == 0, done.stderr
        got = receiver.spans()
        names = sorted(span.name for span, _ in got)
        assert names == ["chat stub-model", "chat stub-model", "execute_tool calculator", "invoke_agent tinyagent"]
        run = next(span for span, _ in got if span.name.startswith("invoke_agent"))
        assert all(span.parent_span_id == run.span_id for span, _ in got if span is not run)
        service = {a.key: a.value.string_value for a in got[0][1].attributes}["service.name"]
        assert service == "my-agents"
        assert all(SECRET.encode() not in body for body in receiver.raw)
        attributes = {a.key: a.value for a in run.attributes}
        assert attributes["gen_ai.request.model"].string_value == "stub-model"
        assert attributes["gen_ai.provider.name"].string_value == "openai"
    finally:
        receiver.close()


def test_otel_without_the_extra_or_with_an_unknown_exporter_is_a_one_line_error(tmp_path):
    env = {**os.environ, "OTEL_TRACES_EXPORTER": "zipkin", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [
            TINYAGENT,
            "ask",
            "--otel",
            "--base-url",
            "http://127.0.0.1:9/v1",
            "--model",
            "m",
            "--tools",
            "calculator",
            "hi",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=WAIT_S,
    )
    assert done.returncode == 2 and done.stderr.strip() == (
        "tinyagent: error: agent.otel: OTEL_TRACES_EXPORTER: 'zipkin' is not one of otlp, console, none"
    )


# --- parallel calls, failing processors, a silent collector -------------------------------------------


def test_calls_of_one_reply_run_together_are_children_of_their_run_in_its_trace(spans):
    """The tools protocol runs a reply's calls in pool threads: each call's span has the run's span as its parent
    and is in the run's trace (pool threads start with an empty context: they were roots of their own traces)."""
    provider, finished = spans
    both = threading.Barrier(2, timeout=WAIT_S)

    @tool
    def fetch(url: str) -> str:
        """Fetch a page."""
        both.wait()  # the two calls are in their pool threads at once
        return f"page {url}"

    calls = "".join(f'<tool_call>\n{{"name": "fetch", "arguments": {{"url": "{u}"}}}}\n</tool_call>\n' for u in "ab")
    model = ScriptedModel([calls, "Both fetched."])
    model.tool_format, model.native_tools = "hermes", True
    result = Agent(model, [fetch], protocol="tools", hooks=[Tracing(provider)]).run("Fetch a and b.")
    assert result.answer == "Both fetched."
    got = finished()
    run = next(s for s in got if s.name == "invoke_agent tinyagent")
    tools = [s for s in got if s.name == "execute_tool fetch"]
    assert len(tools) == 2
    assert all(s.parent is not None and s.parent.span_id == run.context.span_id for s in tools)
    assert {s.context.trace_id for s in got} == {run.context.trace_id}


class Raises:
    """A span processor that raises where it is told to (`on_start`, `on_end`)."""

    def __init__(self, where: str):
        self.where = where

    def on_start(self, span, parent_context=None):
        if self.where == "on_start":
            raise RuntimeError("the processor broke on start")

    def _on_ending(self, span):
        pass

    def on_end(self, span):
        if self.where == "on_end":
            raise RuntimeError("the processor broke on end")

    def shutdown(self):
        pass

    def force_flush(self, timeout_millis=30000):
        return True


@pytest.mark.parametrize("where", ["on_start", "on_end"])
def test_a_span_processor_that_raises_never_costs_the_answer(where, caplog):
    """Telemetry is not part of the answer: a processor that raises is logged once and the run ends as it would
    (it ended with hook_error and lost its answer)."""
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(Raises(where))
    model = ScriptedModel([CALC, "Thought: done.\nFinal Answer: 42"])
    with caplog.at_level("WARNING"):
        result = Agent(model, [Calculator()], hooks=[Tracing(provider)]).run("What is 6*7?")
    assert result.answer == "42" and result.stop_reason == StopReason.FINAL_ANSWER and result.error is None
    assert [s.kind for s in result.steps] == ["action", "final_answer"]
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert (
        len(warnings) == 1
        and f"tracing failed (RuntimeError: the processor broke {where.replace('_', ' ')})" in warnings[0]
    )


def test_stopping_tracing_is_bounded_when_the_collector_never_answers():
    """At exit the spans still queued are exported for at most SHUTDOWN_SECONDS: a provider whose shutdown never
    returns (an exporter waiting on a collector that accepted and never answers) does not hold the command."""
    from tinyagent import config
    from tinyagent.agent import telemetry

    release = threading.Event()

    class Stuck:
        def shutdown(self):
            release.wait(WAIT_S)

    finished: list = []
    stopper = threading.Thread(target=lambda: finished.append(telemetry.shutdown(Stuck(), seconds=0.05)))
    stopper.start()
    stopper.join(WAIT_S)
    try:
        assert not stopper.is_alive(), "stopping tracing waited for the stuck exporter"
        assert finished == [False]  # it said the spans were left behind
        assert config.stop_tracing(None) is None  # no tracing: nothing to stop
    finally:
        release.set()


def test_the_otlp_exporter_of_configure_has_a_short_timeout_unless_the_variables_set_one(monkeypatch):
    """Each export waits EXPORT_SECONDS for the collector (the SDK's default is 10 s), unless a variable says."""
    from tinyagent.agent import telemetry

    for name in ("OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"):
        monkeypatch.delenv(name, raising=False)
    assert telemetry._otlp_exporter(os.environ)._client._timeout == telemetry.EXPORT_SECONDS
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "7")
    assert telemetry._otlp_exporter(os.environ)._client._timeout == 7
