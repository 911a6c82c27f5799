"""The model's own tool-call formats, read as forgivingly as ReAct text, and the one argument reader."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tinyagent import tool
from tinyagent.format.arguments import ActionInputError, read_arguments
from tinyagent.format.kinds import StepKind
from tinyagent.format.reading import read_step
from tinyagent.format.step_format import next_step_format, pattern_of, require_outlines
from tinyagent.format.tool_formats import FORMATS, detect_format, template_takes_tools
from tinyagent.format.tool_reading import read_calls
from tinyagent.tools import Calculator, GoogleSearch

TOOLS = [Calculator(), GoogleSearch(api_key="k")]
CALC = {"expression": "2+2"}
SEARCH = {"search_query": "Jay Chou"}


def calls_of(reply: str, family: str = "hermes") -> list[tuple]:
    return [(r.kind, r.action, r.arguments) for r in read_calls(reply, TOOLS, FORMATS[family])]


def call_json(name: str, args: dict, key: str = "arguments") -> str:
    return json.dumps({"name": name, key: args})


# --- each family's own format, one call and several -------------------------------------------------


@pytest.mark.parametrize("family", list(FORMATS))
def test_each_family_reads_its_own_call_as_written(family):
    reply = FORMATS[family].write_call("calculator", CALC)
    assert calls_of(reply, family) == [(StepKind.ACTION, "calculator", CALC)]


PARALLEL = {
    "hermes": f"Two lookups.\n<tool_call>\n{call_json('calculator', CALC)}\n</tool_call>\n"
    f"<tool_call>\n{call_json('google_search', SEARCH)}\n</tool_call>",
    "llama3": f"{call_json('calculator', CALC, 'parameters')}; {call_json('google_search', SEARCH, 'parameters')}",
    "mistral": f"[TOOL_CALLS][{call_json('calculator', CALC)}, {call_json('google_search', SEARCH)}]",
    "internlm2": f"<|action_start|><|plugin|>\n{call_json('calculator', CALC, 'parameters')}<|action_end|>\n"
    f"<|action_start|><|plugin|>\n{call_json('google_search', SEARCH, 'parameters')}<|action_end|>",
}


@pytest.mark.parametrize("family", list(PARALLEL))
def test_several_calls_in_one_reply_are_each_a_reading(family):
    readings = read_calls(PARALLEL[family], TOOLS, FORMATS[family])
    assert [(r.kind, r.action, r.arguments) for r in readings] == [
        (StepKind.ACTION, "calculator", CALC),
        (StepKind.ACTION, "google_search", SEARCH),
    ]
    assert readings[0].text == PARALLEL[family] and readings[1].text == ""  # the reply goes back once
    assert readings[0].thought == ("Two lookups." if family == "hermes" else "")


def test_other_families_forms_are_read_too():
    assert calls_of('[TOOL_CALLS]calculator[ARGS]{"expression": "5"}', "hermes") == [
        (StepKind.ACTION, "calculator", {"expression": "5"})
    ]  # Mistral v11
    assert calls_of('<|python_tag|>google_search.call(search_query="weather")', "hermes") == [
        (StepKind.ACTION, "google_search", {"search_query": "weather"})
    ]  # Llama 3 built-in tool form


@pytest.mark.parametrize(
    "reply",
    [
        # what Qwen2.5-Coder-0.5B writes given tools=: a fenced JSON object, no tags
        f"```json\n{call_json('calculator', CALC)}\n```",
        call_json("calculator", CALC),  # bare
        f"{call_json('calculator', CALC)}\n</tool_call>",  # a close tag without its open
        f"<tool_call>{call_json('calculator', CALC)}",  # no close tag
        '{"type": "function", "function": {"name": "calculator", "arguments": {"expression": "2+2"}}}',
        '<tool_call>\n{"name": "Calculator", "arguments": "{\\"expression\\": \\"2+2\\"}"}\n</tool_call>',  # string args
        "Action: calculator\nAction Input: 2+2",  # a ReAct step instead
    ],
)
def test_forms_small_models_write_are_read(reply):
    assert calls_of(reply) == [(StepKind.ACTION, "calculator", CALC)]


def test_a_truncated_call_keeps_what_was_written():
    assert calls_of('<tool_call>\n{"name": "calculator", "arguments": {"expression": "2+') == [
        (StepKind.ACTION, "calculator", {"expression": "2+"})
    ]


@pytest.mark.parametrize("reply", ["<tool_call>{broken", "<tool_call>\n</tool_call>", '[TOOL_CALLS][{"x": 1}]'])
def test_a_call_that_cannot_be_read_is_malformed_with_the_form_to_copy(reply):
    (reading,) = read_calls(reply, TOOLS, FORMATS["hermes"])
    assert reading.kind == StepKind.MALFORMED
    assert "<tool_call>\n" + call_json("calculator", {"expression": "..."}) in reading.error


def test_unknown_tool_and_bad_arguments_say_what_to_write():
    unknown, bad = read_calls(
        f"<tool_call>{call_json('weather', {'city': 'x'})}</tool_call>"
        f"<tool_call>{call_json('calculator', [1, 2])}</tool_call>",
        TOOLS,
        FORMATS["mistral"],
    )
    assert unknown.kind == StepKind.UNKNOWN_TOOL and unknown.action == "weather"
    assert "Valid tools: calculator, google_search" in unknown.error and "[TOOL_CALLS][" in unknown.error
    assert bad.kind == StepKind.BAD_INPUT and "not a list" in bad.error


def test_an_answer_is_the_text_and_final_answer_calls_give_their_value():
    assert read_calls("The answer is 4.", TOOLS)[0].answer == "The answer is 4."
    (final,) = read_calls(f"<tool_call>{call_json('final_answer', {'answer': 42})}</tool_call>", TOOLS)
    assert (final.kind, final.answer) == (StepKind.FINAL_ANSWER, "42")
    assert read_calls("", TOOLS)[0].kind == StepKind.EMPTY


def test_thinking_is_not_read_except_a_call_the_family_writes_there():
    think = f"<think>I could call <tool_call>{call_json('calculator', CALC)}</tool_call></think>"
    assert calls_of(think, "hermes") == [(StepKind.ACTION, "calculator", CALC)]  # Qwen3 does this
    assert calls_of(think, "mistral") == [(StepKind.MALFORMED, None, None)]  # reasoning only
    answered = think + "It is 4."
    assert [r.answer for r in read_calls(answered, TOOLS)] == ["It is 4."]
    outside = (
        f"<think>{call_json('google_search', SEARCH)}</think><tool_call>{call_json('calculator', CALC)}</tool_call>"
    )
    assert calls_of(outside) == [(StepKind.ACTION, "calculator", CALC)]


def test_calls_a_server_parsed_are_read_the_same_way():
    readings = read_calls(
        "Let me see.",
        TOOLS,
        FORMATS["hermes"],
        structured=[
            {"id": "c1", "name": "calculator", "arguments": '{"expression": "2+2"'},  # a brace lost on the way
            {"id": "c2", "name": "nope", "arguments": "{}"},
        ],
    )
    assert [(r.kind, r.arguments, r.call_id) for r in readings] == [
        (StepKind.ACTION, CALC, "c1"),
        (StepKind.UNKNOWN_TOOL, None, "c2"),
    ]
    assert readings[0].thought == "Let me see."


# --- which family a template is ----------------------------------------------------------------------


def test_templates_are_recognised_by_their_tool_call_text():
    from tool_templates import LLAMA31, MISTRAL_V3, QWEN25

    assert [detect_format(t) for t in (QWEN25, LLAMA31, MISTRAL_V3, "{{ messages }}")] == [
        "hermes",
        "llama3",
        "mistral",
        None,
    ]
    assert template_takes_tools(QWEN25) and not template_takes_tools("{{ messages }}")


# --- constrained: the call follows the schema ----------------------------------------------------------


@pytest.mark.parametrize("family", list(FORMATS))
def test_the_constrained_pattern_takes_text_then_calls_and_refuses_bad_arguments(family):
    import re

    require_outlines()
    fmt = FORMATS[family]
    first = pattern_of(next_step_format([Calculator()], [], calls=fmt))
    call = fmt.write_call("calculator", CALC)
    assert re.fullmatch(first, call) and re.fullmatch(first, "I will compute it.\n" + call)
    assert not re.fullmatch(first, "4")  # the first reply calls a tool
    assert not re.fullmatch(first, fmt.write_call("calculator", {"expression": 4}))
    later = pattern_of(next_step_format([Calculator()], [SimpleNamespace(kind=StepKind.ACTION)], calls=fmt))
    assert re.fullmatch(later, "The answer is 4.") and re.fullmatch(later, call)


# --- the one argument reader: what other projects' parser tests expect --------------------------------


@tool
def weather(query: str) -> str:
    """Look up the weather.

    Args:
        query: what to look up
    """
    return "sunny"


@tool
def move(city: str, days: int) -> str:
    """Plan a move."""
    return "ok"


@pytest.mark.parametrize(
    "text,t,expected",
    [
        ('QueryEngineTool({"query": "hello"})', weather, {"query": "hello"}),  # an object wrapped in a call
        ('With text here{"query": "hello"}', weather, {"query": "hello"}),  # ... or in prose
        ('Here: {"city": "Paris", "days": 3} ok', move, {"city": "Paris", "days": 3}),
        ("{temperature in SF}", weather, {"query": "temperature in SF"}),  # braces that are plain text
        ("[temperature in SF]", weather, {"query": "temperature in SF"}),
        ('"temperature in SF', weather, {"query": "temperature in SF"}),  # an unbalanced leading quote
        ("{city: Paris, days: 3}", move, {"city": "Paris", "days": 3}),  # keys and values without quotes
        ('{"city" "Paris", "days": 3}', move, {"city": "Paris", "days": 3}),  # a missing colon
        ('{"city": "Paris" "days": 3}', move, {"city": "Paris", "days": 3}),  # a missing comma
        ('{"city": "Paris", "days": 3', move, {"city": "Paris", "days": 3}),  # a lost closing brace (vLLM)
        ('{"query": "line one\nline two\n"}', weather, {"query": "line one\nline two\n"}),  # raw newlines kept
        ('{"query": "SF weather"}\n', weather, {"query": "SF weather"}),
    ],
)
def test_arguments_as_models_and_servers_break_them(text, t, expected):
    assert read_arguments(text, t) == expected


@pytest.mark.parametrize("text", ['{"city": ', '{"city": }', "not json", "[1, 2]"])
def test_arguments_that_cannot_be_mended_are_errors(text):
    with pytest.raises(ActionInputError):
        read_arguments(text, move)


def test_react_reads_the_same_repairs_and_one_line_tool_input():
    reading = read_step("Tool: weather Tool Input: temperature in SF", [weather])
    assert (reading.kind, reading.arguments) == (StepKind.ACTION, {"query": "temperature in SF"})
    final = read_step('```json\n{"action": "final_answer", "action_input": {"answer": "sunny"}}\n```', [weather])
    assert (final.kind, final.answer) == (StepKind.FINAL_ANSWER, "sunny")
    unquoted = read_step("Action: move\nAction Input: {city: Paris, days: 3}", [move])
    assert unquoted.arguments == {"city": "Paris", "days": 3}


# --- reading time: linear in the reply ------------------------------------------------------------

LOOKUP_CALL = '{"name": "calculator", "arguments": {"expression": "2+2"'
UNFINISHED = {  # replies of many lines that open an object: each used to be read to the reply's end
    "a call repeated, never finished": (LOOKUP_CALL + "\n") * 2000,
    "lines that open a string": "Thought: hm\n" + '{"a\n' * 2000,
    "lines that open an object": 'Let me think.\n' + '{"step": "more",\n' * 2000,
    "a list of unfinished objects": "[\n" + '  {"name": "calculator", "arguments": {\n' * 2000,
    "fenced and unfinished": "```json\n" + (LOOKUP_CALL + "\n") * 2000,
    "quotes that pair across lines": ("{'\n" + "{ ' '\n" * 10) * 200,
}


@pytest.mark.parametrize("name", list(UNFINISHED))
def test_a_reply_is_read_in_time_linear_in_its_length(name, monkeypatch):
    """The characters examined (scans for the object's end and its depth, what json-repair is fed, the exact
    parser's input) are a small multiple of the reply's length, where reading every line to the reply's end
    examined about (lines x length / 2): here some 90 million characters."""
    from tinyagent.format import arguments, extents, tool_reading

    examined = [0]

    def counted(fn, size):
        def wrapper(*args, **kwargs):
            examined[0] += size(*args)
            return fn(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(arguments, "text_depth", counted(arguments.text_depth, len))
    monkeypatch.setattr(arguments, "_repaired", counted(arguments._repaired, len))
    monkeypatch.setattr(arguments.json, "loads", counted(json.loads, lambda text, **_: len(text)))
    monkeypatch.setattr(arguments, "balanced_object", counted(arguments.balanced_object, lambda t, at: len(t) - at))
    monkeypatch.setattr(tool_reading, "balanced_object", arguments.balanced_object)
    made = []

    class Counted(extents.ObjectExtents):
        def __init__(self, *args):
            super().__init__(*args)
            made.append(self)

    monkeypatch.setattr(tool_reading, "ObjectExtents", Counted)
    reply = UNFINISHED[name]
    readings = read_calls(reply, TOOLS)
    examined[0] += sum(e.steps for e in made)
    assert examined[0] <= 8 * len(reply), f"{examined[0]:,} characters examined for a reply of {len(reply):,}"
    assert readings and readings[0].text == reply.rstrip()


@pytest.mark.parametrize("family", list(FORMATS))
def test_a_long_run_of_spaces_in_a_tagged_call_is_read_once(family):
    """A tag's body pattern ends with no `\\s*` after its lazy group: with one, a run of spaces inside the body was
    read once per character of it (10,000 spaces took 3.5 s, 40,000 took 57 s); now it is read once."""
    from tinyagent.format.tool_reading import _TAGS

    pattern = _TAGS[family].pattern
    assert ".*?)\\s*" not in pattern
    opener = {
        "hermes": "<tool_call>",
        "internlm2": "<|action_start|>",
        "mistral": "[TOOL_CALLS]",
        "llama3": "<|python_tag|>",
    }[family]
    reply = f'{opener}{call_json("calculator", CALC)}' + " " * 20_000 + "."
    assert calls_of(reply, family) == [(StepKind.ACTION, "calculator", CALC)]


def test_a_call_repeated_unfinished_is_still_read_as_that_call():
    assert calls_of(UNFINISHED["a call repeated, never finished"]) == [(StepKind.ACTION, "calculator", CALC)]


def test_object_extents_are_what_scanning_each_start_finds():
    """ObjectExtents (one backward pass with jumps) agrees with balanced_object from every start."""
    from tinyagent.format.arguments import balanced_object
    from tinyagent.format.extents import ObjectExtents

    texts = [
        '{"a": {"b": 1}}\n{"c": "}"}\n{',
        "{'\n{ ' '\n{}\n{\"x\": \"{\"}",
        '{"a": "\\"{"}\n{{}\n}',
        "{\n{\n}\n}\n{",
        '{"q": [1, {"r": 2}], "s": "x}y"}\n{"t": "\\\\"}\n',
    ]
    for text in texts:
        starts = [i for i, ch in enumerate(text) if ch == "{"]
        extents = ObjectExtents(text, starts)
        for at in starts:
            found = balanced_object(text, at)
            assert extents.end(at) == (at + len(found) if found else None), (text, at)


# --- Python-call arguments that are not JSON ------------------------------------------------------


@pytest.mark.parametrize(
    "arguments, problem",
    [
        ("expression=b'2+2'", "a Python bytes"),
        ("expression={1, 2}", "a Python set"),
        ("expression=" + "-" * 3000 + "1", "nest too deeply"),
        ("expression={1: 'x'}", "keys that are not text"),
        ("expression=1j", "a Python complex"),
    ],
)
def test_python_call_values_json_has_no_form_for_are_a_format_error(arguments, problem):
    (reading,) = read_calls(f"<|python_tag|>calculator.call({arguments})", TOOLS, FORMATS["llama3"])
    assert reading.kind == StepKind.BAD_INPUT and reading.arguments is None
    assert problem in reading.error and reading.error.startswith("bad arguments for calculator:")
    json.dumps(reading.action_input)  # nothing in the reading is something JSON cannot hold


@settings(max_examples=400)
@given(st.text(alphabet='{}"\'\\\n a[]', max_size=60))
def test_object_extents_agree_with_balanced_object_on_any_text(text):
    from tinyagent.format.arguments import balanced_object
    from tinyagent.format.extents import ObjectExtents

    starts = [i for i, ch in enumerate(text) if ch == "{"]
    extents = ObjectExtents(text, starts)
    for at in starts:
        found = balanced_object(text, at)
        assert extents.end(at) == (at + len(found) if found else None)
