"""HFChatModel on a tiny random Llama the tests build: prompts, stops, streaming, usage, KV-cache reuse."""

from __future__ import annotations

import inspect
import os
import re
import threading
from itertools import pairwise

import pytest
import torch
from serial_calls import calls_at_once

from tinyagent.engine.loading import placement
from tinyagent.engine.prefix_cache import common_prefix_length
from tinyagent.models.hf import HFChatModel
from tinyagent.text import StopHoldback, partial_stop_length

os.environ.setdefault("HF_HUB_OFFLINE", "1")

STOP = ["Observation:"]
QUESTION = [{"role": "system", "content": "Answer with tools."}, {"role": "user", "content": "What is 12 times 6?"}]


@pytest.fixture(scope="module")
def model(tiny_llama_dir):
    """float32: reuse is checked score for score against a full prefill."""
    return HFChatModel(tiny_llama_dir, dtype="float32")


@pytest.fixture(scope="module")
def no_reuse(model):
    """The same weights without KV-cache reuse: every call is a full prefill."""
    return HFChatModel.from_model(model.model, model.tokenizer, reuse_cache=False)


class Recorder:
    """A logits processor that records what the model saw and scored at each step."""

    def __init__(self):
        self.inputs, self.scores = [], []

    def __call__(self, input_ids, scores):
        self.inputs.append(input_ids[0].tolist())
        self.scores.append(scores[0].clone())
        return scores


class Ban:
    """A logits processor that forbids some tokens (here: the end tokens), or forces one at a step."""

    def __init__(self, banned=(), force: tuple[int, int] | None = None):
        self.banned, self.force, self.step = list(banned), force, 0

    def __call__(self, input_ids, scores):
        scores[:, self.banned] = -float("inf")
        if self.force and self.step == self.force[0]:
            scores[:] = -float("inf")
            scores[:, self.force[1]] = 0.0
        self.step += 1
        return scores


def pick_stop(text: str, last: bool = False) -> str:
    """An alphanumeric run from the middle or end of random-model `text`, to use as a stop string."""
    words = [m.group() for m in re.finditer(r"[A-Za-z0-9]{2,}", text) if text.find(m.group()) > 3]
    return words[-1] if last else words[len(words) // 2]


def scratch(content: str) -> list[dict]:
    return [*QUESTION, {"role": "assistant", "content": content}]


# --- loading, prompts, counts ------------------------------------------------------------


def test_loads_on_cpu_in_the_auto_dtype_and_describes_itself(model, tiny_llama_dir):
    assert next(HFChatModel(tiny_llama_dir).model.parameters()).dtype == placement("cpu", "auto")[1]
    assert model.context_window == 2048
    assert set(model.control_tokens) == {"<|im_start|>", "<|im_end|>", "<|endoftext|>"}
    assert model.tokenizer.convert_tokens_to_ids("<|im_end|>") in model.end_token_ids


def test_placement_rules(monkeypatch):
    from tinyagent.engine import loading as hf

    monkeypatch.setattr(hf, "cpu_has_native_bf16", lambda: False)
    assert placement("cpu", "auto") == (None, torch.float32)
    monkeypatch.setattr(hf, "cpu_has_native_bf16", lambda: True)
    assert placement("cpu", "auto") == (None, torch.bfloat16)
    assert placement("cpu", "bfloat16") == (None, torch.bfloat16)
    assert placement("cpu", torch.float16) == (None, torch.float16)
    with pytest.raises(ValueError, match="unknown dtype"):
        placement("cpu", "float99")


def test_forced_dtype(tiny_llama_dir):
    m = HFChatModel(tiny_llama_dir, device="cpu", dtype="bfloat16")
    assert next(m.model.parameters()).dtype == torch.bfloat16
    out = m.generate(QUESTION, max_new_tokens=2)
    assert out.prompt_tokens == len(m.encode_prompt(m.render_prompt(QUESTION))) and out.completion_tokens == 2


def test_prompt_opens_an_assistant_turn(model):
    text = model.render_prompt(QUESTION)
    assert text.endswith("<|im_start|>user\nWhat is 12 times 6?<|im_end|>\n<|im_start|>assistant\n")
    assert model.count_tokens(QUESTION) == len(model.encode_prompt(text))


def test_trailing_assistant_message_is_continued_not_closed(model):
    text = model.render_prompt(scratch("Thought: I need"))
    assert text.endswith("<|im_start|>assistant\nThought: I need")


def test_template_that_alters_the_continued_message_falls_back(tiny_llama_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_llama_dir)
    tok.chat_template = tok.chat_template.replace("message['content']", "message['content'] | trim")
    m = HFChatModel.from_model(HFChatModel(tiny_llama_dir).model, tok)
    text = m.render_prompt(scratch("Thought: x\nObservation: 1\n"))
    assert text.endswith("<|im_start|>assistant\nThought: x\nObservation: 1\n")
    assert text.count("<|im_start|>assistant") == 1


def test_tokenizer_without_chat_template_is_refused(model, tiny_llama_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_llama_dir)
    tok.chat_template = None
    with pytest.raises(ValueError, match="no chat template"):
        HFChatModel.from_model(model.model, tok)


# --- generation --------------------------------------------------------------------------


def test_continuation_returns_only_new_text_and_counts(model):
    messages = scratch("Thought: I")
    ids = model.encode_prompt(model.render_prompt(messages))
    expected = model.model.generate(
        torch.tensor([ids]),
        attention_mask=torch.ones(1, len(ids), dtype=torch.long),
        max_new_tokens=8,
        do_sample=False,
        eos_token_id=model.end_token_ids,
        pad_token_id=0,
    )[0, len(ids) :].tolist()
    out = model.generate(messages, max_new_tokens=8)
    assert out.text == model.tokenizer.decode(expected, skip_special_tokens=True)
    assert (out.prompt_tokens, out.completion_tokens) == (len(ids), len(expected))
    assert 0 <= out.cached_tokens < out.prompt_tokens  # at least the last prompt token is computed afresh


def test_stops_at_a_stop_string_and_trims_it(no_reuse):
    ban = no_reuse.end_token_ids
    free = no_reuse.generate(QUESTION, max_new_tokens=30, logits_processor=[Ban(ban)])
    assert free.completion_tokens == 30
    stop = pick_stop(free.text)
    out = no_reuse.generate(QUESTION, stop=["never appears", stop], max_new_tokens=30, logits_processor=[Ban(ban)])
    assert out.text == free.text[: free.text.find(stop)]
    assert out.completion_tokens < 30


def test_stops_at_end_of_turn_token(no_reuse):
    im_end = no_reuse.tokenizer.convert_tokens_to_ids("<|im_end|>")
    out = no_reuse.generate(QUESTION, max_new_tokens=20, logits_processor=[Ban(force=(3, im_end))])
    assert out.completion_tokens == 4
    assert "<|im_end|>" not in out.text


def test_generation_defaults_and_per_call_overrides(model):
    m = HFChatModel.from_model(model.model, model.tokenizer, max_new_tokens=5)
    ban = [Ban(m.end_token_ids)]
    assert m.generate(QUESTION, logits_processor=ban).completion_tokens == 5
    assert m.generate(QUESTION, max_new_tokens=3, logits_processor=[Ban(m.end_token_ids)]).completion_tokens == 3
    assert not m._generation_config().do_sample
    sampled = m._generation_config(m._options(temperature=0.7, top_p=0.9))
    assert (sampled.do_sample, sampled.temperature, sampled.top_p) == (True, 0.7, 0.9)


def test_sampling_is_used_when_temperature_is_positive(no_reuse):
    ban = no_reuse.end_token_ids
    greedy = no_reuse.generate(QUESTION, max_new_tokens=20, logits_processor=[Ban(ban)])
    torch.manual_seed(0)
    samples = {
        str(no_reuse.generate(QUESTION, max_new_tokens=20, temperature=5.0, logits_processor=[Ban(ban)]))
        for _ in range(3)
    }
    assert samples != {greedy} and len(samples) > 1


def test_unknown_option_is_rejected_with_the_valid_ones(model):
    with pytest.raises(
        TypeError,
        match=r"HFChatModel.generate\(\) got unknown keyword argument\(s\) 'seed'; "
        r"valid: constraint, max_line_tokens, max_new_tokens, no_repeat_ngram_size, on_text, "
        r"repetition_penalty, temperature, tools, top_p$",
    ):
        model.generate(QUESTION, max_new_tokens=2, seed=3)


# --- streaming ---------------------------------------------------------------------------


def test_partial_stop_length():
    assert partial_stop_length("Thought: x\nObser", STOP) == 5
    assert partial_stop_length("Thought: x\nO", STOP) == 1
    assert partial_stop_length("Thought: x", STOP) == 0
    assert partial_stop_length("ab", ["abc", "bcd"]) == 2


def test_holdback_never_sends_a_stop_string_prefix():
    sent = []
    h = StopHoldback(sent.append, STOP)
    for text in [
        "Thought",
        "Thought: 7\nObs",
        "Thought: 7\nObserv",
        "Thought: 7\nObservation: 9",
        "Thought: 7\nObservation: 9!",
    ]:
        h.update(text)
    assert sent == ["Thought", ": 7\n"]
    h.finish("Thought: 7\n")
    assert "".join(sent) == "Thought: 7\n"


def test_holdback_releases_a_false_alarm():
    sent = []
    h = StopHoldback(sent.append, STOP)
    h.update("a Obser")
    h.update("a Observe the")
    h.finish("a Observe the end")
    assert sent == ["a ", "Observe the", " end"]


def test_streamed_chunks_concatenate_to_the_returned_text(no_reuse):
    ban = no_reuse.end_token_ids
    free = no_reuse.generate(QUESTION, max_new_tokens=30, logits_processor=[Ban(ban)])
    stop = pick_stop(free.text, last=True)
    chunks: list[str] = []
    out = no_reuse.generate(
        QUESTION, stop=[stop], max_new_tokens=30, on_text=chunks.append, logits_processor=[Ban(ban)]
    )
    assert len(chunks) > 1
    assert "".join(chunks) == out.text == free.text[: free.text.find(stop)]
    assert list(no_reuse.stream(QUESTION, stop=[stop], max_new_tokens=30, logits_processor=[Ban(ban)])) == chunks


def test_stream_raises_the_generation_error(no_reuse):
    def boom(input_ids, scores):
        raise RuntimeError("processor failed")

    with pytest.raises(RuntimeError, match="processor failed"):
        list(no_reuse.stream(QUESTION, max_new_tokens=3, logits_processor=[boom]))


# --- KV-cache reuse ----------------------------------------------------------------------


def run_steps(m: HFChatModel, steps: int = 4):
    """A multi-step scratchpad like the agent's: reply, observation appended, continue."""
    pad, outs, records = "", [], []
    for i in range(steps):
        rec = Recorder()
        messages = scratch(pad) if pad else QUESTION
        out = m.generate(messages, stop=STOP, max_new_tokens=12, logits_processor=[rec])
        outs.append(out)
        records.append(rec)
        pad += f"{out}\nObservation: {i * 7}\n"
    return outs, records


def test_cache_reuse_is_token_for_token_identical(model, no_reuse):
    model.reset_cache()
    with_cache, rec_a = run_steps(model)
    without, rec_b = run_steps(no_reuse)
    assert [str(o) for o in with_cache] == [str(o) for o in without]
    for a, b in zip(rec_a, rec_b):
        assert a.inputs == b.inputs
        for sa, sb in zip(a.scores, b.scores):
            assert torch.allclose(sa, sb, atol=1e-4)
    assert [o.completion_tokens for o in with_cache] == [o.completion_tokens for o in without]
    assert all(o.cached_tokens == 0 for o in without)
    assert with_cache[0].cached_tokens == 0
    assert all(0 < o.cached_tokens < o.prompt_tokens for o in with_cache[1:])
    # each later step re-reads at most the text added since the last one (plus a boundary token)
    for prev, cur in pairwise(with_cache):
        assert cur.cached_tokens >= prev.prompt_tokens


def test_new_run_reuses_only_the_verified_shared_prefix(model, no_reuse):
    run_steps(model, 2)
    other = [QUESTION[0], {"role": "user", "content": "Who wrote Hamlet?"}]
    shared = common_prefix_length(
        model.encode_prompt(model.render_prompt(other)), model.encode_prompt(model.render_prompt(QUESTION))
    )
    out = model.generate(other, stop=STOP, max_new_tokens=10)
    assert out.cached_tokens == shared > 0
    assert out.text == no_reuse.generate(other, stop=STOP, max_new_tokens=10).text
    again = model.generate(other, stop=STOP, max_new_tokens=10)
    assert again.text == out.text and again.cached_tokens == again.prompt_tokens - 1


def test_cache_is_dropped_after_a_failed_call(model, no_reuse):
    model = HFChatModel.from_model(
        model.model, model.tokenizer, max_batch=1
    )  # one kept cache (batching: test_batching)
    run_steps(model, 2)

    def boom(input_ids, scores):
        raise RuntimeError("stop here")

    with pytest.raises(RuntimeError):
        model.generate(scratch("Thought: a"), max_new_tokens=5, logits_processor=[boom])
    out = model.generate(scratch("Thought: a"), max_new_tokens=5)
    assert out.cached_tokens == 0
    assert out.text == no_reuse.generate(scratch("Thought: a"), max_new_tokens=5).text


def test_concurrent_calls_are_serialised(model, no_reuse, monkeypatch):
    """Without batching (max_batch=1), two threads share one model (and its KV cache); the second may
    not start until the first is done.

    The first call, once inside generation, waits for a second call to join it there. With the lock
    none can (the wait ends after its timeout); without it one always does, so the check is not luck.
    """
    model = HFChatModel.from_model(model.model, model.tokenizer, max_batch=1)
    prompts = [scratch(f"Thought: step {i}") for i in range(2)]
    expected = [str(no_reuse.generate(p, max_new_tokens=6)) for p in prompts]
    most_inside, results = calls_at_once(model, prompts, monkeypatch, max_new_tokens=6)
    assert most_inside == 1
    assert results == expected


def test_abandoned_stream_stops_generating_and_frees_the_model(no_reuse):
    calls = Recorder()
    stream = no_reuse.stream(QUESTION, max_new_tokens=200, logits_processor=[Ban(no_reuse.end_token_ids), calls])
    first = next(stream)
    stream.close()  # what a consumer's `break` does
    assert first and not no_reuse._lock.locked()
    assert no_reuse.generate(QUESTION, max_new_tokens=3).text == no_reuse.generate(QUESTION, max_new_tokens=3).text
    assert len(calls.inputs) <= 6  # the worker may have been a token or two ahead, never 200


class Halt(BaseException):
    """Not an Exception: the kind of error a worker thread used to swallow."""


def test_stream_raises_any_worker_exception_even_a_base_exception(no_reuse):
    def halt(input_ids, scores):
        raise Halt("halted")

    caught: list[BaseException] = []

    def consume() -> None:
        try:
            list(no_reuse.stream(QUESTION, max_new_tokens=3, logits_processor=[halt]))
        except Halt as e:
            caught.append(e)

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    consumer.join(timeout=60)  # a lost exception would leave the consumer waiting forever
    assert not consumer.is_alive() and [str(e) for e in caught] == ["halted"]


# --- sliding-window attention (Mistral): reuse past the window, and no poisoned cache ------------


@pytest.fixture(scope="module")
def mistral(tmp_path_factory):
    from tiny_models import build_tiny_model

    return HFChatModel(str(build_tiny_model("mistral", tmp_path_factory.mktemp("mistral"))), dtype="float32")


def test_sliding_window_model_reuses_its_cache_past_the_window(mistral):
    """transformers' sliding layers refuse `crop` once the window is full: the second call used to raise."""
    fresh = HFChatModel.from_model(mistral.model, mistral.tokenizer, reuse_cache=False)
    mistral.reset_cache()
    with_cache, rec_a = run_steps(mistral)
    without, rec_b = run_steps(fresh)
    assert [str(o) for o in with_cache] == [str(o) for o in without]
    for a, b in zip(rec_a, rec_b):
        for sa, sb in zip(a.scores, b.scores):
            assert torch.allclose(sa, sb, atol=1e-4)
    window = mistral.model.config.sliding_window
    assert with_cache[0].prompt_tokens > window and all(o.cached_tokens > window for o in with_cache[1:])


def test_a_failure_while_preparing_the_cache_does_not_poison_later_calls(mistral, monkeypatch):
    from transformers import DynamicCache

    mistral.reset_cache()
    run_steps(mistral, 2)

    def broken_crop(self, tokens_to_remove):  # as a cache whose first layer crops and second refuses
        self.layers[0].crop(tokens_to_remove)
        raise RuntimeError("crop failed")

    with monkeypatch.context() as patch:
        patch.setattr(DynamicCache, "crop", broken_crop)
        with pytest.raises(RuntimeError, match="crop failed"):
            mistral.generate(scratch("Thought: a"), max_new_tokens=5)
    out = mistral.generate(scratch("Thought: a"), max_new_tokens=5)
    assert out.cached_tokens == 0
    assert (
        out.text
        == HFChatModel.from_model(mistral.model, mistral.tokenizer, reuse_cache=False)
        .generate(scratch("Thought: a"), max_new_tokens=5)
        .text
    )


# --- repetition within the reply -----------------------------------------------------------------


def test_generation_options_name_what_generate_honours(model):
    assert HFChatModel.generation_options == {
        "max_new_tokens",
        "temperature",
        "top_p",
        "repetition_penalty",
        "no_repeat_ngram_size",
        "max_line_tokens",
    }
    for option in HFChatModel.generation_options:
        assert option in inspect.signature(HFChatModel.generate).parameters


def test_reply_repetition_penalises_only_the_replys_tokens():
    from tinyagent.engine.repetition import ReplyRepetition

    penalty = ReplyRepetition(penalty=2.0)
    scores = torch.tensor([[4.0, -4.0, 4.0, 4.0]])
    assert torch.equal(penalty(torch.tensor([[2, 3]]), scores), scores)  # the prompt: nothing generated yet
    out = penalty(torch.tensor([[2, 3, 0, 1]]), scores)  # the reply so far: tokens 0 and 1
    assert out.tolist() == [[2.0, -8.0, 4.0, 4.0]]


def test_no_repeat_ngram_bans_within_the_reply_but_never_the_last_way_out():
    from tinyagent.engine.repetition import ReplyRepetition

    ngram = ReplyRepetition(ngram=2)
    ngram(torch.tensor([[1, 2, 1, 2]]), torch.zeros(1, 4))  # prompt 1 2 1 2: repeats are not the reply's
    out = ngram(torch.tensor([[1, 2, 1, 2, 3, 1, 3]]), torch.zeros(1, 4))
    assert out.tolist() == [[0.0, float("-inf"), 0.0, 0.0]]  # "3 1" was written: 1 may not follow 3 again
    only = torch.tensor([[float("-inf"), 0.0, float("-inf"), float("-inf")]])  # the format allows just 1
    assert torch.equal(ngram(torch.tensor([[1, 2, 1, 2, 3, 1, 3]]), only), only)


def test_no_repeat_ngram_size_stops_a_looping_reply(no_reuse):
    def bigrams(**options) -> list:
        rec = Recorder()
        no_reuse.generate(QUESTION, max_new_tokens=60, logits_processor=[Ban(no_reuse.end_token_ids), rec], **options)
        new = rec.inputs[-1][len(rec.inputs[0]) :]  # every generated token but the last
        return list(zip(new, new[1:]))

    looping = bigrams()
    assert len(set(looping)) < len(looping)  # random weights loop
    free = bigrams(no_repeat_ngram_size=2)
    assert len(free) == 58 and len(set(free)) == len(free)


# --- stop strings read on text: a line start, never inside <think> (issue: the ReAct protocol) ---


def forced_reply(model, messages, text: str, stop: list[str], **kwargs):
    """`model.generate` with the tiny random model made to write `text` token by token."""
    from replay import ForceTokens, reply_ids

    prompt = model.render_prompt(messages)
    ids = reply_ids(model, prompt, model.encode_prompt(prompt), text)
    return model.generate(
        messages,
        stop=stop,
        max_new_tokens=len(ids) + 5,
        logits_processor=[ForceTokens(ids, model.end_token_ids)],
        **kwargs,
    )


THINKING = (
    "<think>The user asks for 2+2.\nObservation: I could use the calculator.\n</think>\n"
    'Thought: use it\nAction: calculator\nAction Input: {"expression": "2+2"}\nObservation: 4\nmore'
)


@pytest.mark.parametrize("streamed", [False, True])
def test_stop_strings_do_not_fire_inside_a_think_block(no_reuse, streamed):
    from tinyagent.format.prompts import STOP_WORDS

    chunks: list[str] = []
    reply = forced_reply(no_reuse, QUESTION, THINKING, list(STOP_WORDS), on_text=chunks.append if streamed else None)
    assert str(reply) == THINKING[: THINKING.index("\nObservation: 4")]
    assert reply.completion_tokens < len(no_reuse.tokenizer(THINKING)["input_ids"])  # it stopped, not cut after
    if streamed:
        assert "".join(chunks) == str(reply)


def test_a_stop_string_mid_line_does_not_end_the_reply_but_one_at_its_start_does(no_reuse):
    from tinyagent.format.prompts import STOP_WORDS

    text = "Thought: done\nFinal Answer: My Observation: it is 5"
    assert str(forced_reply(no_reuse, QUESTION, text, list(STOP_WORDS))) == text
    assert str(forced_reply(no_reuse, QUESTION, "Observation: invented\nThought: x", list(STOP_WORDS))) == ""


# --- the reply's text, decoded a window at a time (issue 22) -----------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tinyagent.engine.streaming import ReplyText  # noqa: E402

REPLY_PIECES = [
    "Thought:",
    " 周杰伦",
    " was born in",
    " 1979",
    ".\n",
    "Action Input: ",
    '{"q": "é"}',
    "😀",
    "  ",
    "<|im_end|>",
]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(REPLY_PIECES), min_size=1, max_size=12), st.integers(0, 3))
def test_reply_text_grows_token_by_token_into_the_whole_decode(model, pieces, context):
    """At every length the incremental text is the full decode less any unfinished character at its end,
    and at the end it is the full decode, as `decode_new` gives it."""
    prompt = model.encode_prompt(model.render_prompt(QUESTION))[: len(QUESTION) + context + 10]
    new = model.encode_text("".join(pieces))
    reply = model._reply_text(prompt)
    for n in range(1, len(new) + 1):
        text = reply(new[:n])
        whole = model.decode_new(prompt, new[:n])
        rest = whole[len(text) :]
        assert whole.startswith(text) and "\ufffd" not in text
        assert rest == "" or rest.endswith("\ufffd")  # all but a character still being written
    assert reply(new) == model.decode_new(prompt, new)


def test_reply_text_decodes_a_short_window_per_token(model):
    calls: list[int] = []

    def decode(ids):
        calls.append(len(ids))
        return model.tokenizer.decode(ids, skip_special_tokens=True)

    reply = ReplyText(decode, [])
    new = model.encode_text("word " * 200)
    assert reply(new) == model.tokenizer.decode(new, skip_special_tokens=True)
    assert max(calls) <= 4 and len(calls) == 2 * len(new)  # never the whole reply
