"""Traces are JSON lines with every secret redacted."""

from __future__ import annotations

import io
import json
import logging

import pytest

from tinyagent import Agent, ReAct, tool
from tinyagent.redaction import (
    MAX_REDACT_DEPTH,
    NESTED_TOO_DEEPLY,
    REDACTED,
    redact,
    register_secret,
    secret_scope,
    secrets,
)
from tinyagent.tools import Calculator, GoogleSearch
from tinyagent.traces import MAX_DEPTH, TraceWriter, dumps

#: ReAct from the first reply: these tests drive the loop itself (the working first: test_working.py)
CLASSIC = ReAct(working_first=False, search="tool")


def test_redact_env_and_registered_secrets(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-abcdef")
    register_secret("token-registered-999")
    value = {"a": "key sk-openai-abcdef here", "b": ["token-registered-999"], "c": 3, "sk-openai-abcdef": None}
    assert redact(value) == {"a": f"key {REDACTED} here", "b": [REDACTED], "c": 3, REDACTED: None}


def test_short_or_empty_values_are_not_secrets(monkeypatch):
    monkeypatch.setenv("SERPER_API_KEY", "")
    monkeypatch.setenv("OPENAI_API_KEY", "abc")
    for value in ("", None, "x", "key"):
        register_secret(value)
    assert secrets() == []
    assert redact("a key, abc and x: nothing to hide") == "a key, abc and x: nothing to hide"
    register_secret("abcd")  # four characters is the shortest secret
    assert redact("abcdef") == f"{REDACTED}ef"


def test_secret_scope_forgets_what_was_registered_inside():
    register_secret("outer-secret-1")
    with secret_scope():
        register_secret("inner-secret-2")
        assert redact("inner-secret-2 outer-secret-1") == f"{REDACTED} {REDACTED}"
    assert redact("inner-secret-2 outer-secret-1") == f"inner-secret-2 {REDACTED}"


def test_a_key_passed_to_a_tool_or_a_model_is_a_secret():
    from tinyagent.models import OpenAIChatModel

    GoogleSearch(api_key="serper-arg-key-31337")
    OpenAIChatModel("http://127.0.0.1:9/v1", "m", api_key="sk-arg-key-27182")
    assert redact("echo serper-arg-key-31337 sk-arg-key-27182") == f"echo {REDACTED} {REDACTED}"


# --- logs: every tinyagent logger, through a user's own handler ----------------------------------

KEY = "sk-logged-key-8d2f61"


@pytest.fixture
def user_log():
    """A plain StreamHandler + Formatter on the root logger, as a library user would set up."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    register_secret(KEY)
    yield stream
    root.removeHandler(handler)


@pytest.mark.parametrize("name", ["tinyagent", "tinyagent.agent", "tinyagent.some.new_module"])
def test_log_messages_arguments_and_tracebacks_are_redacted(user_log, name):
    log = logging.getLogger(name)
    log.warning("key in the message " + KEY)
    log.warning("key in an argument %s and %r", KEY, {"k": KEY})
    log.warning("key split across arguments %s%s", KEY[:6], KEY[6:])
    log.warning("an exception argument: %s", ValueError(f"rejected {KEY}"))
    try:
        raise RuntimeError(f"the server said: bad key {KEY}")
    except RuntimeError:
        log.warning("tool raised", exc_info=True)
        log.exception("again, through log.exception")
    text = user_log.getvalue()
    assert KEY not in text
    assert text.count(REDACTED) == 7 and text.count(f"{name} WARNING") == 5
    assert text.count("Traceback (most recent call last)") == 2
    assert f"RuntimeError: the server said: bad key {REDACTED}" in text


def test_a_handler_formatting_the_exception_itself_gets_the_redacted_text(user_log):
    """exc_info stays on the record (formatters see an exception) but its text is the redacted one."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append
    log = logging.getLogger("tinyagent.tools")
    log.addHandler(handler)
    try:
        try:
            raise KeyError(KEY)
        except KeyError:
            log.error("failed", exc_info=True)
    finally:
        log.removeHandler(handler)
    (record,) = records
    assert record.exc_info is not None and KEY not in record.exc_text
    assert KEY not in logging.Formatter().format(record)


def test_other_loggers_are_left_alone(user_log):
    logging.getLogger("someone.else").warning("not ours: %s", KEY)
    assert KEY in user_log.getvalue()


def test_trace_writer_writes_one_redacted_line_per_step(tmp_path, scripted, monkeypatch):
    monkeypatch.setenv("SERPER_API_KEY", "serper-secret-42")
    path = tmp_path / "run.jsonl"
    model = scripted(['Action: calculator\nAction Input: {"expression": "6*7"}', "Final Answer: 42 (serper-secret-42)"])
    with TraceWriter(path) as trace:
        result = Agent(model, tools=[Calculator()], on_step=trace, protocol=CLASSIC).run("6*7?")
        trace.write({"event": "result", "result": result})
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line.get("index") for line in lines[:2]] == [0, 1]
    assert lines[0]["arguments"] == {"expression": "6*7"} and lines[0]["observation"] == "42"
    assert "serper-secret-42" not in path.read_text()
    assert lines[2]["result"]["answer"] == f"42 ({REDACTED})"


def test_dumps_handles_any_value():
    assert json.loads(dumps({"x": object.__new__(object).__class__})) == {"x": "<class 'object'>"}


def test_records_nested_past_the_limit_are_cut_not_recursed():
    deep: dict = {}
    inner = deep
    for _ in range(5000):  # far past Python's recursion limit
        inner["a"] = {}
        inner = inner["a"]
    line = json.loads(dumps({"arguments": deep}))
    depth, node = 0, line
    while isinstance(node, dict):
        node, depth = node.get("arguments", node.get("a")), depth + 1
    assert node == NESTED_TOO_DEEPLY and depth == MAX_DEPTH
    node, depth = redact(deep), 0  # redact walks any value, stopping at its own cap
    while isinstance(node, dict):
        node, depth = node["a"], depth + 1
    assert node == NESTED_TOO_DEEPLY and depth == MAX_REDACT_DEPTH


def test_deep_arguments_to_a_dict_tool_are_an_error_observation_and_the_traced_run_goes_on(tmp_path, scripted):
    @tool
    def store(data: dict) -> str:
        """Store data."""
        return "stored"

    deep = '{"data": ' + '{"a": ' * 900 + "1" + "}" * 900 + "}"  # ~6 KB, under the argument size cap
    blob = '{"action": "store", "action_input": ' + deep + "}"
    with TraceWriter(tmp_path / "t.jsonl") as trace:
        agent = Agent(
            scripted([f"Action: store\nAction Input: {deep}", blob, "Final Answer: ok"]),
            tools=[store],
            on_step=lambda step: trace.write(step),
            protocol=CLASSIC,
        )
        result = agent.run("store it")
    assert [s.kind for s in result.steps] == ["bad_input", "malformed", "final_answer"] and result.answer == "ok"
    assert "nested 901 levels deep (the limit is 20)" in result.steps[0].observation
    assert "nested 902 levels deep" in result.steps[1].observation
    assert len((tmp_path / "t.jsonl").read_text().splitlines()) == 3


def test_a_failing_tool_logs_its_traceback_without_the_key(user_log, scripted):
    """The agent logs a tool's exception with its traceback; a user's handler prints it, redacted."""
    from tinyagent import tool

    @tool
    def lookup(query: str) -> str:
        """Look something up."""
        raise ConnectionError(f"proxy refused credentials {KEY}")

    model = scripted(['Action: lookup\nAction Input: {"query": "x"}', "Final Answer: no"])
    result = Agent(model, tools=[lookup], protocol=CLASSIC).run("q")
    text = user_log.getvalue()
    assert "tinyagent.agent WARNING tool lookup raised" in text and "Traceback (most recent call last)" in text
    assert f"ConnectionError: proxy refused credentials {REDACTED}" in text and KEY not in text
    assert KEY not in result.steps[0].observation
