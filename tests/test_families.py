"""Every model family the README promises, as a tiny random model built here in the family's own chat format:
multi-step episodes whose prompts pass the sliding window, with stop strings, streaming and constrained
decoding, give the same tokens (and scores) with KV-cache reuse as without it."""

from __future__ import annotations

import os

import pytest
import torch
from tiny_models import FAMILIES, SLIDING_WINDOW, build_tiny_model

from tinyagent import Agent, ReAct
from tinyagent.engine.prefix_cache import sliding_windows
from tinyagent.eval.scoring import VALID_KINDS
from tinyagent.format.prompts import STOP_WORDS, build_system_prompt
from tinyagent.models.hf import HFChatModel
from tinyagent.tools import Calculator

os.environ.setdefault("HF_HUB_OFFLINE", "1")

#: family -> its sliding-window layers (of two): all, one (Gemma-3's pattern, Qwen2's max_window_layers), none
SLIDING_LAYERS = {"mistral": 2, "phi3": 2, "gemma3": 1, "qwen2": 1}
QUESTION = "What is 12 times 6?"
TOOLS = [Calculator()]


@pytest.fixture(scope="module", params=[*FAMILIES, "internlm2"])
def pair(request, tmp_path_factory):
    """(family, model with reuse, the same weights without reuse), in float32 so scores compare closely."""
    folder = tmp_path_factory.mktemp(request.param)
    if request.param == "internlm2":
        from test_internlm2 import VARIANTS, write_internlm2

        from tinyagent.models.internlm2 import InternLM2Chat

        write_internlm2(folder, **VARIANTS["mha-bias-tied-bin"], max_pos=2048)
        model = InternLM2Chat(str(folder), dtype="float32")
    else:
        model = HFChatModel(str(build_tiny_model(request.param, folder)), dtype="float32")
    return request.param, model, type(model).from_model(model.model, model.tokenizer, reuse_cache=False)


class Recorder:
    """A logits processor that keeps the scores the model gave at each step."""

    def __init__(self):
        self.scores: list[torch.Tensor] = []

    def __call__(self, input_ids, scores):
        self.scores.append(scores[0].clone())
        return scores


def messages(scratchpad: str = "", question: str = QUESTION) -> list[dict]:
    out = [{"role": "system", "content": build_system_prompt(TOOLS)}, {"role": "user", "content": question}]
    return out + ([{"role": "assistant", "content": scratchpad}] if scratchpad else [])


def free_episode(model, stop: list[str], steps: int = 4):
    """An unconstrained scratchpad episode: reply, observation appended, continue; each step streamed."""
    pad, outs, records, streamed = "", [], [], []
    for i in range(steps):
        rec, chunks = Recorder(), []
        out = model.generate(messages(pad), stop=stop, max_new_tokens=16, logits_processor=[rec], on_text=chunks.append)
        outs.append(out)
        records.append(rec)
        streamed.append("".join(chunks))
        pad += f"{out}\nObservation: {i * 7}\n"
    return outs, records, streamed


def assert_same_scores(a: list[Recorder], b: list[Recorder]) -> None:
    for ra, rb in zip(a, b, strict=True):
        assert len(ra.scores) == len(rb.scores)
        for sa, sb in zip(ra.scores, rb.scores):
            assert torch.allclose(sa, sb, atol=1e-4)


def test_the_cache_has_the_familys_attention_layout(pair):
    from transformers import DynamicCache

    family, model, _ = pair
    assert sliding_windows(DynamicCache(config=model.model.config)) == [SLIDING_WINDOW] * SLIDING_LAYERS.get(family, 0)


def test_free_episode_with_stop_strings_and_streaming_is_identical_with_reuse(pair):
    family, model, fresh = pair
    model.reset_cache()
    probe = str(fresh.generate(messages(), max_new_tokens=16))
    stop = [*STOP_WORDS, probe[len(probe) // 2 : len(probe) // 2 + 2]]  # cuts the first reply midway
    with_reuse, rec_a, streamed_a = free_episode(model, stop)
    without, rec_b, streamed_b = free_episode(fresh, stop)
    assert [str(o) for o in with_reuse] == [str(o) for o in without] == streamed_a == streamed_b
    assert with_reuse[0].text == probe[: probe.find(stop[-1])]
    assert_same_scores(rec_a, rec_b)
    assert with_reuse[0].prompt_tokens > SLIDING_WINDOW
    assert all(o.cached_tokens > SLIDING_WINDOW for o in with_reuse[1:])  # reused past the window
    assert all(o.cached_tokens == 0 for o in without)


def test_constrained_agent_episode_is_identical_with_reuse(pair):
    family, model, fresh = pair
    runs = []
    for m in (model, fresh):
        m.reset_cache()
        chunks: list[str] = []
        agent = Agent(
            m,
            TOOLS,
            max_turns=3,
            max_new_tokens=80,
            on_text=chunks.append,
            protocol=ReAct(working_first=False, constrained=True),
        )
        runs.append((agent.run(QUESTION), "".join(chunks)))
    (a, streamed_a), (b, streamed_b) = runs
    assert [s.text for s in a.steps] == [s.text for s in b.steps] and a.answer == b.answer
    assert streamed_a == streamed_b and streamed_a.startswith(a.steps[0].text.split("\n")[0])
    assert all(s.kind in VALID_KINDS for s in a.steps), [(s.kind, s.text) for s in a.steps]
    assert len(a.steps) >= 2 and a.steps[0].action == "calculator"
    assert all(s.cached_tokens > SLIDING_WINDOW for s in a.steps[1:])


def test_a_new_conversation_reuses_only_what_is_exact(pair):
    """After an episode past the window, a sliding-window cache cannot go back to the shared system
    prompt exactly, so it is recomputed; full attention reuses the shared prefix."""
    family, model, fresh = pair
    model.reset_cache()
    free_episode(model, STOP_WORDS, steps=3)
    other = messages(question="Who wrote Hamlet?")
    rec_a, rec_b = Recorder(), Recorder()
    out = model.generate(other, max_new_tokens=12, logits_processor=[rec_a])
    assert out.text == fresh.generate(other, max_new_tokens=12, logits_processor=[rec_b]).text
    assert_same_scores([rec_a], [rec_b])
    if family in SLIDING_LAYERS:
        assert out.cached_tokens == 0
    else:
        assert out.cached_tokens > SLIDING_WINDOW
