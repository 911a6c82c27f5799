"""Traces are JSON lines with every secret redacted."""
from __future__ import annotations

import json

from tinyagent import Agent
from tinyagent.tools import Calculator
from tinyagent.trace import REDACTED, TraceWriter, dumps, redact, register_secret


def test_redact_env_and_registered_secrets(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-abcdef")
    register_secret("token-registered-999")
    value = {"a": "key sk-openai-abcdef here", "b": ["token-registered-999"], "c": 3, "sk-openai-abcdef": None}
    assert redact(value) == {"a": f"key {REDACTED} here", "b": [REDACTED], "c": 3, REDACTED: None}


def test_short_or_empty_values_are_not_secrets(monkeypatch):
    monkeypatch.setenv("SERPER_API_KEY", "")
    assert redact("nothing to hide") == "nothing to hide"


def test_trace_writer_writes_one_redacted_line_per_step(tmp_path, scripted, monkeypatch):
    monkeypatch.setenv("SERPER_API_KEY", "serper-secret-42")
    path = tmp_path / "run.jsonl"
    model = scripted(['Action: calculator\nAction Input: {"expression": "6*7"}',
                      "Final Answer: 42 (serper-secret-42)"])
    with TraceWriter(path) as trace:
        result = Agent(model, tools=[Calculator()], on_step=trace).run("6*7?")
        trace.write({"event": "result", "result": result})
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line.get("index") for line in lines[:2]] == [0, 1]
    assert lines[0]["arguments"] == {"expression": "6*7"} and lines[0]["observation"] == "42"
    assert "serper-secret-42" not in path.read_text()
    assert lines[2]["result"]["answer"] == f"42 ({REDACTED})"


def test_dumps_handles_any_value():
    assert json.loads(dumps({"x": object.__new__(object).__class__})) == {"x": "<class 'object'>"}
