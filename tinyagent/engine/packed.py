"""Packed forward passes: many requests' new tokens in one row, each attending only to its own cache.

The batcher (batching.py) feeds the model one sequence holding every active request's next
tokens side by side: first one token for each request that is decoding, then a chunk of the
prompt for each that is prefilling, each token at its own request's position. The matrix
products, which are most of the cost, then run once over all of them, with no padding; only
attention is done per request: the decoding requests' against their slots of a `SlotPool`
(slots.py), each prompt chunk against its request's own batch-1 cache (`Segment.cache`, a
`DynamicCache`, grown in place by `append`). So a prompt chunk rides in the same pass as the
others' decode steps (chunked prefill).

How it plugs into transformers: the model's attention implementation is set to `NAME`, registered
here. Outside a packed pass (`current_pass()` is None) that function is transformers' `sdpa`; in
one, the `PackedPass` given as the model's cache takes each layer's new keys and values and puts
each request's slice in its cache, and the attention function attends request by request.

A one-token step attends with its query heads grouped per key/value head (`[kv_heads, group,
dim]`), so grouped-query attention reads each cached key once instead of expanding the cache to
every head; this is also used for one-token steps outside packed passes with no mask, where
torch's CPU kernel for `enable_gqa` is several times slower.
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass

NAME = "tinyagent_packed"
ROOM_MIN = 256  # positions a cache grows by at least (see `room_for`)

_local = threading.local()


@dataclass
class Segment:
    """A chunk of one request's prompt in a packed pass: `length` tokens from `start` of the row, fed after
    its `cache`."""

    cache: object
    start: int
    length: int


class PackedPass:
    """The cache object of one packed forward pass (see the module docstring): first one token for each
    decoding request, whose caches are slots of `pool` (`step`, slots.py), then the prompt chunks."""

    def __init__(self, segments: list[Segment], pool=None, step=None):
        self.segments, self.pool, self.step = segments, pool, step
        self.decoding = step.count if step is not None else 0
        self.kv: dict[int, list] = {}  # layer -> each segment's (keys, values) after this pass's update

    def update(self, keys, values, layer_idx: int, *args, **kwargs):
        if self.decoding:
            self.pool.write(layer_idx, self.step, keys[:, :, : self.decoding], values[:, :, : self.decoding])
        self.kv[layer_idx] = [
            append(
                s.cache.layers[layer_idx],
                keys[:, :, s.start : s.start + s.length],
                values[:, :, s.start : s.start + s.length],
            )
            for s in self.segments
        ]
        return keys, values


def append(layer, keys, values):
    """Add positions to a `DynamicLayer` in place: its keys and values become views of buffers with room
    to grow (half as much again), where `DynamicLayer.update` would copy the whole cache (`torch.cat`) at
    every step. Returns the layer's keys and values. A layer whose tensors are no longer views of its
    buffers (another path grew it) gets new buffers."""
    if not layer.is_initialized:
        layer.lazy_initialization(keys, values)
    held, new = layer.get_seq_length(), keys.shape[-2]
    room = getattr(layer, "room", None)
    if room is None or room[0].shape[-2] < held + new or held and room[0].data_ptr() != layer.keys.data_ptr():
        size = room_for(held + new)
        room = tuple(t.new_empty(*t.shape[:2], size, t.shape[-1]) for t in (keys, values))
        if held:
            room[0][:, :, :held], room[1][:, :, :held] = layer.keys, layer.values
        layer.room = room
    room[0][:, :, held : held + new], room[1][:, :, held : held + new] = keys, values
    layer.keys, layer.values = room[0][:, :, : held + new], room[1][:, :, : held + new]
    return layer.keys, layer.values


def room_for(positions: int) -> int:
    """The size to allocate for `positions`: half as much again (at least `ROOM_MIN`), so growing by one
    position a step reallocates rarely (`append`, `SlotPool`)."""
    return positions + max(ROOM_MIN, positions // 2)


def current_pass() -> PackedPass | None:
    """The packed pass this thread is running, if any."""
    return getattr(_local, "current", None)


class running:
    """`with running(packed): model(...)`: the model's attention reads `packed` in this thread."""

    def __init__(self, packed: PackedPass):
        self.packed = packed

    def __enter__(self) -> PackedPass:
        _local.current = self.packed
        return self.packed

    def __exit__(self, *exc) -> None:
        _local.current = None


def attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling: float | None = None, **kwargs):
    """The attention function registered as `NAME`: packed when a pass runs, else transformers' sdpa."""
    import torch

    packed = current_pass()
    if packed is None:
        if (
            query.shape[2] == 1
            and attention_mask is None
            and query.shape[1] != key.shape[1]
            and dropout == 0.0
            and not kwargs.get("softcap")
            and kwargs.get("position_bias") is None
        ):
            out = one_query(query, key, value, scaling)
            return out.transpose(1, 2).contiguous(), None
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    if kwargs.get("softcap") or kwargs.get("sliding_window"):
        raise ValueError("packed batching supports plain full attention only")  # `batching.supports` rules these out
    parts = (
        [packed.pool.attend(module.layer_idx, packed.step, query[:, :, : packed.decoding], scaling)]
        if packed.decoding
        else []
    )
    parts += [
        _attend(query[:, :, s.start : s.start + s.length], k, v, scaling)
        for s, (k, v) in zip(packed.segments, packed.kv.pop(module.layer_idx))
    ]
    out = parts[0] if len(parts) == 1 else torch.cat(parts, dim=2)
    return out.transpose(1, 2).contiguous(), None


def one_query(query, key, value, scaling):
    """Attention of one query position over all of `key`: query heads grouped per key/value head."""
    import torch.nn.functional as F

    batch, heads, _, dim = query.shape
    kv_heads = key.shape[1]
    grouped = query.reshape(batch, kv_heads, heads // kv_heads, dim)
    out = F.scaled_dot_product_attention(grouped, key, value, scale=scaling)
    return out.reshape(batch, heads, 1, value.shape[-1])


def _attend(query, key, value, scaling):
    """One segment: its `n` queries are the last `n` positions of `key` (causal, aligned at the end)."""
    import torch
    import torch.nn.functional as F

    n, total = query.shape[2], key.shape[2]
    if n == 1:
        return one_query(query, key, value, scaling)
    grouped = {}
    if query.shape[1] != key.shape[1]:
        if _torch_has_gqa():
            grouped = {"enable_gqa": True}  # no copy of the keys per query head
        else:
            group = query.shape[1] // key.shape[1]
            key, value = (t.repeat_interleave(group, dim=1) for t in (key, value))
    if n == total:
        return F.scaled_dot_product_attention(query, key, value, is_causal=True, scale=scaling, **grouped)
    mask = torch.ones(n, total, dtype=torch.bool, device=query.device).tril(total - n)
    return F.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=scaling, **grouped)


@functools.cache
def _torch_has_gqa() -> bool:
    """torch >= 2.5: `scaled_dot_product_attention(enable_gqa=)`."""
    import torch

    return tuple(int(x) for x in torch.__version__.split(".")[:2]) >= (2, 5)


_registered = False


def install(model) -> bool:
    """Switch `model` to the packed attention (identical to sdpa outside packed passes); False when it
    cannot be: another attention implementation was chosen, or the model does not dispatch attention
    through transformers' interface."""
    global _registered
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    if model.config._attn_implementation == NAME:
        return True
    if model.config._attn_implementation != "sdpa" or not model._can_set_attn_implementation():
        return False
    if not _registered:
        AttentionInterface.register(NAME, attention)
        ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, sdpa_mask)  # outside packed passes: sdpa's masks
        _registered = True
    model.set_attn_implementation(NAME)
    return model.config._attn_implementation == NAME
