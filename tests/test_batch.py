"""run_many: parallel agent runs against one shared OpenAIChatModel behind a real HTTP stub server."""

from __future__ import annotations

import re
import threading

import pytest
from openai_stub import OpenAIStub

from tinyagent import Agent, BaseModel, ReAct
from tinyagent.models import OpenAIChatModel
from tinyagent.runs import RunItem as BatchItem
from tinyagent.runs import run_many
from tinyagent.text import one_line as one_line_error
from tinyagent.tools import Calculator

#: ReAct from the first reply: these tests drive the loop itself (the working first: test_working.py)
CLASSIC = ReAct(working_first=False, search="tool")

KEY = "sk-batch-3d9e7b1f-secret"


def question_of(body: dict) -> str:
    return next(m["content"] for m in body["messages"] if m["role"] == "user")


def react_reply(body: dict) -> str:
    """First turn: ask the calculator for `a*b` from the question; second turn: answer with the observation."""
    last = body["messages"][-1]
    if last["role"] == "assistant":
        observation = re.findall(r"Observation: (.*)", last["content"])[-1]
        return f"Thought: done.\nFinal Answer: {observation}"
    a, b = re.findall(r"\d+", question_of(body))
    return f'Thought: multiply.\nAction: calculator\nAction Input: {{"expression": "{a}*{b}"}}'


def boom_fails(body: dict) -> str | None:
    return "500" if "boom" in question_of(body) else None


@pytest.fixture
def stub():
    with OpenAIStub(react_reply, fault_for=boom_fails, jitter=0.1, seed=1, meet=4) as server:
        yield server


def test_run_many_keeps_order_and_records_the_one_failure(stub, caplog):
    model = OpenAIChatModel(stub.base_url, "stub-model", api_key=KEY, max_retries=1, backoff=0.01)
    questions = [f"What is {i} times {i + 3}?" for i in range(9)]
    questions[4] = "What is 4 times 7? boom"
    made, done, threads = [], [], set()

    def factory() -> Agent:
        agent = Agent(model, tools=[Calculator()], protocol=CLASSIC)
        made.append(agent)
        return agent

    def on_done(item: BatchItem) -> None:
        done.append(item.index)
        threads.add(threading.current_thread().name)

    items = run_many(factory, questions, concurrency=4, on_done=on_done)

    assert [item.index for item in items] == list(range(9)) and [i.question for i in items] == questions
    assert sorted(done) == list(range(9)) and threads == {threading.main_thread().name}
    assert len({id(a) for a in made}) == 9  # a fresh agent per question
    failed = items[4]
    assert not failed.ok and failed.result.stop_reason == "model_error" and not failed.result.finished
    assert failed.error.startswith("RequestFailed: ") and "HTTP 500" in failed.error and model.url in failed.error
    assert "\n" not in failed.error and KEY not in failed.error and KEY not in caplog.text
    for i, item in enumerate(items):
        if i != 4:
            assert item.ok and item.result.finished and item.result.answer == str(i * (i + 3))
    assert stub.max_in_flight == 4  # parallel (the first 4 requests met at the stub), never more than `concurrency`


def test_a_factory_that_raises_is_recorded_and_redacted(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    calls = []

    def factory() -> Agent:
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError(f"could not connect with key {KEY}\nsecond line")
        return Agent(_EchoModel(), tools=[], protocol=CLASSIC)

    items = run_many(factory, ["a", "b", "c"], concurrency=1)
    assert [i.ok for i in items] == [True, False, True]
    assert items[1].error == "RuntimeError: could not connect with key [REDACTED] second line"
    assert items[2].result.answer == "c"


class _GatedModel(BaseModel):
    """Question "a" waits until "b" is in its first call; every other first call waits for `release`."""

    def __init__(self):
        self.calls: dict[str, int] = {}
        self.b_waiting, self.release = threading.Event(), threading.Event()

    def generate(self, messages, stop=None, **kwargs):
        question = next(m["content"] for m in messages if m["role"] == "user")
        self.calls[question] = self.calls.get(question, 0) + 1
        if self.calls[question] > 1:
            return "Final Answer: 2"
        if question == "a":
            assert self.b_waiting.wait(60)
        else:
            if question == "b":
                self.b_waiting.set()
            assert self.release.wait(60)
        return 'Action: calculator\nAction Input: {"expression": "1+1"}'


def test_ctrl_c_stops_the_batch_and_cancels_pending_questions():
    """Ctrl-C (here from on_done) while "b" is mid-step: "b" stops after that step, later questions never start."""
    model = _GatedModel()

    def on_done(item: BatchItem) -> None:
        raise KeyboardInterrupt

    questions = ["a", "b", *"cdefghij"]
    with pytest.raises(KeyboardInterrupt):
        run_many(
            lambda: Agent(model, tools=[Calculator()], protocol=CLASSIC), questions, concurrency=2, on_done=on_done
        )
    model.release.set()
    workers = [t for t in threading.enumerate() if t.name.startswith("tinyagent_")]
    for worker in workers:
        worker.join(timeout=60)
    assert workers and not any(w.is_alive() for w in workers)
    assert model.calls["a"] == 2 and model.calls["b"] == 1  # "b" ended after its step, not at its answer
    # a worker may have taken "c" before the interrupt was seen; it stops the same way; nothing later starts
    assert set(model.calls) <= {"a", "b", "c"} and model.calls.get("c", 1) == 1


def test_a_failing_progress_callback_loses_no_results(caplog):
    def on_done(item: BatchItem) -> None:
        raise ValueError("progress bar bug")

    items = run_many(
        lambda: Agent(_EchoModel(), tools=[], protocol=CLASSIC), ["x", "y"], concurrency=2, on_done=on_done
    )
    assert [i.result.answer for i in items] == ["x", "y"] and "progress bar bug" in caplog.text


def test_edge_cases():
    assert run_many(lambda: None, [], concurrency=3) == []
    with pytest.raises(ValueError, match="concurrency"):
        run_many(lambda: None, ["q"], concurrency=0)
    assert one_line_error(KeyError("k")) == "KeyError: 'k'" and one_line_error(TimeoutError()) == "TimeoutError"
    assert len(one_line_error(ValueError("x" * 1000))) == 300


class _EchoModel(BaseModel):
    """Answers every question with the question itself (thread safe: no state)."""

    def generate(self, messages, stop=None, **kwargs):
        return "Final Answer: " + messages[-1]["content"]
