"""Packed attention (llm/packed.py): each request's tokens attend only to its own cache, exactly as
transformers' sdpa would; outside packed passes the installed attention is sdpa, with one-token
steps reading grouped keys once."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM, DynamicCache, LlamaConfig

from tinyagent.engine import packed


def reference(query, key, value, scale):
    """Causal attention of the last `n` positions, every key/value head repeated for its query heads."""
    group = query.shape[1] // key.shape[1]
    key, value = (t.repeat_interleave(group, dim=1) for t in (key, value))
    n, total = query.shape[2], key.shape[2]
    mask = torch.ones(n, total, dtype=torch.bool).tril(total - n)
    return F.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=scale)


@pytest.mark.parametrize("heads,kv_heads", [(4, 4), (4, 2), (9, 3)])
@pytest.mark.parametrize("new", [1, 7, 40])
@pytest.mark.parametrize("gqa", [True, False], ids=["enable_gqa", "torch<2.5"])
def test_a_segment_attends_causally_to_its_own_cache(heads, kv_heads, new, gqa, monkeypatch):
    monkeypatch.setattr(packed, "_torch_has_gqa", lambda: gqa)
    torch.manual_seed(0)
    query = torch.randn(1, heads, new, 16)
    key, value = torch.randn(1, kv_heads, 40, 16), torch.randn(1, kv_heads, 40, 16)
    got = packed._attend(query, key, value, 0.3)
    torch.testing.assert_close(got, reference(query, key, value, 0.3), rtol=0, atol=1e-6)


@pytest.fixture(scope="module")
def twins(tiny_llama_dir):
    """The tiny Llama (4 query heads, 2 key/value heads) twice: sdpa, and with the packed attention installed."""
    plain = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32)
    other = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32)
    assert plain.config._attn_implementation == "sdpa" and packed.install(other)
    assert other.config._attn_implementation == packed.NAME
    return plain, other


def test_outside_packed_passes_the_installed_attention_is_sdpa(twins):
    plain, installed = twins
    ids = torch.arange(3, 40)[None]
    with torch.inference_mode():
        a = plain.generate(ids, max_new_tokens=12, do_sample=False, output_scores=True, return_dict_in_generate=True)
        b = installed.generate(
            ids, max_new_tokens=12, do_sample=False, output_scores=True, return_dict_in_generate=True
        )
    assert a.sequences.tolist() == b.sequences.tolist()
    for x, y in zip(a.scores, b.scores):  # the one-token steps took the grouped path: same scores
        torch.testing.assert_close(x, y, rtol=0, atol=1e-5)


def test_a_packed_pass_gives_each_request_its_logits_alone(twins):
    plain, installed = twins
    prompts = [list(range(5, 30)), list(range(40, 52)), list(range(60, 61 + 19))]
    with torch.inference_mode():
        alone = [plain(input_ids=torch.tensor([p])).logits[0] for p in prompts]
        # request 0 has 20 tokens kept, request 1 none, request 2 all but its last: fed together
        segments, tokens, positions = [], [], []
        for p, kept in zip(prompts, (20, 0, 18)):
            cache = DynamicCache(config=installed.config)
            if kept:
                installed(input_ids=torch.tensor([p[:kept]]), cache=cache, use_cache=True)
            segments.append(packed.Segment(cache, len(tokens), len(p) - kept))
            tokens += p[kept:]
            positions += range(kept, len(p))
        with packed.running(packed.PackedPass(segments)) as cache:
            logits = installed(
                input_ids=torch.tensor([tokens]),
                position_ids=torch.tensor([positions]),
                attention_mask=torch.ones(1, 1, 1, 1, dtype=torch.bool),
                cache=cache,
                use_cache=True,
            ).logits[0]
    for s, full, p in zip(segments, alone, prompts):
        torch.testing.assert_close(logits[s.start : s.start + s.length], full[len(p) - s.length :], rtol=0, atol=1e-5)
        assert s.cache.get_seq_length() == len(p)
    assert packed.current_pass() is None


def test_append_grows_in_place_and_equals_concatenation():
    from transformers.cache_utils import DynamicLayer

    torch.manual_seed(0)
    grown, reference = DynamicLayer(), DynamicLayer()
    buffers = set()
    for step, n in enumerate([30, 1, 1, 300, 1, 1, 600, 1]):
        keys, values = torch.randn(1, 2, n, 8), torch.randn(1, 2, n, 8)
        got = packed.append(grown, keys, values)
        expected = reference.update(keys, values)
        assert all(torch.equal(a, b) for a, b in zip(got, expected))
        buffers.add(grown.room[0].data_ptr())
        if step == 4:  # a kept conversation cut back (a re-tokenised stop string): the buffer stays
            grown.crop(-3)
            reference.crop(-3)
    assert len(buffers) == 3  # grown twice, not at every step
    grown.keys = torch.cat([grown.keys, torch.randn(1, 2, 1, 8)], dim=-2)  # another path grew it: new buffers
    grown.values = torch.cat([grown.values, torch.randn(1, 2, 1, 8)], dim=-2)
    before = grown.keys.clone()
    packed.append(grown, torch.ones(1, 2, 1, 8), torch.ones(1, 2, 1, 8))
    assert torch.equal(grown.keys[:, :, :-1], before) and grown.room[0].data_ptr() not in buffers


@pytest.mark.parametrize("one_by_one", [True, False], ids=["one_by_one", "masked"])
def test_slot_pool_attends_each_request_over_exactly_its_own_cache(one_by_one):
    """Slots of different lengths, one freed in the middle (its stale keys must not be read): each request's
    query sees its own keys and the one just written, nothing else."""
    from tinyagent.engine.slots import SlotPool

    torch.manual_seed(0)
    config = LlamaConfig(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=32)
    pool = SlotPool(layers=2, max_rows=4, one_by_one=one_by_one)
    caches = []
    for length in (30, 7, 300, 12):
        cache = DynamicCache(config=config)
        for layer in range(2):
            cache.update(torch.randn(1, 2, length, 8), torch.randn(1, 2, length, 8), layer)
        caches.append((pool.add(cache), cache))
    pool.release(caches[1][0])  # slot 1 is free: its 7 old keys stay in the tensor
    order = [caches[3], caches[0], caches[2]]  # not in slot order: the queries are scattered and gathered
    step = pool.step([slot for slot, _ in order])
    assert (step.rows, step.width, step.dense) == (4, 301, False)
    new_keys, new_values, query = torch.randn(1, 2, 3, 8), torch.randn(1, 2, 3, 8), torch.randn(1, 4, 3, 8)
    for layer in range(2):
        pool.write(layer, step, new_keys, new_values)
        got = pool.attend(layer, step, query, 0.3)
        for i, (slot, cache) in enumerate(order):
            keys = torch.cat([cache.layers[layer].keys, new_keys[:, :, i : i + 1]], dim=2)
            values = torch.cat([cache.layers[layer].values, new_values[:, :, i : i + 1]], dim=2)
            torch.testing.assert_close(
                got[:, :, i : i + 1], reference(query[:, :, i : i + 1], keys, values, 0.3), rtol=0, atol=1e-5
            )
    slot, cache = caches[2]
    out = pool.take_out(slot, 301, config)
    assert torch.equal(out.layers[1].keys[:, :, :300], cache.layers[1].keys)
    assert torch.equal(out.layers[1].keys[:, :, 300], new_keys[:, :, 2])
