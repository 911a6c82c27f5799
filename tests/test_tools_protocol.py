"""The tools protocol through the one loop, driven by a scripted model: parallel calls, their results in one
turn, the guards and observations ReAct has, the forced answer, the protocol's setting and its record."""

from __future__ import annotations

import json
import threading

import pytest

from tinyagent import Agent, ReAct, Tools, tool
from tinyagent.agent.loop import auto_protocol
from tinyagent.config import ConfigError, load_config
from tinyagent.tools import Calculator

#: ReAct from the first reply: these tests drive the loop itself (the working first: test_working.py)
CLASSIC = ReAct(working_first=False, search="tool")


def call(name: str, args: dict) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': args})}\n</tool_call>"


def tools_model(scripted, replies, native: bool = True):
    model = scripted(replies)
    model.tool_format, model.native_tools = "hermes", native
    return model


def test_parallel_calls_each_become_a_step_and_their_results_go_back_in_one_turn(scripted):
    reply = (
        "Both at once.\n" + call("calculator", {"expression": "2+2"}) + "\n" + call("calculator", {"expression": "3*3"})
    )
    model = tools_model(scripted, [reply, "4 and 9."])
    result = Agent(model, [Calculator()], protocol=Tools()).run("2+2 and 3*3?")
    assert result.protocol == "tools" and result.answer == "4 and 9." and result.stop_reason == "final_answer"
    first, second, final = result.steps
    assert (first.action, first.observation, second.observation) == ("calculator", "4", "9")
    assert first.turn == second.turn == 0 and first.thought == "Both at once."
    assert first.text == reply and second.text == ""
    assert result.generate_calls == 2
    sent = model.calls[1]["messages"]
    assert sent[:2] == model.calls[0]["messages"]  # the prompt only grows
    assert sent[2] == {"role": "assistant", "content": reply}
    assert [(m["role"], m["content"], m["tool_call_id"]) for m in sent[3:]] == [
        ("tool", "4", "call_0"),
        ("tool", "9", "call_1"),
    ]
    schemas = model.calls[0]["kwargs"]["tools"]
    assert schemas[0]["function"]["name"] == "calculator"
    assert "arithmetic expression" in schemas[0]["function"]["parameters"]["properties"]["expression"]["description"]


def test_calls_of_one_reply_run_at_the_same_time():
    meeting = threading.Barrier(2, timeout=10)

    @tool
    def wait_for_the_other(name: str) -> str:
        """Waits until the other call runs too."""
        meeting.wait()  # raises BrokenBarrierError (a tool error) unless both calls run at once
        return f"met {name}"

    from conftest import ScriptedModel

    model = ScriptedModel([call("wait_for_the_other", {"name": "a"}) + call("wait_for_the_other", {"name": "b"}), "ok"])
    model.native_tools = True
    result = Agent(model, [wait_for_the_other], protocol=Tools()).run("?")
    assert [s.observation for s in result.steps[:2]] == ["met a", "met b"]


def test_a_tool_that_does_not_allow_it_runs_its_calls_one_after_another(scripted):
    running, most = [0], [0]
    lock = threading.Lock()

    @tool
    def one_at_a_time(n: int) -> str:
        """Counts how many calls run at once."""
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        with lock:
            running[0] -= 1
        return str(n)

    one_at_a_time.concurrent = False
    model = tools_model(scripted, ["".join(call("one_at_a_time", {"n": i}) for i in range(3)), "done"])
    result = Agent(model, [one_at_a_time], protocol=Tools()).run("?")
    assert [s.observation for s in result.steps[:3]] == ["0", "1", "2"] and most[0] == 1


def test_errors_guards_and_unknown_tools_are_observations_in_the_callers_format(scripted):
    reply = (
        call("calculator", {"expression": "1+1"})
        + call("calculator", {"expression": "1+1"})
        + call("weather", {"city": "x"})
        + call("calculator", {"expr": "1"})
    )
    model = tools_model(scripted, [reply, "2"])
    result = Agent(model, [Calculator()], protocol=Tools()).run("?")
    kinds = [s.kind for s in result.steps[:4]]
    assert kinds == ["action", "repeated_call", "unknown_tool", "bad_input"]
    assert "already called calculator" in result.steps[1].observation
    assert "<tool_call>" in result.steps[2].observation and "Action:" not in result.steps[2].observation
    assert [m["role"] for m in model.calls[1]["messages"][2:]] == ["assistant", "tool", "tool", "tool", "tool"]


def test_a_reply_that_is_not_a_call_gets_an_error_as_a_user_turn(scripted):
    model = tools_model(scripted, ["<tool_call>{oops", "fine: 3"])
    result = Agent(model, [Calculator()], protocol=Tools()).run("?")
    assert result.steps[0].kind == "malformed" and result.answer == "fine: 3"
    assert model.calls[1]["messages"][-1]["role"] == "user"
    assert model.calls[1]["messages"][-1]["content"].startswith("Error: the tool call could not be read")


def test_the_turn_cap_forces_an_answer_without_running_more_calls(scripted):
    loop = [call("calculator", {"expression": f"{i}+1"}) for i in range(2)]
    model = tools_model(scripted, [*loop, call("calculator", {"expression": "9"}) + "\nIt is 2."])
    result = Agent(model, [Calculator()], max_turns=2, protocol=Tools()).run("?")
    assert result.stop_reason == "max_turns" and result.answer == "It is 2."
    assert result.steps[-1].kind == "forced_answer" and len(result.steps) == 3
    last = model.calls[-1]["messages"][-1]
    assert last["role"] == "user" and "without calling a tool" in last["content"]


def test_a_template_without_tools_gets_the_family_text_and_results_as_user_turns(scripted):
    model = tools_model(scripted, [call("calculator", {"expression": "2+2"}), "4"], native=False)
    Agent(model, [Calculator()], protocol=Tools()).run("?")
    first, second = (c["messages"] for c in model.calls)
    assert "<tools>" in first[0]["content"] and '"name": "calculator"' in first[0]["content"]
    assert "tools" not in model.calls[0]["kwargs"]
    assert second[-1] == {"role": "user", "content": "<tool_response>\n4\n</tool_response>"}


def test_server_calls_go_back_as_tool_call_turns_with_their_ids(scripted):
    from tinyagent import Reply

    class Server(type(scripted([]))):
        tool_call_turns = native_tools = True

        def generate(self, messages, stop=None, **kwargs):
            text = super().generate(messages, stop, **kwargs)
            if not self.calls[-1]["messages"][-1]["role"] == "tool":
                return Reply("", tool_calls=[{"id": "abc", "name": "calculator", "arguments": '{"expression": "6*7"'}])
            return text

    model = Server(["", "42"])
    result = Agent(model, [Calculator()], protocol=Tools()).run("6*7?")
    assert result.answer == "42" and result.steps[0].call_id == "abc" and result.steps[0].observation == "42"
    assistant, result_msg = model.calls[1]["messages"][2:]
    assert assistant["tool_calls"] == [
        {"id": "abc", "type": "function", "function": {"name": "calculator", "arguments": '{"expression": "6*7"'}}
    ]
    assert (result_msg["role"], result_msg["tool_call_id"], result_msg["content"]) == ("tool", "abc", "42")


def test_auto_picks_react_for_local_models_and_the_servers_format_behind_a_server(scripted):
    plain = scripted(["Thought: x\nFinal Answer: 1"])
    assert auto_protocol(plain) == "react"
    assert Agent(plain, [Calculator()], protocol="auto").run("?").protocol == "react"
    assert auto_protocol(tools_model(scripted, ["1"])) == "react"  # a local template with tools: measured worse
    from tinyagent.models import OpenAIChatModel

    assert auto_protocol(OpenAIChatModel("http://127.0.0.1:9/v1", "m")) == "tools"
    with pytest.raises(ValueError, match="protocol must be one of react, tools, auto"):
        Agent(plain, protocol="native")


def test_the_protocol_setting_in_config_and_on_the_command_line(tmp_path):
    assert load_config(None).agent.protocol == "react"
    assert load_config(None, {"agent.protocol": "tools"}).agent.protocol == "tools"
    with pytest.raises(ConfigError, match="agent.protocol"):
        load_config(None, {"agent.protocol": "json"})
    from tinyagent.cli.commands import build_parser

    args = build_parser().parse_args(["ask", "--protocol", "tools", "hi"])
    from tinyagent.cli.options import config_from_args

    assert config_from_args(args).agent.protocol == "tools"


def test_a_repeated_call_gets_the_earlier_result_and_is_asked_for_the_answer(scripted):
    """What Qwen2.5-Coder-0.5B does in this protocol: the same call again after its result (measured)."""
    same = call("calculator", {"expression": "2**10"})
    model = tools_model(scripted, [same, same, "1024"])
    result = Agent(model, [Calculator()], protocol=Tools()).run("2**10?")
    assert [s.kind for s in result.steps] == ["action", "repeated_call", "final_answer"]
    assert result.steps[1].observation.startswith(
        "You already called calculator with these arguments, and it "
        "returned: 1024\nDo not call it again: reply with the answer now."
    )


def test_schema_keys_copied_into_call_arguments_are_dropped(scripted):
    copied = call("calculator", {"expression": "3+6", "required": ["expression"]})
    model = tools_model(scripted, [copied, "9"])
    result = Agent(model, [Calculator()], protocol=Tools()).run("3+6?")
    assert (result.steps[0].kind, result.steps[0].arguments, result.steps[0].observation) == (
        "action",
        {"expression": "3+6"},
        "9",
    )


@pytest.mark.parametrize("arguments", ["expression=b'2+2'", "expression={1, 2}", "expression=" + "-" * 3000 + "1"])
def test_python_call_arguments_json_has_no_form_for_are_an_error_the_model_reads(scripted, arguments):
    """Llama's `name.call(...)` with bytes, a set or thousands of nested minus signs: a format error observation,
    then the run goes on (they raised TypeError / RecursionError out of Agent.run)."""
    model = tools_model(scripted, [f"<|python_tag|>calculator.call({arguments})", "4."])
    model.tool_format = "llama3"
    result = Agent(model, [Calculator()], protocol="tools").run("2+2?")
    assert result.answer == "4." and result.stop_reason == "final_answer"
    step = result.steps[0]
    assert step.kind == "bad_input" and ("write JSON values" in step.error or "nest too deeply" in step.error)
