"""Load: 200 questions at concurrency 8 against a flaky, sometimes slow OpenAI-compatible server."""

from __future__ import annotations

import random
import re
import threading
import time
import tracemalloc

from openai_stub import OpenAIStub

from tinyagent import Agent, ReAct
from tinyagent.models import OpenAIChatModel
from tinyagent.runs import run_many
from tinyagent.tools import Calculator

#: ReAct from the first reply: these tests drive the loop itself (the working first: test_working.py)
CLASSIC = ReAct(working_first=False, search="tool")


def reply(body):
    """A tool call on the first step, then an answer naming the question, so cross-talk would show."""
    question = next(m["content"] for m in body["messages"] if m["role"] == "user")
    n = re.search(r"\d+", question).group()
    if body["messages"][-1]["role"] == "user" and "Observation:" not in body["messages"][-1]["content"]:
        return f'Thought: compute\nAction: calculator\nAction Input: {{"expression": "{n}*2"}}'
    return f"Thought: done\nFinal Answer: {n} doubled is {int(n) * 2}"


def test_200_questions_none_lost_or_duplicated():
    slow = random.Random(7)
    stub = OpenAIStub(
        reply,
        fail_rate=0.10,
        fail_status=500,
        slow_seconds=0.6,
        seed=3,
        fault_for=lambda body: "slow" if slow.random() < 0.05 else None,
    )
    questions = [f"What is {i} doubled?" for i in range(200)]
    with stub:
        model = OpenAIChatModel(stub.base_url, "stub", timeout=0.3, max_retries=2, backoff=0.01, scratchpad="fold")
        calls = {"now": 0, "most": 0}
        lock, generate = threading.Lock(), model.generate

        def counted(*args, **kwargs):  # agents waiting on the model at once (the server may also still be
            with lock:  # working on requests the client gave up on, so it cannot count this)
                calls["now"] += 1
                calls["most"] = max(calls["most"], calls["now"])
            try:
                return generate(*args, **kwargs)
            finally:
                with lock:
                    calls["now"] -= 1

        model.generate = counted
        done = []
        tracemalloc.start()
        started = time.perf_counter()
        items = run_many(
            lambda: Agent(model, tools=[Calculator()], max_turns=3, protocol=CLASSIC),
            questions,
            concurrency=8,
            on_done=lambda item: done.append(item.index),
        )
        elapsed = time.perf_counter() - started
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert [item.index for item in items] == list(range(200))
    assert sorted(done) == list(range(200))  # each reported exactly once
    faults = [r["fault"] for r in stub.requests]
    assert faults.count("500") >= 20 and faults.count("slow") >= 5  # the server really misbehaved
    for i, item in enumerate(items):
        assert item.question == questions[i]
        if item.ok:
            assert item.result.answer == f"{i} doubled is {i * 2}"
            assert item.result.steps[0].observation == str(i * 2)
        else:
            assert item.error and "http://127.0.0.1" in item.error and "\n" not in item.error
    ok = sum(item.ok for item in items)
    assert ok >= 180, f"only {ok} of 200 succeeded"
    assert 1 < calls["most"] <= 8
    assert peak < 64 * 2**20, f"peak traced memory {peak / 2**20:.0f} MiB"
    assert elapsed < 120, f"took {elapsed:.0f} s"  # a bound on retries and timeouts, not a benchmark
