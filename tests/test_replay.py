"""Teacher-forced replay (tinyagent/llm/replay.py) and the episode-cost benchmark's replay on tiny random
models: every count is checked against the tokens the model's own tokenizer gives."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import torch
from replay import ForceTokens, PassCounter, RecordedReply, ReplayModel, replay_generate

from tinyagent import Agent, ReAct
from tinyagent.agent import Step
from tinyagent.engine.prefix_cache import common_prefix_length
from tinyagent.format.messages import prompt_messages
from tinyagent.format.prompts import STOP_WORDS
from tinyagent.format.reading import cut_at_observation
from tinyagent.models.hf import HFChatModel
from tinyagent.tools.calculator import Calculator

#: ReAct from the first reply: these tests drive the loop itself (the working first: test_working.py)
CLASSIC = ReAct(working_first=False, search="tool")

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
STOP = list(STOP_WORDS)
QUESTION = [{"role": "system", "content": "Answer with tools."}, {"role": "user", "content": "What is 12 times 6?"}]
TOOL_REPLY = RecordedReply(
    'Thought: I should compute it.\nAction: calculator\nAction Input: {"expression": "12*6"}\nObservation:',
    continuation=" 72\nThought: I now know the final answer\nFinal Answer: 72",
)
FINAL_REPLY = RecordedReply("Thought: I now know the final answer\nFinal Answer: 72")


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny models run far faster on one thread than on cores shared with other processes."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def base(tiny_llama_dir):
    return HFChatModel(tiny_llama_dir)


def wrapper(base: HFChatModel, reuse: bool) -> HFChatModel:
    return HFChatModel.from_model(base.model, base.tokenizer, reuse_cache=reuse)


def ids_of(model: HFChatModel, messages: list[dict], text: str) -> list[int]:
    prompt = model.render_prompt(messages)
    return model.encode_prompt(prompt + text)[len(model.encode_prompt(prompt)) :]


# --- one step ------------------------------------------------------------------------------


def test_with_stop_strings_exactly_the_reply_is_decoded(base):
    model = wrapper(base, reuse=False)
    reply_ids = ids_of(model, QUESTION, TOOL_REPLY.text)
    prompt_tokens = model.count_tokens(QUESTION)
    text, counts = replay_generate(model, QUESTION, TOOL_REPLY, stop=STOP)
    assert text.text == TOOL_REPLY.text[: -len("\nObservation:")]
    # generation stops on the token that completes the stop string: it is decoded, nothing after it
    assert counts.decoded == counts.forward_passes == len(reply_ids) == counts.reply_tokens
    assert counts.discarded == 0 and counts.calls == 1
    assert counts.prefilled == prompt_tokens and counts.reused == 0
    assert counts.fed == counts.decode_passes == len(reply_ids) - 1  # the last token is never fed back
    assert counts.tokens_processed == prompt_tokens + len(reply_ids) - 1


def test_without_stop_strings_the_continuation_is_decoded_then_discarded(base):
    model = wrapper(base, reuse=False)
    both = ids_of(model, QUESTION, TOOL_REPLY.text + TOOL_REPLY.continuation)
    text, counts = replay_generate(model, QUESTION, TOOL_REPLY, stop=None)
    assert text.text == TOOL_REPLY.text + TOOL_REPLY.continuation
    assert counts.decoded == len(both) + 1  # and the end-of-turn token that closes it
    assert counts.discarded == counts.decoded - len(ids_of(model, QUESTION, TOOL_REPLY.text)) > 0
    assert cut_at_observation(text.text) == TOOL_REPLY.text[: -len("\nObservation:")]


def test_a_reply_that_runs_on_is_generated_until_max_new_tokens(base):
    model = wrapper(base, reuse=False)
    looping = RecordedReply(TOOL_REPLY.text, " 72\nThought:", runs_on=True)
    text, counts = replay_generate(model, QUESTION, looping, stop=None, max_new_tokens=80)
    assert counts.decoded == counts.forward_passes == 80
    assert text.text.startswith(looping.text + looping.continuation)
    text, counts = replay_generate(model, QUESTION, looping, stop=STOP, max_new_tokens=80)  # stop strings end it
    assert counts.decoded == len(ids_of(model, QUESTION, looping.text)) and counts.discarded == 0


def test_a_final_answer_keeps_its_end_token(base):
    model = wrapper(base, reuse=False)
    text, counts = replay_generate(model, QUESTION, FINAL_REPLY, stop=STOP)
    assert text.text == FINAL_REPLY.text
    assert counts.decoded == len(ids_of(model, QUESTION, FINAL_REPLY.text)) + 1 and counts.discarded == 0


def test_reuse_feeds_exactly_the_new_tokens_and_leaves_a_valid_cache(base):
    model, fresh = wrapper(base, reuse=True), wrapper(base, reuse=False)
    first_prompt = model.encode_prompt(model.render_prompt(QUESTION))
    _, first = replay_generate(model, QUESTION, TOOL_REPLY, stop=STOP)
    assert first.prefilled == len(first_prompt) and first.reused == 0
    kept = first_prompt + ids_of(model, QUESTION, TOOL_REPLY.text)[:-1]  # what went through the model
    step = Step(index=0, text=TOOL_REPLY.text[: -len("\nObservation:")], observation="72")
    follow = prompt_messages(QUESTION, [step])
    follow_ids = model.encode_prompt(model.render_prompt(follow))
    _, second = replay_generate(model, follow, FINAL_REPLY, stop=STOP)
    shared = min(common_prefix_length(kept, follow_ids), len(follow_ids) - 1)
    assert second.reused == shared > len(first_prompt)
    assert second.prefilled == len(follow_ids) - shared
    # the cache the replay leaves behind serves a real generate exactly as a full prefill does
    again = follow[:-1] + [{"role": "assistant", "content": follow[-1]["content"] + "Thought: I"}]
    model.reset_cache()
    replay_generate(model, follow, FINAL_REPLY, stop=STOP)
    reused = model.generate(again, stop=STOP, max_new_tokens=12)
    assert reused.cached_tokens > 0
    assert reused.text == fresh.generate(again, stop=STOP, max_new_tokens=12).text


def test_forcing_the_models_own_choices_sees_the_same_scores(base):
    model = wrapper(base, reuse=False)
    seen: list[list] = [[], []]

    def recorder(i):
        def record(input_ids, scores):
            seen[i].append(scores[0].clone())
            return scores

        return record

    free = model.generate(QUESTION, max_new_tokens=10, logits_processor=[recorder(0)])
    chosen = [int(scores.argmax()) for scores in seen[0]]  # greedy: the model's own choices
    forced = ForceTokens(chosen, model.end_token_ids)
    again = model.generate(QUESTION, max_new_tokens=10, logits_processor=[recorder(1), forced])
    assert again.text == free.text and len(seen[0]) == len(seen[1])
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(*seen))


def test_pass_counter_and_errors(base):
    with PassCounter(base.model) as passes:
        out = base.model(torch.tensor([[5, 6, 7]]), use_cache=True)
        base.model(torch.tensor([[8]]), cache=out.cache, use_cache=True)
    assert passes.sizes == [3, 1] and passes.single_passes == 1
    with pytest.raises(ValueError, match="no end token"):
        ForceTokens([1], [])
    replay = ReplayModel(wrapper(base, reuse=True), [FINAL_REPLY])
    replay.generate(QUESTION, stop=STOP)
    with pytest.raises(RuntimeError, match="no recorded reply left"):
        replay.generate(QUESTION, stop=STOP)


# --- an agent episode --------------------------------------------------------------------


class Recording(ReplayModel):
    def generate(self, messages, stop=None, **kwargs):
        self.prompts = [*getattr(self, "prompts", []), [dict(m) for m in messages]]
        return super().generate(messages, stop, **kwargs)


def run_episode(base: HFChatModel, use_stop: bool, reuse: bool) -> tuple:
    replies = [
        TOOL_REPLY,
        RecordedReply(
            'Thought: Check it.\nAction: calculator\nAction Input: {"expression": "72/6"}\nObservation:',
            " 12\nFinal Answer: 72",
        ),
        FINAL_REPLY,
    ]
    replay = Recording(wrapper(base, reuse), replies, use_stop=use_stop)
    result = Agent(replay, [Calculator()], lang="en", protocol=CLASSIC).run("What is 12 times 6?")
    return replay, result


def test_strategies_run_the_same_episode_at_different_costs(base):
    runs = {
        name: run_episode(base, *flags)
        for name, flags in {"original": (False, False), "stop": (True, False), "tinyagent": (True, True)}.items()
    }
    results = {name: r for name, (_, r) in runs.items()}
    assert {r.answer for r in results.values()} == {"72"}
    assert len({json.dumps(replay.prompts) for replay, _ in runs.values()}) == 1  # the same prompts in all three
    assert [s.observation for s in results["original"].steps] == ["72", "12", None]
    counts = {name: replay.counts for name, (replay, _) in runs.items()}
    replay = runs["tinyagent"][0]
    bound = replay.last_prompt_tokens + replay.last_reply_tokens
    final_prompt = replay.model.count_tokens(replay.prompts[-1])
    assert bound == final_prompt + len(ids_of(replay.model, replay.prompts[-1], FINAL_REPLY.text))
    assert bound <= counts["tinyagent"].tokens_processed <= 1.05 * bound
    full_prompts = sum(replay.model.count_tokens(p) for p in replay.prompts)
    assert counts["stop"].prefilled == counts["original"].prefilled == full_prompts
    assert counts["stop"].decoded == counts["tinyagent"].decoded and counts["stop"].discarded == 0
    assert counts["original"].decoded > counts["stop"].decoded
    assert counts["original"].discarded == counts["original"].decoded - counts["stop"].decoded > 0


# --- the benchmark's episodes and command, on a random InternLM2 in the real layout ---------


@pytest.fixture(scope="module")
def bench():
    """bench/episode_cost.py, imported as from its own folder (bench/ is not a package)."""
    sys.path.insert(0, str(ROOT / "bench"))
    import episode_cost

    yield episode_cost
    sys.path.remove(str(ROOT / "bench"))


@pytest.fixture(scope="module")
def internlm2_dir(bench, tmp_path_factory):
    """The "tiny" checkpoint with a smaller vocabulary: with a sentencepiece tokenizer every generate call
    with stop strings reads the whole vocabulary (transformers' StopStringCriteria), too slow for a test."""
    from make_random_internlm2 import SHAPES, write_checkpoint
    from recorded import tokenizer_texts

    folder = tmp_path_factory.mktemp("bench") / "internlm2-tiny"
    texts = tokenizer_texts(bench.load_episodes(sorted(bench.EPISODES.glob("*.jsonl"))))
    return write_checkpoint(folder, {**SHAPES["tiny"], "vocab_size": 8192}, texts)


def test_shipped_episodes_replay_as_recorded(bench, internlm2_dir):
    from tinyagent.models.internlm2 import InternLM2Chat

    model = InternLM2Chat(str(internlm2_dir), device="cpu")
    assert model.model.config.vocab_size == len(model.tokenizer) == 8192
    episodes = bench.load_episodes(sorted(bench.EPISODES.glob("*.jsonl")))
    assert {e.lang for e in episodes} == {"en", "zh"} and all(3 <= len(e.steps) <= 5 for e in episodes)
    for episode in episodes:
        row = bench.replay_episode(episode, "tinyagent", model, 512)
        assert row["steps"] == len(episode.steps)
        assert row["lower_bound_tokens"] <= row["tokens_processed"] <= 1.05 * row["lower_bound_tokens"]


def test_bench_command_writes_its_figures(bench, internlm2_dir, tmp_path):
    out = tmp_path / "figures.json"
    bench.main(
        [
            "--random-internlm2-tiny",
            "--checkpoint-dir",
            str(internlm2_dir.parent),
            "--only",
            "en-speed-of-light",
            "--device",
            "cpu",
            "--json",
            str(out),
        ]
    )
    report = json.loads(out.read_text())
    figures = report["backends"]["hf"]
    assert set(report["backends"]) == {"hf"} and set(figures["modes"]) == {"original", "stop", "tinyagent"}
    for mode, sums in figures["modes"].items():
        rows = [r for r in report["episodes"] if r["mode"] == mode and r["backend"] == "hf"]
        assert sums["tokens_processed"] == sum(r["tokens_processed"] for r in rows) > 0
        assert {"lower_bound_tokens", "decoded_discarded", "wall_seconds"} <= set(sums)
    assert figures["modes"]["original"]["decoded_discarded"] > 0 == figures["modes"]["stop"]["decoded_discarded"]
    assert figures["decode"]["bound_tokens_per_s"] > 0


def test_malformed_episode_file_is_reported(bench, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"_comment": "x"}\n{"id": "a", "lang": "en", "question": "q"}\n')
    with pytest.raises(bench.EpisodeError, match=r"bad.jsonl:2: not an episode"):
        bench.load_episodes([bad])


def test_bench_concurrency_replays_the_episodes_as_agents_at_once(bench, internlm2_dir, tmp_path):
    out = tmp_path / "figures.json"
    bench.main(
        [
            "--random-internlm2-tiny",
            "--checkpoint-dir",
            str(internlm2_dir.parent),
            "--device",
            "cpu",
            "--no-replay",
            "--concurrency",
            "3",
            "--json",
            str(out),
        ]
    )
    c = json.loads(out.read_text())["backends"]["hf"]["concurrency"]
    assert c["agents"] == len(c["episodes"]) == 3  # three different episodes, one per agent
    assert c["longest_agent_decoded"] <= c["batched_decode_passes"] < c["decoded"]  # passes were shared
    assert c["tokens_processed"] <= c["lower_bound_tokens"]  # the shared system prompt is copied, not recomputed
    assert c["shared_prefix_tokens"] > 0 and c["sequential_seconds"] > 0 and c["concurrent_seconds"] > 0
    assert c["decoded_per_s"] == round(c["decoded"] / c["concurrent_seconds"], 1)


@pytest.mark.slow
def test_an_episode_replayed_on_llamacpp_feeds_the_lower_bound_by_llamacpps_own_count(bench):
    """The recorded replies forced through LlamaCppModel (numpy logits): the agent gets the recorded episode,
    and llama.cpp's own counters (llama_perf_context) say each token of the transcript went through once."""
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    from runtimes import strategy_models

    from tinyagent.models.embedded import embedded_gguf_path
    from tinyagent.models.llamacpp import LlamaCppModel

    models = strategy_models(LlamaCppModel(embedded_gguf_path()))
    episode = next(
        e for e in bench.load_episodes(sorted(bench.EPISODES.glob("*.jsonl"))) if e.id == "en-speed-of-light"
    )
    tiny = bench.replay_episode(episode, "tinyagent", models["tinyagent"], 512)
    assert tiny["tokens_processed"] == tiny["lower_bound_tokens"] and tiny["reused_tokens"] > 1000
    stop = bench.replay_episode(episode, "stop", models["stop"], 512)
    assert stop["reused_tokens"] == 0 and stop["tokens_processed"] > 2 * tiny["tokens_processed"]
    assert stop["decoded_tokens"] == tiny["decoded_tokens"] and stop["decode_passes"] == tiny["decode_passes"]
