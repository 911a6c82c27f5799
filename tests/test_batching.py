"""Continuous batching (llm/batching.py): concurrent calls on one tiny model decode together and give
exactly what each gives alone; requests join mid-decode, leave on their own, fail on their own, and
stream their own text; each conversation keeps its cache.

In float32: a row's logits in a padded batch differ from its logits alone by ~2e-7 here (the
batched matrix products round differently), far below the gap between the best two tokens. In
bfloat16 they differ by up to one bfloat16 step, which can flip a near tie (see README).
"""

from __future__ import annotations

import os
import threading
import time

import pytest
import torch
from tiny_models import build_tiny_model

from tinyagent import Agent, ReAct
from tinyagent.engine import packed
from tinyagent.engine.prefix_cache import common_prefix_length
from tinyagent.format.prompts import STOP_WORDS, build_system_prompt
from tinyagent.models.hf import HFChatModel
from tinyagent.tools import Calculator

os.environ.setdefault("HF_HUB_OFFLINE", "1")

TOOLS = [Calculator()]
# A short system prompt: after the whole ReAct prompt the tiny random model says the same whatever the question.
SYSTEM = "Answer with tools."
QUESTIONS = [
    "What is 12 times 6?",
    "How old is the universe?",
    "计算 3 加 4",
    "Who wrote Hamlet, and when?",
    "What is 2 to the power of 10?",
    "Name a prime number above 100.",
]


@pytest.fixture(scope="module")
def alone(tiny_llama_dir):
    """The one-at-a-time model: every call behind a lock, one kept cache. In float32 (see the module docstring)."""
    return HFChatModel(tiny_llama_dir, max_batch=1, dtype="float32")


@pytest.fixture(params=["one_by_one", "masked"])
def batched(alone, request):
    """The same weights with batching on (a fresh batcher and kept caches per test), its decoding requests
    attending one by one (what a CPU does) or in one masked call over their slots (what a GPU does)."""
    model = HFChatModel.from_model(alone.model, alone.tokenizer, max_batch=8)
    model._batcher.pool.one_by_one = request.param == "one_by_one"
    return model


class PassSizes:
    """Records, for every forward pass of the weights that fed decoding requests, how many it fed (the
    packed pass the batcher is running, read by a torch forward hook); `mixed` lists the passes that
    also fed prompt tokens."""

    def __init__(self, model: HFChatModel):
        self.sizes: list[int] = []
        self.mixed: list[int] = []
        self.handle = model.model.register_forward_pre_hook(self._before)

    def _before(self, module, args) -> None:
        current = packed.current_pass()  # None: not the batcher's pass
        if current is not None and current.decoding:
            if current.segments:
                self.mixed.append(len(self.sizes))
            self.sizes.append(current.decoding)

    def close(self) -> list[int]:
        self.handle.remove()
        return self.sizes


def conversation(question: str, scratchpad: str = "") -> list[dict]:
    out = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
    return out + ([{"role": "assistant", "content": scratchpad}] if scratchpad else [])


def in_threads(calls: list) -> list:
    """Run each zero-argument callable in its own thread, started together; their results (or exceptions)."""
    results: list = [None] * len(calls)
    start = threading.Barrier(len(calls))

    def run(i: int) -> None:
        start.wait()
        try:
            results[i] = calls[i]()
        except Exception as e:  # noqa: BLE001  (compared by the test)
            results[i] = e

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
        assert not t.is_alive(), "a call never returned"
    return results


def wait_until(condition, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.001)


def steps_of(result) -> list[tuple]:
    return [(s.text, s.kind, s.observation) for s in result.steps] + [(result.answer, result.stop_reason)]


@pytest.mark.parametrize("constrained", [False, True], ids=["free", "constrained"])
def test_concurrent_agents_give_exactly_their_tokens_alone(alone, batched, constrained):
    if constrained:
        pytest.importorskip("outlines_core")

    def agent(model):
        return Agent(
            model,
            TOOLS,
            ReAct(working_first=False, constrained=constrained),
            max_turns=3,
            max_new_tokens=24,
            prompts={"react.system": SYSTEM},
        )

    expected = [steps_of(agent(alone).run(q)) for q in QUESTIONS]
    sizes = PassSizes(batched)
    got = in_threads([lambda q=q: steps_of(agent(batched).run(q)) for q in QUESTIONS])
    assert got == expected
    assert len({str(steps) for steps in expected}) > 3  # the agents did different things
    assert max(sizes.close()) > 1  # the agents really shared forward passes


def test_stop_strings_end_each_request_on_its_own(alone, batched):
    prompts = [conversation(q) for q in QUESTIONS]
    free = [str(alone.generate(p, max_new_tokens=30)) for p in prompts]
    stops = [[text[3 + 4 * i : 5 + 4 * i]] for i, text in enumerate(free)]  # met after a different number of tokens
    expected = [alone.generate(p, stop=s, max_new_tokens=30) for p, s in zip(prompts, stops)]
    got = in_threads([lambda p=p, s=s: batched.generate(p, stop=s, max_new_tokens=30) for p, s in zip(prompts, stops)])
    assert [str(g) for g in got] == [str(e) for e in expected]
    assert [g.completion_tokens for g in got] == [e.completion_tokens for e in expected]
    assert len({e.completion_tokens for e in expected}) > 3


def test_streamed_text_equals_returned_text_per_request(batched):
    chunks: list[list[str]] = [[] for _ in QUESTIONS]
    got = in_threads(
        [
            lambda i=i: batched.generate(
                conversation(QUESTIONS[i]), stop=STOP_WORDS, max_new_tokens=30, on_text=chunks[i].append
            )
            for i in range(len(QUESTIONS))
        ]
    )
    for text, pieces in zip(got, chunks):
        assert "".join(pieces) == str(text) and len(pieces) > 1
    streamed = in_threads(
        [
            lambda i=i: "".join(batched.stream(conversation(QUESTIONS[i]), stop=STOP_WORDS, max_new_tokens=30))
            for i in range(len(QUESTIONS))
        ]
    )
    assert streamed == [str(g) for g in got]


def test_a_request_that_raises_does_not_disturb_the_others(alone, batched):
    def boom_at(step: int):
        calls = iter(range(10**6))

        def boom(input_ids, scores):
            if next(calls) == step:
                raise RuntimeError("processor failed")
            return scores

        return boom

    prompts = [conversation(q) for q in QUESTIONS[:4]]
    expected = [str(alone.generate(p, max_new_tokens=20)) for p in prompts]
    got = in_threads(
        [
            lambda p=p, i=i: batched.generate(p, max_new_tokens=20, logits_processor=[boom_at(3)] if i == 1 else None)
            for i, p in enumerate(prompts)
        ]
    )
    assert isinstance(got[1], RuntimeError) and "processor failed" in str(got[1])
    assert [str(g) for i, g in enumerate(got) if i != 1] == [e for i, e in enumerate(expected) if i != 1]
    assert str(batched.generate(prompts[1], max_new_tokens=20)) == expected[1]  # and nothing is poisoned


class LoseTheDevice:
    """A forward pre-hook on the model's last layer that raises in the batcher's pass number `at`: the
    layers before it have already written that pass's keys into the caches."""

    def __init__(self, model: HFChatModel, at: int):
        self.passes, self.at = iter(range(10**6)), at
        self.handle = model.model.model.layers[-1].register_forward_pre_hook(self)

    def __call__(self, module, args) -> None:
        if packed.current_pass() is not None and next(self.passes) == self.at:
            raise RuntimeError("device lost")


def test_a_failed_decode_pass_fails_its_requests_and_frees_their_slots(alone, batched):
    prompts = [conversation(q) for q in QUESTIONS[:4]]
    expected = [str(alone.generate(p, max_new_tokens=12)) for p in prompts]
    hook = LoseTheDevice(batched, at=6)  # all four are decoding by then
    try:
        got = in_threads([lambda p=p: batched.generate(p, max_new_tokens=12) for p in prompts])
    finally:
        hook.handle.remove()
    assert all(isinstance(g, RuntimeError) and "device lost" in str(g) for g in got)
    assert not any(batched._batcher.pool.used)  # every slot given back
    again = in_threads([lambda p=p: str(batched.generate(p, max_new_tokens=12)) for p in prompts])
    assert again == expected


def test_a_prompt_cut_off_mid_prefill_is_not_kept(alone, batched, monkeypatch):
    """Its cache holds a chunk in some layers only: kept, it would be reused as the conversation's start."""
    from tinyagent.engine import batching

    monkeypatch.setattr(batching, "PREFILL_MAX", 8)
    prompt, other = conversation(QUESTIONS[0]), conversation(QUESTIONS[1])
    assert alone.count_tokens(prompt) > 4 * 8
    hook = LoseTheDevice(batched, at=3)  # its fourth chunk
    try:
        with pytest.raises(RuntimeError, match="device lost"):
            batched.generate(prompt, max_new_tokens=12)
        other_out = batched.generate(other, max_new_tokens=12)  # after the failure: unaffected
    finally:
        hook.handle.remove()
    out = batched.generate(prompt, max_new_tokens=12)
    assert str(out) == str(alone.generate(prompt, max_new_tokens=12))
    assert str(other_out) == str(alone.generate(other, max_new_tokens=12))
    assert out.cached_tokens == common_prefix_length(
        *(alone.encode_prompt(alone.render_prompt(m)) for m in (prompt, other))
    )  # from `other`, not its own


def test_a_request_joins_mid_decode_and_leaves_without_stopping_the_others(alone, batched):
    long, short = conversation(QUESTIONS[0]), conversation(QUESTIONS[1])
    expected_long = str(alone.generate(long, max_new_tokens=20))
    expected_short = str(alone.generate(short, max_new_tokens=4))
    results: dict[str, str] = {}
    joined = threading.Event()

    def submit_short_at_step_5(input_ids, scores):
        if not joined.is_set() and input_ids.shape[1] - len(alone.encode_prompt(alone.render_prompt(long))) == 5:
            joined.set()
            waiter = threading.Thread(
                target=lambda: results.update(short=str(batched.generate(short, max_new_tokens=4)))
            )
            waiter.start()
            wait_until(lambda: batched._batcher._waiting)  # queued before this step's token is chosen
        return scores

    sizes = PassSizes(batched)
    results["long"] = str(batched.generate(long, max_new_tokens=20, logits_processor=[submit_short_at_step_5]))
    wait_until(lambda: "short" in results)
    assert results == {"long": expected_long, "short": expected_short}
    # 5 passes alone, the short request's prompt with the 6th, its 3 decode steps together, then alone again
    assert sizes.close() == [1] * 6 + [2] * 3 + [1] * 10 and sizes.mixed == [5]


def test_prompts_prefill_in_chunks_beside_the_others_decoding(alone, batched, monkeypatch):
    """Small chunks: a long prompt goes in over many passes, each also feeding the decoding requests."""
    from tinyagent.engine import batching

    monkeypatch.setattr(batching, "PREFILL_CHUNK", 5)
    monkeypatch.setattr(batching, "PREFILL_MAX", 23)
    prompts = [conversation(q) for q in QUESTIONS]
    assert min(alone.count_tokens(p) for p in prompts) > 23  # every prompt takes several passes
    expected = [str(alone.generate(p, max_new_tokens=12)) for p in prompts]
    sizes = PassSizes(batched)
    got = in_threads([lambda p=p: str(batched.generate(p, max_new_tokens=12)) for p in prompts])
    assert got == expected
    assert len(sizes.mixed) > 3 and max(sizes.close()) > 1


def test_each_conversation_keeps_its_cache_between_steps(alone, batched):
    first = in_threads(
        [lambda q=q: batched.generate(conversation(q), stop=STOP_WORDS, max_new_tokens=12) for q in QUESTIONS[:3]]
    )
    follow = [conversation(q, f"{r}\nObservation: 7\n") for q, r in zip(QUESTIONS[:3], first)]
    second = in_threads([lambda m=m: batched.generate(m, stop=STOP_WORDS, max_new_tokens=12) for m in follow])
    for m, prev, out in zip(follow, first, second):
        assert out.cached_tokens >= prev.prompt_tokens  # the whole earlier prompt came from its own kept cache
        assert str(out) == str(alone.generate(m, stop=STOP_WORDS, max_new_tokens=12))
    assert len(batched._batcher.prefixes) == 3


def test_kept_caches_are_bounded_and_a_shared_start_is_copied_not_taken(alone):
    model = HFChatModel.from_model(alone.model, alone.tokenizer, max_batch=4, kept_prefixes=2)
    for q in QUESTIONS[:4]:
        model.generate(conversation(q), max_new_tokens=30)
    assert len(model._batcher.prefixes) == 2
    ids = [alone.encode_prompt(alone.render_prompt(conversation(q))) for q in QUESTIONS]
    shared = max(common_prefix_length(ids[5], ids[i]) for i in (2, 3))  # the two kept are the latest
    assert shared > 5  # the system prompt
    before = model._batcher.prefixes.shared_tokens
    out = model.generate(conversation(QUESTIONS[5]), max_new_tokens=30)
    assert out.cached_tokens == model._batcher.prefixes.shared_tokens - before == shared
    assert len(model._batcher.prefixes) == 2


def test_sampling_requests_do_not_change_greedy_neighbours(alone, batched):
    prompts = [conversation(q) for q in QUESTIONS[:4]]
    expected = [str(alone.generate(p, max_new_tokens=16)) for p in prompts[::2]]
    torch.manual_seed(0)
    got = in_threads(
        [
            lambda i=i: batched.generate(prompts[i], max_new_tokens=16, temperature=1.0 if i % 2 else None)
            for i in range(4)
        ]
    )
    assert [str(g) for g in got[::2]] == expected


def test_sliding_window_models_keep_the_one_at_a_time_path(tmp_path):
    model = HFChatModel(str(build_tiny_model("mistral", tmp_path)), max_batch=8, dtype="float32")
    assert model._batcher is None
    reference = HFChatModel.from_model(model.model, model.tokenizer, max_batch=1, reuse_cache=False)
    got = in_threads([lambda q=q: str(model.generate(conversation(q), max_new_tokens=8)) for q in QUESTIONS[:3]])
    assert got == [str(reference.generate(conversation(q), max_new_tokens=8)) for q in QUESTIONS[:3]]


def test_agents_arriving_together_compute_their_shared_system_prompt_once(alone, batched):
    long = [
        [{"role": "system", "content": build_system_prompt(TOOLS)}, {"role": "user", "content": q}]
        for q in QUESTIONS[:4]
    ]
    ids = [alone.encode_prompt(alone.render_prompt(m)) for m in long]
    shared = min(common_prefix_length(ids[0], i) for i in ids[1:])
    assert shared > 100  # the system prompt
    got = in_threads([lambda m=m: batched.generate(m, max_new_tokens=3) for m in long])
    assert [str(g) for g in got] == [str(alone.generate(m, max_new_tokens=3)) for m in long]
    # whichever started first computed the start; the others waited for it and copied it
    assert sorted(g.cached_tokens >= shared for g in got) == [False, True, True, True]
    fed = sum(
        len(i) - g.cached_tokens + g.completion_tokens - 1 for i, g in zip(ids, got)
    )  # the last token is never fed
    assert batched._batcher.fed_tokens == fed


def test_local_models_are_evaluated_eight_at_a_time(tmp_path, monkeypatch, scripted):
    import json

    from tinyagent import eval as ev

    suite = tmp_path / "suite.jsonl"
    suite.write_text(
        "".join(json.dumps({"id": str(i), "question": f"What is {i} + 1?", "answer": i + 1}) + "\n" for i in range(3))
    )
    monkeypatch.setattr("tinyagent.config.build_model", lambda cfg: scripted(["Final Answer: 1"] * 3))
    code = ev.main(["--suite", str(suite), "--tools", "", "--out", str(tmp_path / "out")])
    summary = json.loads((tmp_path / "out" / "summary.json").read_text(encoding="utf-8"))
    assert code == 0 and summary["run"]["backend"] == "embedded" and summary["run"]["concurrency"] == 8


def test_an_abandoned_stream_leaves_the_batch(alone, batched):
    first = batched.stream(conversation(QUESTIONS[0]), max_new_tokens=400)
    next(first)
    first.close()  # returns once the request has ended (stream_in_thread joins its worker)
    wait_until(lambda: batched._batcher._worker is None)  # nothing left decoding
    assert batched._batcher.passes < 10  # it ended within a few tokens, not at 400
    assert str(batched.generate(conversation(QUESTIONS[1]), max_new_tokens=8)) == str(
        alone.generate(conversation(QUESTIONS[1]), max_new_tokens=8)
    )


def test_a_request_past_the_dynamic_rope_length_runs_alone(tmp_path):
    from test_internlm2 import VARIANTS, write_internlm2

    from tinyagent.models.internlm2 import InternLM2Chat

    write_internlm2(tmp_path, **VARIANTS["gqa-dynamic-safetensors"], max_pos=128)
    model = InternLM2Chat(str(tmp_path), device="cpu", dtype="float32")
    assert model._batcher is not None and model._batcher.rope_limit == 128
    reference = InternLM2Chat.from_model(model.model, model.tokenizer, reuse_cache=False, max_batch=1)
    prompts = [
        [{"role": "system", "content": SYSTEM}, {"role": "user", "content": q}]
        for q in [*QUESTIONS[:3], "What is 12 times 6? " * 40]
    ]  # the last one passes 128: NTK rescales
    assert model.count_tokens(prompts[-1]) > 128 > max(model.count_tokens(p) for p in prompts[:3]) + 6
    sizes = PassSizes(model)
    got = in_threads([lambda p=p: str(model.generate(p, max_new_tokens=6)) for p in prompts])
    assert got == [str(reference.generate(p, max_new_tokens=6)) for p in prompts]
    assert max(sizes.close()) > 1  # the short ones were batched


def test_close_ends_the_worker_after_its_pass_and_fails_the_waiting_call(batched):
    """What runs at exit: a worker still inside torch when Python tears down can abort the process."""
    started, release = threading.Event(), threading.Event()

    class Hold:
        def __call__(self, input_ids, scores):
            started.set()
            release.wait(30)
            return scores

    outcome: dict = {}

    def call() -> None:
        try:
            outcome["reply"] = batched.generate(
                conversation(QUESTIONS[0]), max_new_tokens=200, logits_processor=[Hold()]
            )
        except Exception as e:  # noqa: BLE001 - the test inspects it
            outcome["error"] = e

    caller = threading.Thread(target=call)
    caller.start()
    assert started.wait(60)
    worker = batched._batcher._worker
    closer = threading.Thread(target=batched._batcher.close)
    closer.start()
    deadline = time.monotonic() + 30
    while not batched._batcher._closing and time.monotonic() < deadline:  # close() has asked before the pass ends
        threading.Event().wait(0.01)
    release.set()
    closer.join(60)
    caller.join(60)
    assert not worker.is_alive() and batched._batcher._worker is None
    assert "shutting down" in str(outcome.get("error"))
