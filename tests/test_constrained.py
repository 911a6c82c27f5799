"""Constrained ReAct decoding: the step pattern, the outlines-compiled automaton with its budgets, and
replies of a tiny random Llama, a tiny InternLM2 (sentencepiece) and SmolLM2 that always parse."""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import threading

import pytest
import torch
from openai_stub import OpenAIStub

from tinyagent import Agent, ReAct, tool
from tinyagent.cli import commands as cli
from tinyagent.config import ConfigError, build_agent, build_model, load_config
from tinyagent.engine import constrained
from tinyagent.engine.automaton import compile_pattern
from tinyagent.eval.scoring import VALID_KINDS
from tinyagent.format.observations import format_observation
from tinyagent.format.prompts import STOP_WORDS, build_system_prompt
from tinyagent.format.step_format import (
    ANSWER_FORMAT,
    StepFormat,
    arguments_pattern,
    pattern_of,
    require_outlines,
    step_format,
)
from tinyagent.models.hf import HFChatModel
from tinyagent.models.openai import OpenAIChatModel
from tinyagent.text import detect_lang
from tinyagent.tools import Calculator
from tinyagent.tools.local_search import LocalSearch
from tinyagent.tutorial import parse_action_input, parse_final_answer, parse_latest_plugin_call

#: ReAct from the first reply: these tests drive the loop itself (the working first: test_working.py)
CLASSIC = ReAct(working_first=False, search="tool")

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@tool
def book_table(restaurant: str, people: int, outdoor: bool = False, note: str | None = None) -> str:
    """Book a table in a restaurant.

    Args:
        restaurant: the restaurant's name
        people: how many guests
        outdoor: a table outside
        note: anything the restaurant should know
    """
    return f"booked {restaurant} for {people}"


TOOLS = [Calculator(), LocalSearch(), book_table]
FMT = step_format(TOOLS)
QUESTIONS = [
    "What is 12 times 6?",
    "Which year was Jay Chou born?",
    "周杰伦哪年出生？",
    "Book a table for 4 at Luigi's, outside please.",
    "hi",
]


def conversation(question: str, scratchpad: str = "") -> list[dict]:
    messages = [
        {"role": "system", "content": build_system_prompt(TOOLS, detect_lang(question))},
        {"role": "user", "content": question},
    ]
    return messages + ([{"role": "assistant", "content": scratchpad}] if scratchpad else [])


def assert_valid_step(reply: str, fmt: StepFormat = FMT) -> None:
    """The reply is one whole step of `fmt`, and the agent's parser reads a valid call or an answer."""
    assert re.fullmatch(pattern_of(fmt), reply), reply
    name, args, _ = parse_latest_plugin_call(reply)
    if name:
        tool_ = {t.name_for_model: t for t in TOOLS}[name]
        arguments = parse_action_input(args)
        assert tool_.validate(arguments) is not None and set(arguments) <= {p["name"] for p in tool_.parameters}
    else:
        assert fmt.final_answer and parse_final_answer(reply)


class Spy:
    """A logits processor that records the ids of the sequence at each step."""

    def __init__(self):
        self.seen: list[list[int]] = []

    def __call__(self, input_ids, scores):
        self.seen.append(input_ids[0].tolist())
        return scores


# --- the pattern ---------------------------------------------------------------------------------


def test_the_pattern_accepts_valid_steps_and_rejects_the_rest():
    pattern = pattern_of(FMT)
    good = [
        'Thought: I should compute it.\nAction: calculator\nAction Input: {"expression": "12*6"}',
        'Thought: 搜索一下\nAction: local_search\nAction Input: { "search_query": "周杰伦" }',
        (
            'Thought: book it\nAction: book_table\nAction Input: {"restaurant": "Luigi\'s", "people": 4, '
            '"outdoor": true}'
        ),
        'Thought: book it\nAction: book_table\nAction Input: {"restaurant": "x", "people": 2, "note": "a \\"b\\""}',
        "Thought: I know it.\nFinal Answer: 72",
    ]
    bad = [
        'Thought: x\nAction: calculator\nAction Input: {"expr": "1"}',  # invented key
        'Thought: x\nAction: calculator\nAction Input: {}',  # required key missing
        'Thought: x\nAction: book_table\nAction Input: {"restaurant": "x", "people": "4"}',  # wrong type
        'Thought: x\nAction: book_table\nAction Input: {"restaurant": "x", "people": 1.5}',
        'Thought: x\nAction: python\nAction Input: {"code": "1"}',  # no such tool
        'Thought: x\nAction: calculator\nAction Input: {"expression": "1"}\nObservation: 1',
        'Thought: x\nAction: calculator\nAction Input: {"expression": "1"}\nAction: calculator',
        "Thought: x\nFinal Answer: two\nlines",
        "Final Answer: 72",
        "Thought:  x\nFinal Answer: 1",
        "Thought: x\nFinal Answer: ",
    ]
    for reply in good:
        assert re.fullmatch(pattern, reply), reply
        assert_valid_step(reply)
    for reply in bad:
        assert not re.fullmatch(pattern, reply), reply


def test_a_first_step_must_call_a_tool_and_a_forced_answer_is_one_line():
    first = pattern_of(step_format(TOOLS, final_answer=False))
    assert not re.fullmatch(first, "Thought: x\nFinal Answer: 1")
    assert re.fullmatch(first, 'Thought: x\nAction: calculator\nAction Input: {"expression": "1"}')
    assert step_format([], final_answer=False).final_answer  # no tools: answering is the only way
    answer = pattern_of(ANSWER_FORMAT)
    assert re.fullmatch(answer, " 72 km/h") and re.fullmatch(answer, "72")
    assert not re.fullmatch(answer, " ") and not re.fullmatch(answer, " 72\nThought: more")


def test_tool_names_are_literals_and_bad_schemas_say_which():
    @tool(name="web.search+")
    def odd(q: str) -> str:
        """Search."""
        return q

    pattern = pattern_of(step_format([odd]))
    assert re.fullmatch(pattern, 'Thought: x\nAction: web.search+\nAction Input: {"q": "a"}')
    assert not re.fullmatch(pattern, 'Thought: x\nAction: webXsearchh\nAction Input: {"q": "a"}')
    with pytest.raises(ValueError, match="cannot constrain arguments with the schema .*Unsupported type"):
        arguments_pattern('{"type": "object", "properties": {"a": {"type": "money"}}}')


def test_missing_outlines_is_a_one_line_install_hint(monkeypatch, tiny, tiny_llama_dir):
    monkeypatch.setitem(sys.modules, "outlines_core", None)
    with pytest.raises(ImportError) as e:
        require_outlines()
    assert str(e.value) == "constrained decoding needs outlines: pip install 'tinyagent[constrained]'"
    fresh_pattern = StepFormat(tools=(("never_compiled", '{"type": "object"}'),))
    with pytest.raises(ImportError, match="pip install 'tinyagent"):
        tiny.generate(conversation("hi"), constraint=fresh_pattern)
    cfg = load_config(overrides={"model.backend": "hf", "model.path": str(tiny_llama_dir), "agent.constrained": True})
    with pytest.raises(ImportError, match="pip install 'tinyagent"):
        build_model(cfg)  # before the slow load, not at the first step


# --- a tiny random Llama: random weights are the hardest case --------------------------------------


@pytest.fixture(scope="module")
def tiny(tiny_llama_dir):
    return HFChatModel(str(tiny_llama_dir), device="cpu")


@pytest.mark.parametrize("spare_tokens", [0, 10, 400])
def test_random_weights_always_give_a_valid_step(tiny, spare_tokens):
    first = step_format(TOOLS, final_answer=False)
    _, compiled = compile_pattern(tiny.tokenizer, pattern_of(first))
    max_new_tokens = int(compiled.to_final[compiled.initial]) + spare_tokens  # the shortest call, and more
    scratchpad = (
        'Thought: I will compute it.\nAction: calculator\nAction Input: {"expression": "12*6"}\nObservation: 72\n'
    )
    for question in QUESTIONS:
        for fmt, pad in ((first, ""), (FMT, scratchpad)):
            reply = tiny.generate(
                conversation(question, pad), stop=STOP_WORDS, constraint=fmt, max_new_tokens=max_new_tokens
            )
            assert reply.completion_tokens <= max_new_tokens
            assert_valid_step(str(reply), fmt)


def test_sampling_streaming_and_cache_reuse_keep_working(tiny):
    pieces: list[str] = []
    first = tiny.generate(
        conversation(QUESTIONS[0]),
        stop=STOP_WORDS,
        constraint=FMT,
        temperature=1.0,
        top_p=0.9,
        max_new_tokens=120,
        on_text=pieces.append,
    )
    assert_valid_step(str(first))
    assert "".join(pieces) == str(first) and len(pieces) > 3
    pad = str(first) + format_observation("72")
    second = tiny.generate(conversation(QUESTIONS[0], pad), stop=STOP_WORDS, constraint=FMT, max_new_tokens=120)
    assert_valid_step(str(second))  # a fresh automaton state per call
    assert second.cached_tokens > first.prompt_tokens - 8  # the first call's prompt came from the cache


def test_each_line_ends_within_its_token_budget(tiny):
    """A line gets `max_line_tokens`, or the fewest it can take when its fixed text is longer."""
    fmt = StepFormat(tools=FMT.tools, max_line_tokens=10)
    vocab, compiled = compile_pattern(tiny.tokenizer, pattern_of(fmt))
    longest = 0
    for question in QUESTIONS:
        spy = Spy()
        reply = tiny.generate(conversation(question), constraint=fmt, max_new_tokens=300, logits_processor=[spy])
        assert_valid_step(str(reply), fmt)
        replay = constrained.StepProcessor(vocab, compiled, [], 300, 10, [])
        allowance, used = max(10, compiled.to_line_end[compiled.initial]), 0
        for token in spy.seen[-1][len(spy.seen[0]) :]:  # every generated token but the last
            replay.advance(token)
            used += 1
            assert used <= allowance, reply
            longest = max(longest, used)
            if "\n" in vocab.texts[token]:
                allowance, used = max(10, compiled.to_line_end[replay.state]), 0
    assert longest >= 10  # random weights ramble: the budget did the cutting


def test_no_token_may_complete_a_stop_string(tiny):
    calc = step_format([Calculator()])
    for question in QUESTIONS:
        reply = tiny.generate(conversation(question), stop=["q", "Observation:"], constraint=calc, max_new_tokens=200)
        assert "q" not in reply.text
        assert re.fullmatch(pattern_of(calc), str(reply))
    processor = constrained.step_processor(
        tiny.tokenizer, FMT, end_ids=[2], max_new_tokens=100, stop=["Observation:", "Observation："]
    )
    ids = [1]
    for token in tiny.tokenizer("Thought: Observation", add_special_tokens=False)["input_ids"]:
        processor(torch.tensor([ids]), torch.zeros(1, len(tiny.tokenizer)))
        ids.append(token)
    scores = processor(torch.tensor([ids]), torch.zeros(1, len(tiny.tokenizer)))
    allowed = {processor.vocab.texts[t] for t in torch.isfinite(scores[0]).nonzero().flatten().tolist()}
    assert "s" in allowed and ":" not in allowed and "：" not in allowed
    assert not any(t.startswith((":", "：")) for t in allowed)


def test_the_automaton_is_compiled_once_and_shared_by_models_and_threads(tiny):
    other = HFChatModel.from_model(tiny.model, tiny.tokenizer)
    pattern = pattern_of(FMT)
    _, compiled = compile_pattern(tiny.tokenizer, pattern)
    assert compile_pattern(other.tokenizer, pattern)[1] is compiled
    a = constrained.step_processor(tiny.tokenizer, FMT, end_ids=[2], max_new_tokens=50)
    b = constrained.step_processor(other.tokenizer, FMT, end_ids=[2], max_new_tokens=50)
    assert a.compiled is b.compiled is compiled
    for token in tiny.tokenizer("Thought: hi", add_special_tokens=False)["input_ids"]:
        a.advance(token)
    assert a.state != compiled.initial and b.state == compiled.initial  # per-call state is separate
    replies, errors = [], []

    def work(model):
        try:
            replies.append(str(model.generate(conversation("hi"), constraint=FMT, max_new_tokens=60)))
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(m,)) for m in (tiny, other, tiny, other)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(replies) == 4
    for reply in replies:
        assert_valid_step(reply)


def test_the_agent_asks_for_a_tool_first_an_answer_when_stuck_and_only_the_answer_after_the_cap(scripted):
    call = 'Thought: compute\nAction: calculator\nAction Input: {"expression": "6*7"}'
    model = scripted([call, call, "Thought: done\nFinal Answer: 42"])
    result = Agent(model, [Calculator()], max_turns=5, protocol=ReAct(working_first=False, constrained=True)).run(
        "What is 6*7?"
    )
    assert [s.kind for s in result.steps] == ["action", "repeated_call", "final_answer"] and result.answer == "42"
    first, second, stuck = (c["kwargs"]["constraint"] for c in model.calls)
    assert first == step_format([Calculator()], final_answer=False)
    assert second == step_format([Calculator()]) and stuck == step_format([])
    model = scripted([call, "Thought: 42"])
    Agent(model, [Calculator()], max_turns=1, protocol=ReAct(working_first=False, constrained=True)).run("What is 6*7?")
    assert model.calls[-1]["kwargs"]["constraint"] == ANSWER_FORMAT
    model = scripted(["Final Answer: 1"])
    Agent(model, [Calculator()], protocol=CLASSIC).run("q")
    assert "constraint" not in model.calls[0]["kwargs"]


def test_every_constrained_agent_step_of_random_weights_is_valid(tiny):
    for question in QUESTIONS:
        result = Agent(
            tiny,
            [Calculator(), book_table],
            max_turns=2,
            max_new_tokens=80,
            protocol=ReAct(working_first=False, constrained=True),
        ).run(question)
        assert all(s.kind in VALID_KINDS for s in result.steps), result.steps
        assert result.steps[0].action in ("calculator", "book_table") and result.steps[0].observation
        assert result.answer


# --- InternLM2: a sentencepiece vocabulary -----------------------------------------------------------


def test_internlm2_replies_are_valid_steps(tmp_path):
    from test_internlm2 import VARIANTS, write_internlm2

    from tinyagent.models.internlm2 import InternLM2Chat

    write_internlm2(tmp_path, **VARIANTS["mha-bias-tied-bin"], max_pos=512)
    model = InternLM2Chat(str(tmp_path))
    for question in QUESTIONS[:3]:
        for max_new_tokens in (16, 120):
            reply = model.generate(
                conversation(question), stop=STOP_WORDS, constraint=FMT, max_new_tokens=max_new_tokens
            )
            assert_valid_step(str(reply))


# --- the embedded SmolLM2 ------------------------------------------------------------------------------


@pytest.mark.slow
def test_smollm2_replies_are_valid_steps_and_it_calls_a_tool(embedded_model):
    calc = [Calculator(), LocalSearch()]
    for question in ("What is 12 times 6?", "周杰伦哪年出生？", "Which year was Jay Chou born?"):
        fmt = step_format(calc)
        messages = [{"role": "system", "content": build_system_prompt(calc)}, {"role": "user", "content": question}]
        reply = embedded_model.generate(messages, stop=STOP_WORDS, constraint=fmt, max_new_tokens=40)
        assert re.fullmatch(pattern_of(fmt), str(reply)), reply
    result = Agent(
        embedded_model,
        calc,
        max_turns=1,
        max_new_tokens=48,
        protocol=ReAct(working_first=False, constrained=True, search="tool"),
    ).run("What is 12 times 6?")
    assert [s.kind for s in result.steps] in (["action", "forced_answer"], ["tool_error", "forced_answer"])
    assert result.steps[0].arguments is not None and result.steps[0].observation and result.answer


# --- OpenAI-compatible servers: the same pattern, sent as a regex --------------------------------------

STEP_REPLY = 'Thought: compute it\nAction: calculator\nAction Input: {"expression": "12*6"}'


@pytest.mark.parametrize("field", ["structured_outputs", "guided_regex"])
def test_openai_sends_the_pattern_to_servers_with_guided_decoding(field):
    with OpenAIStub([STEP_REPLY, "Thought: done\nFinal Answer: 72"]) as stub:
        model = OpenAIChatModel(stub.base_url, "stub", guided_decoding=field)
        result = Agent(model, [Calculator()], protocol=ReAct(working_first=False, constrained=True)).run(
            "What is 12 times 6?"
        )
    assert result.answer == "72" and result.steps[0].observation == "72"
    first, second = (r["body"] for r in stub.requests)
    regex = first[field]["regex"] if field == "structured_outputs" else first[field]
    assert regex == pattern_of(step_format([Calculator()], final_answer=False))
    assert re.fullmatch(regex, STEP_REPLY) and not re.fullmatch(regex, "Final Answer: 72")
    assert "Final Answer" in json.dumps(second)


def test_openai_says_when_replies_are_not_constrained(caplog):
    caplog.set_level(logging.WARNING)
    with OpenAIStub([STEP_REPLY, "Thought: done\nFinal Answer: 72"]) as stub:
        model = OpenAIChatModel(stub.base_url, "stub")
        Agent(model, [Calculator()], protocol=ReAct(working_first=False, constrained=True)).run("What is 12 times 6?")
    assert not any(k in r["body"] for r in stub.requests for k in ("structured_outputs", "guided_regex"))
    assert caplog.text.count("replies are not constrained: set guided_decoding=") == 1
    with OpenAIStub(STEP_REPLY, reject_fields=["guided_regex"]) as stub:
        model = OpenAIChatModel(stub.base_url, "stub", guided_decoding="guided_regex", max_retries=0)
        with pytest.raises(Exception) as e:
            model.generate(conversation("hi"), constraint=FMT)
    assert "HTTP 422" in str(e.value) and "may not support regex-guided decoding through guided_regex" in str(e.value)
    with pytest.raises(ValueError, match="guided_decoding must be None or one of"):
        OpenAIChatModel("http://127.0.0.1:9", "m", guided_decoding="json")


# --- configuration ------------------------------------------------------------------------------------


def test_config_turns_constraints_on_for_the_embedded_model_only(tmp_path, embedded_model, scripted):
    """null follows the model: the embedded one prefers constrained decoding, any other does not; set, it wins."""
    assert embedded_model.prefers_constrained and not scripted([]).prefers_constrained
    assert load_config().agent.constrained is None
    built = {
        name: build_agent(load_config(overrides=overrides), model, tools=[Calculator()]).protocol.constrained
        for name, overrides, model in (
            ("embedded", {}, embedded_model),
            ("other", {}, scripted([])),
            ("asked", {"agent.constrained": True}, scripted([])),
            ("refused", {"agent.constrained": False}, embedded_model),
        )
    }
    assert built == {"embedded": True, "other": False, "asked": True, "refused": False}
    for flag, expected in (("--constrained", True), ("--no-constrained", False), (None, None)):
        args = cli.build_parser().parse_args(["ask", *([flag] if flag else []), "q"])
        assert cli.config_from_args(args).agent.constrained is expected
    path = tmp_path / "c.yaml"
    path.write_text("agent:\n  constrained: maybe\n")
    with pytest.raises(ConfigError, match="agent.constrained: must be true or false or null"):
        load_config(path)


def test_the_first_token_starts_the_thought_and_extra_logits_are_masked(tiny):
    processor = constrained.step_processor(tiny.tokenizer, FMT, end_ids=tiny.end_token_ids, max_new_tokens=20)
    scores = torch.zeros(1, len(tiny.tokenizer) + 7)  # models may have more logits than tokens
    out = processor(torch.tensor([[1, 2]]), scores)
    allowed = torch.isfinite(out[0]).nonzero().flatten().tolist()
    texts = processor.vocab.texts
    assert allowed and all("Thought: ".startswith(texts[t]) or texts[t].startswith("Thought: ") for t in allowed)
    assert max(allowed) < len(tiny.tokenizer)


def test_the_cached_mask_of_a_state_depends_on_the_end_ids(tiny):
    """Two calls with different end-of-turn ids share the automaton, not each other's masks."""
    end_a, end_b = tiny.tokenizer.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"])
    reply = tiny.tokenizer("Thought: x\nFinal Answer: 72", add_special_tokens=False)["input_ids"]
    allowed = []
    for end_ids in ([end_a], [end_b]):
        processor = constrained.step_processor(tiny.tokenizer, FMT, end_ids=end_ids, max_new_tokens=200)
        ids = [1]
        for token in reply:
            processor(torch.tensor([ids]), torch.zeros(1, len(tiny.tokenizer)))
            ids.append(token)
        scores = processor(torch.tensor([ids]), torch.zeros(1, len(tiny.tokenizer)))
        assert processor.compiled.final[processor.state]  # the reply may end here, so an end id is allowed
        allowed.append(set(torch.isfinite(scores[0]).nonzero().flatten().tolist()))
    assert end_a in allowed[0] and end_b not in allowed[0]
    assert end_b in allowed[1] and end_a not in allowed[1]


def test_repetition_options_and_a_shorter_line_budget_keep_replies_valid(tiny):
    fmt = step_format([Calculator()])
    for question in QUESTIONS[:3]:
        plain = tiny.generate(conversation(question), constraint=fmt, max_new_tokens=120)
        short = tiny.generate(
            conversation(question),
            constraint=fmt,
            max_new_tokens=120,
            max_line_tokens=6,
            repetition_penalty=1.3,
            no_repeat_ngram_size=3,
        )
        for reply in (plain, short):
            assert re.fullmatch(pattern_of(fmt), str(reply)), reply
        thought = str(short).split("\n")[0]
        assert len(tiny.tokenizer(thought, add_special_tokens=False)["input_ids"]) <= 8  # within 6, or ending
        assert short.completion_tokens < plain.completion_tokens
