"""Hooks (tinyagent.agent.hooks): their order, what they may change (the prompt, the reply, a tool's
arguments and output), answering a call themselves (a cache), stopping a run (a budget), and a hook
that raises ending the run like a model error."""

from __future__ import annotations

import pytest
from conftest import ScriptedModel

from tinyagent import Agent, ReAct, StepKind, StopReason
from tinyagent.agent.hooks import Hooks
from tinyagent.redaction import register_secret
from tinyagent.runs import run_many
from tinyagent.tools import Calculator

#: ReAct from the first reply: these tests drive the loop itself (the working first: test_working.py)
CLASSIC = ReAct(working_first=False, search="tool")

CALC = 'Thought: compute.\nAction: calculator\nAction Input: {"expression": "6*7"}'


class Log(Hooks):
    """Records every hook call as (name, method, detail)."""

    def __init__(self, name: str, log: list):
        self.name, self.log = name, log

    def before_run(self, run):
        self.log.append((self.name, "before_run", run.question))

    def after_run(self, run):
        self.log.append((self.name, "after_run", str(run.result.stop_reason)))

    def before_model(self, call):
        self.log.append((self.name, "before_model", call.purpose))

    def after_model(self, call):
        self.log.append((self.name, "after_model", str(call.reply)[:6]))

    def before_tool(self, call):
        self.log.append((self.name, "before_tool", call.name))

    def after_tool(self, call):
        self.log.append((self.name, "after_tool", call.output))

    def on_step(self, step):
        self.log.append((self.name, "on_step", str(step.kind)))


def test_hooks_run_in_order_before_and_in_reverse_after():
    log: list = []
    model = ScriptedModel([CALC, "Final Answer: 42"])
    Agent(
        model,
        [Calculator()],
        hooks=[Log("a", log), Log("b", log)],
        protocol=ReAct(working_first=False, thought_first=False),
    ).run("6*7?")
    assert log == [
        ("a", "before_run", "6*7?"),
        ("b", "before_run", "6*7?"),
        ("a", "before_model", "step"),
        ("b", "before_model", "step"),
        ("b", "after_model", "Though"),
        ("a", "after_model", "Though"),
        ("a", "before_tool", "calculator"),
        ("b", "before_tool", "calculator"),
        ("b", "after_tool", "42"),
        ("a", "after_tool", "42"),
        ("a", "on_step", "action"),
        ("b", "on_step", "action"),
        ("a", "before_model", "step"),
        ("b", "before_model", "step"),
        ("b", "after_model", "Final "),
        ("a", "after_model", "Final "),
        ("a", "on_step", "final_answer"),
        ("b", "on_step", "final_answer"),
        ("b", "after_run", "final_answer"),
        ("a", "after_run", "final_answer"),
    ]


def test_the_forced_answer_and_distilling_are_model_calls_too():
    log: list = []
    model = ScriptedModel([CALC, "Final Answer: 42"])
    Agent(model, [Calculator()], max_turns=1, hooks=[Log("a", log)], protocol=CLASSIC).run("6*7?")
    assert [d for _, m, d in log if m == "before_model"] == ["step", "forced_answer"]


class Rewrite(Hooks):
    """Changes this call's prompt and options before the model, and the reply after it."""

    def before_model(self, call):
        call.messages = [
            *call.messages[:-1],
            {**call.messages[-1], "content": "[rewritten] " + call.messages[-1]["content"]},
        ]
        call.options["temperature"] = 0.5

    def after_model(self, call):
        call.reply = call.reply.replace("41", "42")


def test_before_model_changes_the_prompt_and_options_and_after_model_the_reply():
    model = ScriptedModel(["Final Answer: 41"])
    result = Agent(model, [], hooks=[Rewrite()], protocol=ReAct(working_first=False, thought_first=False)).run(
        "6*7?"
    )  # the prompt ends with the user
    sent = model.calls[0]
    assert sent["messages"][-1]["content"] == "[rewritten] 6*7?" and sent["kwargs"]["temperature"] == 0.5
    assert result.answer == "42" and result.steps[0].text == "Final Answer: 42"


class Cache(Hooks):
    """A cache of model replies and tool results: a hit answers the call, and neither model nor tool runs."""

    def __init__(self, replies: dict, results: dict):
        self.replies, self.results, self.tools_seen = replies, results, []

    def before_model(self, call):
        if call.messages[-1]["content"] in self.replies:
            call.reply = self.replies[call.messages[-1]["content"]]

    def before_tool(self, call):
        if call.arguments["expression"] in self.results:
            call.output = self.results[call.arguments["expression"]]


def test_a_hook_can_answer_a_model_call_or_a_tool_call_itself():
    log: list = []
    model = ScriptedModel(["Final Answer: 42 (from the model)"])
    calculator = Calculator()
    cache = Cache({"6*7?": CALC}, {"6*7": "42 (cached)"})
    calculator.call = lambda **kwargs: pytest.fail("the cached call ran the tool")
    result = Agent(
        model, [calculator], hooks=[cache, Log("after", log)], protocol=ReAct(working_first=False, thought_first=False)
    ).run("6*7?")
    assert len(model.calls) == 1  # the first reply came from the cache
    assert result.steps[0].kind == StepKind.ACTION and result.steps[0].observation == "42 (cached)"
    assert ("after", "before_tool", "calculator") not in log and ("after", "after_tool", "42 (cached)") not in log
    assert log[:2] == [("after", "before_run", "6*7?"), ("after", "on_step", "action")]  # no model hooks: settled
    assert result.answer == "42 (from the model)"


class Budget(Hooks):
    """Stops the run once it has used `tokens` tokens."""

    def __init__(self, tokens: int):
        self.tokens = tokens

    def after_model(self, call):
        used = (call.run.result.prompt_tokens or 0) + (call.run.result.completion_tokens or 0)
        if used + (call.reply.prompt_tokens or 0) + (call.reply.completion_tokens or 0) >= self.tokens:
            call.run.stop()


def test_a_budget_hook_stops_the_run_after_the_step_in_progress():
    model = ScriptedModel([CALC, CALC.replace("6*7", "6*8"), "Final Answer: 48"], usage=(100, 10))
    result = Agent(model, [Calculator()], hooks=[Budget(200)], protocol=CLASSIC).run("6*7 and 6*8?")
    assert result.stop_reason == StopReason.STOPPED and len(result.steps) == 2 and len(model.calls) == 2


class Raises(Hooks):
    def __init__(self, method: str):
        self.method = method

    def __getattribute__(self, name):
        if name == object.__getattribute__(self, "method"):

            def fail(*args):
                raise ValueError("budget store unreachable at sk-hook-secret-77")

            return fail
        return object.__getattribute__(self, name)


@pytest.mark.parametrize(
    "method, steps_before",
    [
        ("before_run", 0),
        ("before_model", 0),
        ("after_model", 0),
        ("before_tool", 0),
        ("after_tool", 0),
        ("on_step", 1),
        ("after_run", 2),
    ],
)
def test_a_hook_that_raises_ends_the_run_with_its_steps_kept_and_a_clear_error(method, steps_before):
    register_secret("sk-hook-secret-77")
    log: list = []
    model = ScriptedModel([CALC, "Final Answer: 42"])
    result = Agent(model, [Calculator()], hooks=[Log("outer", log), Raises(method)], protocol=CLASSIC).run("6*7?")
    assert result.stop_reason == StopReason.HOOK_ERROR and not result.finished and result.answer == ""
    assert result.error == f"the hook Raises.{method} raised ValueError: budget store unreachable at [REDACTED]"
    assert [s.kind for s in result.steps] == [
        *[StepKind.ACTION, StepKind.FINAL_ANSWER][:steps_before],
        StepKind.HOOK_ERROR,
    ]
    assert result.steps[-1].error == result.error and not result.steps[-1].kind.has_reply
    befores = [m for _, m, _ in log if m.startswith("before_")]
    afters = [m for _, m, _ in log if m.startswith("after_")]
    assert sorted(m.replace("before_", "") for m in befores) == sorted(m.replace("after_", "") for m in afters)


def test_on_step_raising_is_a_hook_error_too():
    def on_step(step):
        raise RuntimeError("display broke")

    result = Agent(ScriptedModel(["Final Answer: 1"]), [], on_step=on_step, protocol=CLASSIC).run("1?")
    assert result.stop_reason == StopReason.HOOK_ERROR and result.error == (
        "the hook on_step raised RuntimeError: display broke"
    )


def test_ctrl_c_in_a_hook_interrupts_and_still_closes_the_outer_hooks():
    log: list = []

    class Interrupt(Hooks):
        def before_tool(self, call):
            raise KeyboardInterrupt

    agent = Agent(ScriptedModel([CALC]), [Calculator()], hooks=[Log("outer", log), Interrupt()], protocol=CLASSIC)
    with pytest.raises(KeyboardInterrupt):
        agent.run("6*7?")
    assert [m for _, m, _ in log][-2:] == ["after_tool", "after_run"]


def test_run_many_reports_a_hook_error_as_the_question_error():
    def factory():
        return Agent(ScriptedModel(["Final Answer: 1"]), [], hooks=[Raises("after_model")], protocol=CLASSIC)

    (item,) = run_many(factory, ["1?"])
    assert item.error == "the hook Raises.after_model raised ValueError: budget store unreachable at sk-hook-secret-77"
    assert item.result.stop_reason == StopReason.HOOK_ERROR
