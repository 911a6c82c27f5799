"""Property-based tests: the parsers and the calculator never fail on arbitrary text."""

from __future__ import annotations

import re
import time

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tinyagent.format.arguments import ActionInputError
from tinyagent.format.observations import neutralize_control_tokens
from tinyagent.format.reading import OBSERVATION, READING_KINDS, read_step
from tinyagent.text import StopHoldback, detect_lang, mask_thinking
from tinyagent.tools import Calculator
from tinyagent.tools.calculator import CalculatorError, evaluate
from tinyagent.tutorial import (
    parse_action_input,
    parse_final_answer,
    parse_forced_answer,
    parse_latest_plugin_call,
    parse_thought,
)

# Fragments real replies are made of, so generated text hits the interesting paths often.
FRAGMENTS = [
    "Thought:",
    "Action:",
    "Action Input:",
    "Observation:",
    "Final Answer:",
    "Action：",
    "Action Input：",
    "Observation：",
    "最终答案：",
    "\n",
    " ",
    "{",
    "}",
    "[",
    "]",
    '"',
    "'",
    ":",
    ",",
    "：",
    "，",
    "“",
    "”",
    "```json",
    "```",
    "calculator",
    "google_search",
    '{"expression": "1+1"}',
    "周杰伦",
    "\x00",
    "\x1b",
    "\u200b",
    "\r",
    "\\",
    "<|im_end|>",
    "</s>",
    "json5",
    "null",
    "1e999",
    "-",
    "NaN",
]
reply_text = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=20)), max_size=60).map("".join)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(reply_text)
@example("Action:\nAction Input:Thought:")  # once taken as a final answer (found by hypothesis on a fresh clone)
def test_parse_latest_plugin_call_contract(text):
    name, args, before = parse_latest_plugin_call(text)
    assert isinstance(name, str) and isinstance(args, str) and isinstance(before, str)
    assert "\n" not in name
    assert text.startswith(before)
    assert OBSERVATION.search(before) is None  # nothing from an invented observation on
    if name:
        assert args in text
    else:
        assert args == ""


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(reply_text)
def test_parse_action_input_contract(text):
    try:
        value = parse_action_input(text)
    except ActionInputError as e:
        assert str(e)
    else:
        assert isinstance(value, dict)


@settings(max_examples=200, deadline=None)
@given(reply_text)
def test_other_parsers_never_raise(text):
    parse_final_answer(text)
    parse_thought(text)
    parse_forced_answer(text)
    detect_lang(text)
    reading = read_step(text, [Calculator()])
    assert reading.kind in READING_KINDS and text.startswith(reading.text)
    if reading.kind in ("final_answer", "no_action"):
        assert reading.answer is not None and reading.error is None
    elif reading.kind != "action":
        assert reading.error and reading.answer is None
    out = neutralize_control_tokens(text)
    assert "<|im_end|>" not in out and out.replace("\u200b", "") == text.replace("\u200b", "")


arithmetic = st.lists(
    st.sampled_from(
        list("0123456789+-*/%().^ e") + ["**", "//", "9**9", "sqrt(", "pi", "×", "÷", "1e308", "max(", ","]
    ),
    max_size=40,
).map("".join)


@settings(max_examples=500, deadline=None)
@given(st.one_of(arithmetic, st.text(max_size=60)))
def test_calculator_only_raises_its_own_error_and_quickly(expression):
    start = time.perf_counter()
    try:
        value = evaluate(expression)
    except CalculatorError as e:
        assert str(e)
    else:
        assert isinstance(value, (int, float))
    assert time.perf_counter() - start < 2.0


def test_huge_inputs_are_bounded():
    huge = (
        "Thought: "
        + "x" * 200_000
        + "\nAction: calculator\nAction Input: {"
        + '"a": [' * 5000
        + "\nObservation: "
        + "y" * 100_000
    )
    start = time.perf_counter()
    name, args, before = parse_latest_plugin_call(huge)
    assert name == "calculator"
    try:
        parse_action_input(args)
    except ActionInputError:
        pass
    for expression in ("1+" * 50_000 + "1", "(" * 100_000, "9" * 100_000, "9**9**9", "10**10**10"):
        try:
            evaluate(expression)
        except CalculatorError:
            pass
    assert time.perf_counter() - start < 10.0


def masked_by_definition(text: str) -> str:
    """The reasoning blocks blanked, spelt out as three regex passes (quadratic, fine for short text)."""
    text = re.sub(r"<think>.*?</think>", lambda m: " " * len(m.group(0)), text, flags=re.DOTALL | re.IGNORECASE)
    close = max((m.end() for m in re.finditer(r"</think>", text, re.IGNORECASE)), default=0)
    text = " " * close + text[close:]
    first = re.search(r"<think>", text, re.IGNORECASE)
    return text if first is None else text[: first.start()] + " " * (len(text) - first.start())


@settings(max_examples=500, deadline=None)
@given(
    st.lists(
        st.sampled_from(["<think>", "</think>", "<THINK>", "</Think>", "<think", "a", " b", "\n", "Observation:"]),
        max_size=12,
    ).map("".join)
)
def test_mask_thinking_blanks_what_the_definition_says(text):
    assert mask_thinking(text) == masked_by_definition(text)


def test_a_reply_full_of_think_fragments_is_masked_in_one_pass():
    """200,000 unclosed `<think>` fragments (1.8 MB): a lazy `<think>.*?</think>` scans to the end from
    each one (about 10^11 steps); one pass over the tags does not. Streamed, it is masked at every update."""
    reply = "<think> a" * 200_000
    assert mask_thinking(reply) == " " * len(reply)
    sent = []
    holdback = StopHoldback(sent.append, ["\nObservation:"])
    text = ""
    for _ in range(2000):
        text += "<think> a"
        holdback.update(text)
    holdback.finish(text)
    assert "".join(sent) == text
