"""The context budget: prompts are shortened deterministically and never sent over-long."""

from __future__ import annotations

import pytest
from conftest import ScriptedModel
from hypothesis import given, settings
from hypothesis import strategies as st

from tinyagent import Agent, Observations, ReAct, tool
from tinyagent.agent.context import ContextOverflow, fit
from tinyagent.format.messages import prompt_messages

#: ReAct from the first reply: these tests drive the loop itself (the working first: test_working.py)
CLASSIC = ReAct(working_first=False, search="tool")


def chars(messages):
    return sum(len(m["content"]) for m in messages)


class WindowedModel(ScriptedModel):
    """A scripted model with a context window measured in characters."""

    def __init__(self, replies, window, max_new_tokens=100):
        super().__init__(replies)
        self.context_window = window
        self.generation_defaults = {"max_new_tokens": max_new_tokens}
        self.sizes = []

    def count_tokens(self, messages):
        return chars(messages)

    def generate(self, messages, stop=None, **kwargs):
        self.sizes.append(chars(messages))
        return super().generate(messages, stop, **kwargs)


@tool
def page(n: int) -> str:
    """Return a page of n characters.

    Args:
        n: the length
    """
    return "".join(chr(ord("a") + i % 26) for i in range(n))


def test_prompts_never_exceed_the_budget_and_notes_are_recorded():
    calls = [f'Action: page\nAction Input: {{"n": {n}}}' for n in (3000, 2500, 2000)]
    model = WindowedModel([*calls, "Final Answer: done"], window=6000, max_new_tokens=500)
    agent = Agent(model, tools=[page], protocol=CLASSIC, observations=Observations(max_chars=None))
    result = agent.run("read three pages")
    assert result.answer == "done" and result.finished
    assert max(model.sizes) <= 5500
    noted = [n for s in result.steps for n in s.notes]
    assert noted and all("shortened the observation" in n for n in noted)
    shortened = [s for s in result.steps if s.raw_observation]
    assert shortened and all(s.observation.endswith("[... shortened to fit the context window ...]") for s in shortened)
    assert all(len(s.raw_observation) > len(s.observation) for s in shortened)


def test_older_chat_turns_go_first():
    history = [(f"question {i} " + "x" * 400, f"answer {i}") for i in range(5)]
    model = WindowedModel(["Final Answer: ok"], window=2600, max_new_tokens=100)
    agent = Agent(model, tools=[page], protocol=CLASSIC)
    system_len = len(agent.system_prompt_for("en"))
    model.context_window = system_len + 1000 + 100
    agent.history = list(history)
    result = agent.chat("latest question")
    sent = model.calls[0]["messages"]
    assert sent[-1]["content"] == "latest question"
    kept = [m["content"] for m in sent if m["role"] == "user"][:-1]
    assert kept and kept == [q for q, _ in history][-len(kept) :]  # the newest turns survive
    assert "earlier conversation turn(s) omitted" in sent[0]["content"]
    assert result.steps[0].notes[0].startswith("dropped the oldest chat turn")
    assert agent.history[:5] == history  # the agent's own history is untouched


def test_fit_is_deterministic_and_chinese_markers():
    def run():
        messages = [{"role": "system", "content": "系统"}, {"role": "user", "content": "问" * 1000}]
        notes = fit(messages, [], "", chars, 600, "zh")
        return messages, notes

    (m1, n1), (m2, n2) = run(), run()
    assert m1 == m2 and n1 == n2
    assert chars(m1) <= 600 and "为适应上下文窗口省略了" in m1[-1]["content"]
    assert m1[-1]["content"].startswith("问") and m1[-1]["content"].endswith("问")


def test_overflow_that_cannot_be_fixed_ends_the_run_cleanly():
    model = WindowedModel(["Final Answer: never"], window=50, max_new_tokens=10)
    result = Agent(model, tools=[page], protocol=CLASSIC).run("short question " * 30)
    assert not result.finished and result.stop_reason == "context_overflow"
    assert "context window" in result.steps[-1].error and model.calls == []
    assert result.steps[-1].notes  # what was tried is recorded


def test_prompt_messages_shape():
    assert prompt_messages([{"role": "user", "content": "q"}], []) == [{"role": "user", "content": "q"}]
    with pytest.raises(ContextOverflow):
        fit([{"role": "system", "content": "s" * 100}, {"role": "user", "content": "q"}], [], "", chars, 10, "en")


def test_real_tokenizer_and_model_stay_inside_a_small_window(tmp_path):
    from tiny_models import build_tiny_llama

    from tinyagent.models import HFChatModel

    model = HFChatModel(
        str(build_tiny_llama(tmp_path / "m", max_position_embeddings=1000)), device="cpu", max_new_tokens=16
    )
    assert model.context_window == 1000
    agent = Agent(model, max_turns=1, protocol=CLASSIC)
    agent.history = [(f"Question {i}: " + "Jay Chou " * 60, "Answer " * 20) for i in range(6)]
    result = agent.run("Which year?", history=agent.history)
    assert result.stop_reason != "context_overflow" and result.steps[0].prompt_tokens <= 1000 - 16
    assert any("dropped the oldest chat turn" in n for n in result.steps[0].notes)


@settings(max_examples=150, deadline=None)
@given(
    st.integers(0, 5000),
    st.integers(0, 6),
    st.lists(st.integers(0, 3000), max_size=4),
    st.integers(1, 3000),
    st.sampled_from(["en", "zh"]),
)
def test_fit_always_ends_within_budget_or_says_it_cannot(question_len, turns, observations, budget, lang):
    from tinyagent.agent import Step

    messages = [{"role": "system", "content": "s" * 50}]
    for i in range(turns):
        messages += [{"role": "user", "content": "u" * 100}, {"role": "assistant", "content": "a" * 50}]
    messages.append({"role": "user", "content": "q" * question_len})
    steps = [Step(index=i, text="Action: x", observation="o" * n) for i, n in enumerate(observations)]
    try:
        fit(messages, steps, "", chars, budget, lang)
    except ContextOverflow:
        return
    assert chars(prompt_messages(messages, steps)) <= budget
