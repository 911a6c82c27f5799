"""Approving tool calls through the Python callable (tinyagent.agent.approval): run, always, edit
(arguments that do not fit, then ones that do), refuse, and the per-tool policy."""

from __future__ import annotations

import json

import pytest
from conftest import ScriptedModel

from tinyagent import Agent, ReAct, StepKind, StopReason, tool
from tinyagent.agent.approval import Approver, Policy, Verdict
from tinyagent.eval.harness import score_run, summarize
from tinyagent.eval.scoring import SuiteItem
from tinyagent.tools import Calculator
from tinyagent.traces import TraceWriter

#: ReAct from the first reply: these tests drive the loop itself (the working first: test_working.py)
CLASSIC = ReAct(working_first=False, search="tool")

WRITES: list[dict] = []


@tool
def write_file(path: str, text: str) -> str:
    """Write text to a file.

    Args:
        path: where
        text: what
    """
    WRITES.append({"path": path, "text": text})
    return f"wrote {len(text)} characters to {path}"


def call(path: str, text: str = "hello") -> str:
    return f'Thought: write it.\nAction: write_file\nAction Input: {json.dumps({"path": path, "text": text})}'


@pytest.fixture(autouse=True)
def no_writes():
    WRITES.clear()


class Asker:
    """Answers with the verdicts given, in order, and records every request."""

    def __init__(self, *verdicts: Verdict):
        self.verdicts, self.requests = list(verdicts), []

    def __call__(self, request):
        self.requests.append(request)
        return self.verdicts.pop(0)


def test_run_lets_the_call_through_and_the_callable_sees_tool_arguments_step_and_run():
    ask = Asker(Verdict.run())
    model = ScriptedModel([call("a.txt"), "Final Answer: done"])
    result = Agent(model, [write_file], approve=ask, protocol=CLASSIC).run("Write hello to a.txt")
    (request,) = ask.requests
    assert request.tool is write_file and request.name == "write_file"
    assert request.arguments == {"path": "a.txt", "text": "hello"} and request.problem is None
    assert request.step.index == 0 and request.step.thought == "write it."
    assert request.run.question == "Write hello to a.txt" and request.run.result is result
    assert WRITES == [{"path": "a.txt", "text": "hello"}]
    assert [s.kind for s in result.steps] == [StepKind.ACTION, StepKind.FINAL_ANSWER]
    assert result.steps[0].observation == "wrote 5 characters to a.txt"


def test_always_is_asked_once_per_tool():
    ask = Asker(Verdict.always())
    model = ScriptedModel([call("a.txt"), call("b.txt"), call("c.txt"), "Final Answer: done"])
    agent = Agent(model, [write_file, Calculator()], approve=ask, protocol=CLASSIC)
    result = agent.run("Write three files")
    assert len(ask.requests) == 1 and [w["path"] for w in WRITES] == ["a.txt", "b.txt", "c.txt"]
    assert [s.kind for s in result.steps[:3]] == [StepKind.ACTION] * 3
    approver = agent.hooks[0]
    assert approver.policy_for("write_file") == Policy.ALWAYS and approver.policy_for("calculator") == Policy.ASK


def test_an_edit_that_does_not_fit_is_asked_again_with_the_problem_then_a_good_one_runs():
    ask = Asker(Verdict.edit({"path": "b.txt"}), Verdict.edit('{"path": "b.txt", text: "bye",}'))  # json5, as a model
    model = ScriptedModel([call("a.txt"), "Final Answer: done"])
    result = Agent(model, [write_file], approve=ask, protocol=CLASSIC).run("Write hello to a.txt")
    first, second = ask.requests
    assert first.problem is None and second.problem.startswith("bad Action Input for write_file: missing required")
    assert second.arguments == {"path": "a.txt", "text": "hello"}  # still the model's, until an edit fits
    assert WRITES == [{"path": "b.txt", "text": "bye"}]
    step = result.steps[0]
    assert step.kind == StepKind.EDITED and step.kind.format_valid and not step.kind.format_error
    assert step.arguments == {"path": "b.txt", "text": "bye"} and step.edited_from == {"path": "a.txt", "text": "hello"}
    assert step.observation == "wrote 3 characters to b.txt"
    assert "wrote 3 characters to b.txt" in model.calls[1]["messages"][-1]["content"]  # the model reads it


def test_edits_that_never_fit_end_in_a_refusal_after_edit_rounds():
    ask = Asker(*[Verdict.edit({"path": 3, "text": "x"})] * 2)
    model = ScriptedModel([call("a.txt"), "Final Answer: gave up"])
    result = Agent(model, [write_file], approve=Approver(ask, edit_rounds=2), protocol=CLASSIC).run("Write")
    assert len(ask.requests) == 2 and WRITES == []
    step = result.steps[0]
    assert step.kind == StepKind.REFUSED and step.error.startswith("the edited arguments did not fit 2 times (")


def test_refuse_gives_the_model_the_reason_and_the_tool_never_runs():
    ask = Asker(Verdict.refuse("not in my home folder"), Verdict.run())
    model = ScriptedModel([call("/etc/passwd"), call("/etc/passwd"), "Final Answer: done"])
    result = Agent(model, [write_file], approve=ask, protocol=CLASSIC).run("Write it")
    refused, again = result.steps[:2]
    assert refused.kind == StepKind.REFUSED and refused.error == "not in my home folder"
    assert refused.kind.format_valid and not refused.kind.format_error
    assert refused.observation.startswith("The call to write_file was refused, so it did not run: not in my home")
    assert "Observation: The call to write_file was refused" in model.calls[1]["messages"][-1]["content"]
    assert again.kind == StepKind.ACTION  # a refused call is not a repeat: it is asked about again
    assert len(ask.requests) == 2 and WRITES == [{"path": "/etc/passwd", "text": "hello"}]


def test_refusals_are_in_chinese_for_a_chinese_question():
    model = ScriptedModel([call("a.txt"), "Final Answer: 好"])
    result = Agent(model, [write_file], approve=lambda r: Verdict.refuse("不行"), protocol=CLASSIC).run("写一个文件")
    assert result.steps[0].observation.startswith("对 write_file 的调用被拒绝，没有执行：不行")


def test_a_repeat_of_an_approved_call_is_refused_as_a_repeat_without_asking():
    ask = Asker(Verdict.run())
    model = ScriptedModel([call("a.txt"), call("a.txt"), "Final Answer: done"])
    result = Agent(model, [write_file], approve=ask, protocol=CLASSIC).run("Write")
    assert [s.kind for s in result.steps[:2]] == [StepKind.ACTION, StepKind.REPEATED_CALL] and len(ask.requests) == 1


def test_the_policy_runs_refuses_or_asks_per_tool():
    ask = Asker(Verdict.run())
    model = ScriptedModel(
        [call("a.txt"), 'Action: calculator\nAction Input: {"expression": "2+2"}', "Final Answer: done"]
    )
    policy = {"write_file": "never", "calculator": "ask"}
    result = Agent(
        model, [write_file, Calculator()], approve=Approver(ask, policy, default="always"), protocol=CLASSIC
    ).run("Go")
    assert [s.kind for s in result.steps] == [StepKind.REFUSED, StepKind.ACTION, StepKind.FINAL_ANSWER]
    assert result.steps[0].error == "calls to write_file are not allowed here" and WRITES == []
    assert [r.name for r in ask.requests] == ["calculator"] and result.steps[1].observation == "4"


def test_asking_with_no_one_to_ask_refuses_and_says_so():
    model = ScriptedModel([call("a.txt"), "Final Answer: done"])
    result = Agent(model, [write_file], approve=Approver(None, {"write_file": "ask"}), protocol=CLASSIC).run("Go")
    assert result.steps[0].kind == StepKind.REFUSED and WRITES == []
    assert result.steps[0].error == "write_file needs approval and no one is here to approve it"


@pytest.mark.parametrize(
    "make, message",
    [
        (
            lambda: Approver(policy={"write_file": "sometimes"}),
            "approval policy for write_file: 'sometimes' is not one",
        ),
        (lambda: Approver(default="maybe"), "approval policy for default: 'maybe'"),
        (lambda: Approver(edit_rounds=0), "edit_rounds must be a whole number of at least 1"),
        (lambda: Agent(ScriptedModel([]), approve="yes", protocol=CLASSIC), "approve must be a callable"),
    ],
)
def test_bad_settings_are_refused_at_once(make, message):
    with pytest.raises((ValueError, TypeError), match=message):
        make()


def test_an_answer_that_is_not_a_verdict_ends_the_run_as_a_hook_error():
    model = ScriptedModel([call("a.txt"), "Final Answer: never"])
    result = Agent(model, [write_file], approve=lambda request: True, protocol=CLASSIC).run("Go")
    assert result.stop_reason == StopReason.HOOK_ERROR and not result.finished and WRITES == []
    assert result.error.startswith(
        "the hook Approver.before_tool raised TypeError: an approver must answer with a Verdict"
    )
    assert [s.kind for s in result.steps] == [StepKind.HOOK_ERROR]


def test_refused_and_edited_calls_are_counted_by_eval_and_written_to_the_trace(tmp_path):
    ask = Asker(Verdict.edit({"path": "b.txt", "text": "x"}), Verdict.refuse("enough"))
    model = ScriptedModel([call("a.txt"), call("c.txt"), "Final Answer: 1"])
    path = tmp_path / "trace.jsonl"
    with TraceWriter(path) as trace:
        result = Agent(model, [write_file], approve=ask, on_step=trace, protocol=CLASSIC).run("Go")
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["kind"] for line in lines] == ["edited", "refused", "final_answer"]
    assert lines[0]["edited_from"] == {"path": "a.txt", "text": "hello"} and lines[1]["error"] == "enough"
    record = score_run(SuiteItem(id="q", question="Go", answer=1), result, 0.1)
    assert record["refused_calls"] == 1 and record["edited_calls"] == 1 and record["format_valid"]
    summary = summarize([record, record])
    assert summary["refused_calls"] == 2 and summary["edited_calls"] == 2
