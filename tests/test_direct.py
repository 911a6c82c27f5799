"""The no-agent baseline: its prompt (en / zh), reading its answer line, and `DirectAnswer`, the model alone."""

from __future__ import annotations

import pytest
from conftest import ScriptedModel

from tinyagent import StepKind, StopReason
from tinyagent.agent import DirectAnswer
from tinyagent.format.direct import direct_messages, read_direct_answer
from tinyagent.format.templates import shipped


@pytest.mark.parametrize(
    "lang, says",
    [
        ("en", ["step by step", "last line", "The answer is X.", "Question: How many?"]),
        ("zh", ["一步一步", "最后单独写一行", "答案是 X。", "问题：How many?"]),
    ],
)
def test_the_direct_prompt_asks_for_the_working_and_an_answer_line(lang, says):
    (message,) = direct_messages("How many?", lang)
    assert message["role"] == "user"
    for text in says:
        assert text in message["content"]
    for label in ("Thought", "Action", "Final Answer", "Observation"):  # no ReAct format, no tools
        assert label not in shipped().text("direct.question", lang)


@pytest.mark.parametrize(
    "reply, answer",
    [
        ("16 - 3 - 4 = 9 eggs.\n9 * 2 = 18 dollars.\nThe answer is 18.", "18"),
        ("Working...\n**The answer is $18.**", "$18"),
        ("So the answer is 5", "5"),
        ("Therefore, the final answer is: 70,000.", "70,000"),
        ("Final Answer: 42", "42"),
        ("3 + 4 = 7\n答案是 7。", "7"),
        ("计算：12 × 6 = 72\n所以答案为：72", "72"),
        ("The answer is 3.\nWait, let me check.\nThe answer is 4.", "4"),  # the last answer line counts
        ("The answer is 18 dollars per day.", "18 dollars per day"),
        ("<think>The answer is 5.</think>It is 6.", None),  # reasoning does not count
        ("She makes 18 dollars a day.", None),  # no answer line
        ("The answer is.", None),  # a line with nothing on it
        ("", None),
    ],
)
def test_read_direct_answer(reply, answer):
    assert read_direct_answer(reply) == answer


def test_a_reply_with_the_answer_line_is_a_final_answer():
    model = ScriptedModel(["9 * 2 = 18\nThe answer is 18.\n"], usage=(40, 12))
    seen = []
    result = DirectAnswer(model, on_step=seen.append, max_new_tokens=300, temperature=0.0).run("How much?")
    (call,) = model.calls
    assert call["messages"] == direct_messages("How much?", "en")
    assert call["kwargs"] == {"max_new_tokens": 300, "temperature": 0.0} and call["stop"] is None
    assert result.answer == "18" and result.stop_reason == StopReason.FINAL_ANSWER and result.finished
    (step,) = result.steps
    assert step.kind == StepKind.FINAL_ANSWER and step.text == "9 * 2 = 18\nThe answer is 18."
    assert (result.prompt_tokens, result.completion_tokens, result.generate_calls) == (40, 12, 1)
    assert seen == [step]


def test_a_reply_without_the_line_is_taken_whole_and_chinese_gets_the_chinese_prompt():
    model = ScriptedModel(["他出生于1979年。"])
    result = DirectAnswer(model).run("周杰伦是哪一年出生的？")
    assert model.calls[0]["messages"] == direct_messages("周杰伦是哪一年出生的？", "zh") and result.lang == "zh"
    assert result.answer == "他出生于1979年。" and result.stop_reason == StopReason.NO_ACTION
    assert result.steps[0].kind == StepKind.NO_ACTION and result.steps[0].error == "no answer line"


def test_an_empty_reply_and_a_failing_model(monkeypatch):
    result = DirectAnswer(ScriptedModel(["  \n"])).run("q")
    assert result.answer == "" and result.steps[0].kind == StepKind.EMPTY

    monkeypatch.setenv("OPENAI_API_KEY", "sk-direct-secret-99")

    class Broken(ScriptedModel):
        def generate(self, messages, stop=None, **kwargs):
            raise ConnectionError("refused for key sk-direct-secret-99")

    from tinyagent.redaction import register_secret

    register_secret("sk-direct-secret-99")
    result = DirectAnswer(Broken([])).run("q")
    assert result.stop_reason == StopReason.MODEL_ERROR and not result.finished
    assert result.error == "ConnectionError: refused for key [REDACTED]"
    assert result.steps[0].kind == StepKind.MODEL_ERROR


def test_unknown_generation_keywords_and_languages_are_refused():
    with pytest.raises(TypeError, match="temprature"):
        DirectAnswer(ScriptedModel([]), temprature=0.5)
    with pytest.raises(ValueError, match="lang"):
        DirectAnswer(ScriptedModel([]), lang="fr")
