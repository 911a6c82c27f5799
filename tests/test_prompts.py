"""Few-shot examples: they match the real tools' output, they are selected by tool names, they render."""

from __future__ import annotations

import re

import pytest

from tinyagent import Agent, ReAct
from tinyagent.format.examples import EXAMPLES, examples_for
from tinyagent.format.prompts import format_example
from tinyagent.text import detect_lang
from tinyagent.tools import Calculator, GoogleSearch, LocalSearch, docstore_tools
from tinyagent.tutorial import parse_action_input, parse_latest_plugin_call

ALL_EXAMPLES = [(lang, i) for lang in EXAMPLES for i in range(len(EXAMPLES[lang]))]


def real_tools() -> dict:
    """Fresh shipped tools by name (a fresh docstore pair, so each example starts with no open document)."""
    return {t.name_for_model: t for t in [Calculator(), LocalSearch(), *docstore_tools()]}


@pytest.mark.parametrize("lang, index", ALL_EXAMPLES)
def test_example_observations_are_what_the_real_tools_return(lang, index):
    tools = real_tools()
    example = EXAMPLES[lang][index]
    for step in example["steps"]:
        tool = tools[step["action"]]
        assert tool(**step["action_input"]) == step["observation"]


@pytest.mark.parametrize("lang, index", ALL_EXAMPLES)
def test_examples_are_in_their_language_with_english_keywords(lang, index):
    example = EXAMPLES[lang][index]
    texts = [example["question"], example["final_thought"], *(s["thought"] for s in example["steps"])]
    assert all(detect_lang(t) == lang for t in texts)
    transcript = format_example(example)
    keywords = re.findall(r"^([^\n:：]{1,14})[:：]", transcript, re.MULTILINE)
    assert set(keywords) <= {"Question", "Thought", "Action", "Action Input", "Observation", "Final Answer"}
    # the agent's parser reads the example's own steps back as the example means them
    first = transcript.split("\nObservation:")[0].split("\n", 1)[1]
    name, args, _ = parse_latest_plugin_call(first)
    assert name == example["steps"][0]["action"]
    assert parse_action_input(args) == example["steps"][0]["action_input"]


def test_every_language_has_a_calculator_a_search_and_a_docstore_example():
    for lang in EXAMPLES:
        actions = [tuple(s["action"] for s in e["steps"]) for e in EXAMPLES[lang]]
        assert actions == [
            ("local_search",),
            ("calculator",),
            ("calculator",),
            ("calculator", "calculator"),
            ("search", "lookup"),
        ]


def test_examples_for_keeps_only_examples_whose_tools_exist():
    assert [e["steps"][0]["action"] for e in examples_for(["calculator"], "en")] == ["calculator"] * 3
    assert [e["steps"][0]["action"] for e in examples_for(["calculator", "local_search"], "zh")] == [
        "local_search",
        "calculator",
        "calculator",
        "calculator",
    ]
    assert [e["steps"][0]["action"] for e in examples_for(["search", "lookup"], "en")] == ["search"]
    assert examples_for(["search"], "en") == []  # the docstore example needs lookup too
    assert examples_for([], "zh") == []
    assert examples_for(["calculator", "local_search"], "en", limit=1) == [EXAMPLES["en"][0]]


def test_search_example_is_retargeted_to_google_search_without_touching_the_originals():
    chosen = examples_for(["google_search", "calculator"], "en")
    assert [e["steps"][0]["action"] for e in chosen] == ["google_search", "calculator", "calculator", "calculator"]
    assert chosen[0]["steps"][0]["action_input"] == {"search_query": "Eiffel Tower"}
    GoogleSearch().validate(chosen[0]["steps"][0]["action_input"])
    assert EXAMPLES["en"][0]["steps"][0]["action"] == "local_search"
    # with both search tools available the example keeps the tool it was written for
    assert examples_for(["google_search", "local_search"], "en")[0]["steps"][0]["action"] == "local_search"


def test_unknown_language_is_a_clear_error():
    with pytest.raises(ValueError, match="no examples for language 'fr'; choose one of en, zh"):
        examples_for(["calculator"], "fr")


@pytest.mark.parametrize(
    "lang, question, header, begin, shown",
    [
        (
            "en",
            "What is 2 + 2?",
            "Here are examples of the format:",
            "Begin!",
            'Question: When was the Eiffel Tower completed, and how tall is it?\nThought: I need facts',
        ),
        (
            "zh",
            "二加二等于几？",
            "以下是该格式的示例：",
            "开始！",
            '"search_query": "珠穆朗玛峰 海拔"}\nObservation: [1] 珠穆朗玛峰\n',
        ),
    ],
)
def test_examples_render_into_the_agents_system_prompt(scripted, lang, question, header, begin, shown):
    tools = [Calculator(), LocalSearch()]
    examples = examples_for([t.name_for_model for t in tools], lang)
    model = scripted(["Final Answer: 4"])
    result = Agent(model, tools=tools, protocol=ReAct(working_first=False, examples=examples)).run(question)
    assert result.lang == lang and result.answer == "4"
    system = model.calls[0]["messages"][0]["content"]
    assert system.endswith(f"\n\n{begin}") and system.count(begin) == 1
    assert system.index("local_search: ") < system.index(header) < system.index(shown)
    for example in examples:
        assert format_example(example) in system
    assert "Action: lookup" not in system  # no example for a tool the agent does not have
