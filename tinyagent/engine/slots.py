"""The decoding requests' KV caches side by side, so that one attention call serves them all.

Per layer, one keys tensor and one values tensor of shape [slots, kv_heads, room, dim]; a decoding
request owns a slot and its cache is `[slot, :, :length]`. At each step every decoding request's
new key and value go in at its own length (one indexed write per layer), and one attention call
over the slots in use, up to the longest, masked past each slot's length, gives every request its
output. That is a fixed number of kernels per layer whatever the batch, where a loop over requests
launches several per request (on a GPU, more time than the attention itself). The price is reading
the masked columns up to the longest request, and one copy of a request's cache when it starts
decoding (`add`) and when it ends (`take_out`, for the kept prefixes).

On a CPU the kernels cost little to start and attention is bound by reading each request's keys,
so there (`one_by_one`) each request attends over exactly its own length instead: 8 agents of the
benchmark (bench/README.md) ran 78 s with the one masked call against 61 s one by one.
"""

from __future__ import annotations

from dataclasses import dataclass

from .kept_prefixes import cache_of
from .packed import one_query, room_for


@dataclass
class DecodeStep:
    """One pass's one-token step for the decoding requests in `slots` (tensors on the pool's device)."""

    slots: object  # long [n]: each request's slot, in the row's order
    positions: object  # long [n]: where each request's new key goes (its length before the step)
    mask: object  # bool [rows, 1, 1, width]: what each slot's query may read
    rows: int  # slots 0..rows-1 take part (free ones among them with a dummy column)
    width: int  # the longest slot after the step
    count: int  # len(slots)
    dense: bool  # slots are exactly 0..rows-1 in order: the queries need no scatter
    each: list  # (slot, length after the step) per request, for attending one by one


class SlotPool:
    """Slots of KV cache for the decoding requests of one model (see the module docstring)."""

    def __init__(self, layers: int, max_rows: int, one_by_one: bool = False):
        self.layers, self.max_rows, self.one_by_one = layers, max_rows, one_by_one
        self.keys: list = []
        self.values: list = []
        self.lengths: list[int] = []  # per slot
        self.used: list[bool] = []

    def add(self, cache) -> int:
        """Copy a batch-1 `DynamicCache` into a free slot; returns the slot."""
        length = cache.get_seq_length()
        slot = self.used.index(False) if False in self.used else len(self.used)
        if slot == len(self.used):
            self.used.append(False)
            self.lengths.append(0)
        self._ensure(slot + 1, length + 1, cache.layers[0].keys)
        for index, layer in enumerate(cache.layers):
            self.keys[index][slot, :, :length] = layer.keys[0]
            self.values[index][slot, :, :length] = layer.values[0]
        self.used[slot], self.lengths[slot] = True, length
        return slot

    def take_out(self, slot: int, length: int, config):
        """A new batch-1 `DynamicCache` holding a copy of the slot's first `length` positions."""
        return cache_of(
            (
                (keys[slot : slot + 1, :, :length], values[slot : slot + 1, :, :length])
                for keys, values in zip(self.keys, self.values)
            ),
            config,
        )

    def release(self, slot: int) -> None:
        self.used[slot], self.lengths[slot] = False, 0
        if not any(self.used):  # nobody decodes: give the memory back
            self.keys, self.values, self.lengths, self.used = [], [], [], []

    def step(self, slots: list[int]) -> DecodeStep:
        """Reserve one position in each of `slots` for this pass (their lengths grow by one)."""
        import torch

        positions = [self.lengths[s] for s in slots]
        for s in slots:
            self.lengths[s] += 1
        rows = max(i for i, used in enumerate(self.used) if used) + 1
        width = max(self.lengths[:rows])
        self._ensure(rows, width, self.keys[0])
        device = self.keys[0].device
        readable = torch.tensor(
            [n if used else 1 for n, used in zip(self.lengths[:rows], self.used[:rows])], device=device
        )  # a free slot reads one stale column: finite, and thrown away
        mask = torch.arange(width, device=device)[None, :] < readable[:, None]
        return DecodeStep(
            torch.tensor(slots, device=device),
            torch.tensor(positions, device=device),
            mask[:, None, None, :],
            rows,
            width,
            len(slots),
            slots == list(range(rows)),
            [(s, self.lengths[s]) for s in slots],
        )

    def write(self, layer: int, step: DecodeStep, keys, values) -> None:
        """Put the step's new keys and values ([1, kv_heads, n, dim], in the row's order) in their slots."""
        self.keys[layer][step.slots, :, step.positions] = keys[0].transpose(0, 1)
        self.values[layer][step.slots, :, step.positions] = values[0].transpose(0, 1)

    def attend(self, layer: int, step: DecodeStep, query, scaling):
        """Attention output [1, heads, n, dim] of the step's queries ([1, heads, n, dim], one per request)."""
        import torch.nn.functional as F

        if self.one_by_one:  # each request over exactly its own length: no masked columns, a kernel each
            import torch

            keys, values = self.keys[layer], self.values[layer]
            return torch.cat(
                [
                    one_query(query[:, :, i : i + 1], keys[s : s + 1, :, :n], values[s : s + 1, :, :n], scaling)
                    for i, (s, n) in enumerate(step.each)
                ],
                dim=2,
            )
        keys = self.keys[layer][: step.rows, :, : step.width]
        values = self.values[layer][: step.rows, :, : step.width]
        heads, dim, kv_heads = query.shape[1], query.shape[-1], keys.shape[1]
        grouped = query[0].transpose(0, 1).reshape(step.count, kv_heads, heads // kv_heads, dim)
        if step.dense:
            full = grouped
        else:
            full = grouped.new_zeros(step.rows, kv_heads, heads // kv_heads, dim)
            full[step.slots] = grouped
        out = F.scaled_dot_product_attention(full, keys, values, attn_mask=step.mask, scale=scaling)
        if full is not grouped:
            out = out[step.slots]
        return out.reshape(step.count, heads, values.shape[-1]).transpose(0, 1)[None]

    def _ensure(self, rows: int, room: int, like) -> None:
        """Grow every layer's tensors to at least `rows` slots and `room` positions (copying what they hold)."""
        have_rows, have_room = (self.keys[0].shape[0], self.keys[0].shape[2]) if self.keys else (0, 0)
        if rows <= have_rows and room <= have_room:
            return
        rows = max(rows, min(2 * have_rows, self.max_rows)) if rows > have_rows else have_rows
        room = room_for(room) if room > have_room else have_room
        shape = (rows, like.shape[1], room, like.shape[-1])
        for tensors in (self.keys, self.values):
            for index in range(self.layers):
                grown = like.new_zeros(shape)
                if index < len(tensors):
                    old = tensors[index]
                    grown[: old.shape[0], :, : old.shape[2]] = old
                    tensors[index] = grown
                else:
                    tensors.append(grown)
