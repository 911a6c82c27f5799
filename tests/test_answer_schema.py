"""Answers in a schema: the final answer read as JSON into a JSON Schema or a pydantic model (result.data), sent
back once with what is wrong when it does not fit, in English and Chinese; decoded within the schema when the
model's decoding is constrained (the embedded model)."""

from __future__ import annotations

import json

import pytest
from conftest import ScriptedModel
from pydantic import BaseModel as Pydantic

from tinyagent import Agent, ReAct
from tinyagent.agent.answer_schema import AnswerError, AnswerSchema, json_value
from tinyagent.format.kinds import StepKind
from tinyagent.format.templates import shipped
from tinyagent.tools import Calculator, LocalSearch

CLASSIC = ReAct(working_first=False, search="tool")
YEAR = {
    "type": "object",
    "properties": {"year": {"type": "integer"}, "place": {"type": "string"}},
    "required": ["year"],
    "additionalProperties": False,
}


class Born(Pydantic):
    year: int
    place: str = ""


def test_an_answer_that_fits_is_data_and_the_question_says_what_to_write():
    model = ScriptedModel(['Thought: I know it.\nFinal Answer: {"year": 1979, "place": "Taipei"}'])
    result = Agent(model, [Calculator()], CLASSIC).run("When was Jay Chou born?", answer_schema=YEAR)
    assert result.data == {"year": 1979, "place": "Taipei"} and result.answer == '{"year": 1979, "place": "Taipei"}'
    question = model.calls[0]["messages"][-1]["content"]
    assert question == "When was Jay Chou born?\n\n" + shipped().fill(
        "common.answer_format", "en", schema=AnswerSchema.of(YEAR).text
    )
    model = ScriptedModel(['Final Answer: Here it is: ```json\n{"year": 1979}\n```'])  # a fenced block is read too
    born = Agent(model, [], CLASSIC).run("When?", answer_schema=Born).data
    assert isinstance(born, Born) and born.year == 1979


@pytest.mark.parametrize("lang,question", [("en", "When was Jay Chou born?"), ("zh", "周杰伦哪一年出生？")])
def test_an_answer_that_does_not_fit_is_sent_back_once_with_what_is_wrong(lang, question):
    model = ScriptedModel(['Final Answer: {"year": "nineteen seventy-nine"}', 'Final Answer: {"year": 1979}'])
    result = Agent(model, [], CLASSIC).run(question, answer_schema=YEAR)
    sent_back, answered = result.steps
    assert sent_back.kind == StepKind.RECHECK and result.data == {"year": 1979} and result.lang == lang
    expected = shipped().fill(
        "common.answer_schema",
        lang,
        schema=AnswerSchema.of(YEAR).text,
        error="year: 'nineteen seventy-nine' is not of type 'integer'",
    )
    assert sent_back.observation == expected
    assert ("不符合" if lang == "zh" else "does not") in sent_back.observation


def test_twice_wrong_keeps_the_text_answer_without_data():
    model = ScriptedModel(["Final Answer: 1979", "Final Answer: the year 1979"])
    result = Agent(model, [], CLASSIC).run("When?", answer_schema=Born)
    assert result.answer == "the year 1979" and result.data is None and result.finished
    assert "does not fit the answer schema" in result.steps[-1].error
    model = ScriptedModel(["Final Answer: 1979"])  # no turn left to send it back in
    assert Agent(model, [], CLASSIC, max_turns=1).run("When?", answer_schema=Born).data is None


def test_what_is_json_and_what_is_not():
    assert json_value('{"a": 1,}') == {"a": 1} and json_value("The answer: [1, 2") == [1, 2]
    assert json_value("42") == 42 and json_value('"x"') == "x"
    with pytest.raises(AnswerError, match="not JSON"):
        json_value("about nineteen seventy-nine")
    with pytest.raises(ValueError, match="not a JSON Schema"):
        AnswerSchema.of({"type": "integr"})
    with pytest.raises(TypeError):
        AnswerSchema.of("year")


@pytest.mark.slow
def test_the_embedded_model_decodes_its_answer_within_the_schema(embedded_model):
    pytest.importorskip("outlines_core")
    agent = Agent(embedded_model, [LocalSearch()], ReAct(constrained=True), max_turns=2, max_new_tokens=64)
    result = agent.run("Which year was Jay Chou born?", answer_schema=YEAR)
    answer = result.steps[-1].final_answer
    assert answer is not None and isinstance(json.loads(answer)["year"], int)  # JSON of the schema, as decoded
    assert result.data == json.loads(answer)
