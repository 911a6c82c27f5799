"""The protocols as strategy objects: each owns its settings, a setting of one cannot be given to the other,
the defaults are decided in one place whichever door the agent is built through, and a reply is a value whose
tool calls nothing drops."""

from __future__ import annotations

import threading

import pytest
from conftest import ScriptedModel

from tinyagent import Agent, ReAct, Reply, Tools, tool
from tinyagent.config import ConfigError, build_agent, load_config
from tinyagent.config.build import build_protocol
from tinyagent.format.kinds import StepKind
from tinyagent.format.templates import shipped
from tinyagent.tools import Calculator, LocalSearch


class Prefers(ScriptedModel):
    """A model that follows the format only when constrained, as the embedded one says of itself."""

    prefers_constrained = True


@pytest.mark.parametrize(
    "model,tools,expected",
    [
        (ScriptedModel([]), [Calculator()], dict(constrained=False, working_first=True, check_arithmetic=True)),
        (ScriptedModel([]), [LocalSearch()], dict(constrained=False, working_first=True, check_arithmetic=False)),
        (Prefers([]), [Calculator()], dict(constrained=True, working_first=False, check_arithmetic=False)),
    ],
)
def test_one_algorithm_whichever_door(model, tools, expected):
    """Python's Agent(model, tools) and a config's agent run the same protocol, resolved by one rule."""
    if expected["constrained"]:
        pytest.importorskip("outlines_core")
    python = Agent(model, tools).protocol
    configured = build_agent(load_config(), model, tools=tools).protocol
    assert python == configured
    assert {k: getattr(python, k) for k in expected} == expected


def test_a_setting_of_the_other_protocol_cannot_be_written():
    with pytest.raises(TypeError):
        Tools(working_first=True)
    with pytest.raises(TypeError):
        ReAct(max_calls=3)
    with pytest.raises(ValueError, match="needs working_first"):
        ReAct(working_first=False, check_arithmetic=True)
    with pytest.raises(ValueError, match="recheck must be one of"):
        ReAct(recheck="sometimes")
    with pytest.raises(ValueError, match="max_calls"):
        Tools(max_calls=0)
    cfg = load_config(overrides={"agent.protocol": "tools", "agent.check_arithmetic": True})
    with pytest.raises(ConfigError, match="agent.check_arithmetic: a setting of another protocol than tools"):
        build_protocol(cfg, ScriptedModel([]))


def test_the_config_sets_only_what_it_names_and_the_protocol_records_itself():
    cfg = load_config(overrides={"agent.recheck": "results", "agent.thought_first": True})
    protocol = build_protocol(cfg, ScriptedModel([]))
    assert protocol == ReAct(recheck="results", thought_first=True)  # the rest left to ReAct's defaults
    record = Agent(ScriptedModel([]), [Calculator()], protocol).protocol.record()
    assert record == {
        "protocol": "react",
        "working_first": True,
        "check_arithmetic": True,
        "ask_answer": True,
        "recheck": "results",
        "thought_first": True,
        "examples": False,
        "constrained": False,
        "search": "tool",
        "search_tool": None,
    }  # no search tool among the tools: the model's own
    assert Tools(max_calls=2).resolved(ScriptedModel([]), []).record() == {
        "protocol": "tools",
        "parallel": True,
        "max_calls": 2,
        "family": "hermes",
        "constrained": False,
    }


def test_a_reply_with_text_and_calls_runs_its_calls():
    """A server's reply holding both text and parsed calls ("Let me look that up." and a call): the calls run."""

    class Server(ScriptedModel):
        tool_call_turns = native_tools = True

        def generate(self, messages, stop=None, **kwargs):
            text = super().generate(messages, stop, **kwargs)
            if messages[-1]["role"] == "tool":
                return text
            return Reply(
                "Let me work that out.",
                tool_calls=[{"id": "c1", "name": "calculator", "arguments": '{"expression": "6*7"}'}],
            )

    result = Agent(Server(["", "It is 42."]), [Calculator()], "tools").run("6*7?")
    assert [s.kind for s in result.steps] == [StepKind.ACTION, StepKind.FINAL_ANSWER]
    assert result.steps[0].observation == "42" and result.answer == "It is 42."


def test_calls_past_the_cap_are_refused_and_the_pool_is_bounded():
    running, most, lock = [0], [0], threading.Lock()
    gate = threading.Barrier(3, timeout=10)  # the first three calls meet: they do run at the same time

    @tool
    def slow(n: int) -> str:
        """Return n.

        Args:
            n: a number
        """
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        try:
            if n < 3:
                gate.wait()
            return str(n)
        finally:
            with lock:
                running[0] -= 1

    calls = "\n".join(f'<tool_call>\n{{"name": "slow", "arguments": {{"n": {n}}}}}\n</tool_call>' for n in range(300))
    model = ScriptedModel([calls, "done"])
    model.tool_format, model.native_tools = "hermes", True
    result = Agent(model, [slow], Tools(max_calls=3)).run("?")
    ran = [s for s in result.steps if s.kind == StepKind.ACTION]
    refused = [s for s in result.steps if s.kind == StepKind.REFUSED]
    assert [s.observation for s in ran] == ["0", "1", "2"] and len(refused) == 297
    assert most[0] == 3  # no more threads than the cap
    assert refused[0].observation == shipped().fill("tools.too_many_calls", "en", tool="slow", ran=3, made=300)
    assert result.answer == "done"


def test_prompts_are_data_overridable_and_checksummed(tmp_path):
    model = ScriptedModel(["Final Answer: 1"])
    agent = Agent(
        model, [Calculator()], ReAct(working_first=False), prompts={"react.system": {"en": "Tools: {tool_names}. Go."}}
    )
    agent.run("What is 1?")
    assert model.calls[0]["messages"][0]["content"] == "Tools: calculator. Go."
    assert agent.prompts.sha256 != shipped().sha256
    file = tmp_path / "mine.yaml"
    file.write_text("react:\n  force_final: 'Answer now:\n\n    Final Answer:'\n", encoding="utf-8")
    assert Agent(model, [], prompts=str(file)).prompts.text("react.force_final", "zh") == "Answer now:\nFinal Answer:"
    with pytest.raises(ValueError, match="no prompt named 'react.sytem'"):
        Agent(model, [], prompts={"react.sytem": "x"})
    with pytest.raises(ValueError, match="has no slot tools"):
        Agent(model, [], prompts={"react.system": "{tools}"})
    # every shipped prompt has both languages, and the same slots in each
    import re

    for name, texts in shipped().texts.items():
        assert set(texts) == {"en", "zh"}, name
        assert set(re.findall(r"\{([a-z_]+)\}", texts["en"])) == set(re.findall(r"\{([a-z_]+)\}", texts["zh"])), name
