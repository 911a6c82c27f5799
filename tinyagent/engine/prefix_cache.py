"""KV-cache reuse across calls: keep the last call's cache and reuse the longest prefix that is exact.

Within one agent run the prompt only grows, so most of each prompt was already through the model
at the previous call. What may be reused is decided from the cache objects, not the model name:
- full-attention layers crop exactly to any length;
- sliding-window layers keep only the last `window - 1` tokens after a crop, so (with past
  recording on, which keeps everything until the crop) they crop exactly to any length at or
  after the last cut past the window, and never before it;
- layers that cannot be rolled back (recurrent state, quantised) are reused only when nothing
  must be cropped;
- rope whose frequencies depend on the sequence length (dynamic NTK, LongRoPE) is never reused
  past the length where they start to change.
Anything not exact is recomputed: reuse never changes a token.
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


def common_prefix_length(a: list[int], b: list[int]) -> int:
    """How many leading items `a` and `b` share (slices compared in C, halving: linear, not a Python loop)."""
    if type(a) is not type(b):  # a list never equals a tuple
        a, b = list(a), list(b)
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    low, high = 0, n  # a[:low] == b[:low]; a[:high] != b[:high]
    while high - low > 1:
        middle = (low + high) // 2
        if a[low:middle] == b[low:middle]:
            low = middle
        else:
            high = middle
    return low


def length_dependent_rope_limit(config) -> int | None:
    """The length past which the model's rope frequencies depend on the sequence length (dynamic NTK,
    LongRoPE), so cached keys stop matching a fresh prefill; None when they never do."""
    rope = getattr(config, "rope_parameters", None) or {}
    per_layer_type = [r for r in rope.values() if isinstance(r, dict)]  # e.g. Gemma-3: sliding / full
    limits = [
        r.get("original_max_position_embeddings") or config.max_position_embeddings
        for r in per_layer_type or [rope]
        if r.get("rope_type") in ("dynamic", "longrope")
    ]
    return min(limits) if limits else None


def sliding_windows(cache) -> list[int]:
    """The window of each sliding-window (or chunked) layer of `cache`."""
    return [
        int(layer.sliding_window)
        for layer in getattr(cache, "layers", ())
        if getattr(layer, "is_sliding", False) and getattr(layer, "sliding_window", None)
    ]


class PrefixCache:
    """The kept KV cache, the token ids it holds, and how far back it can be cropped exactly.

    `prepare(ids)` gives the cache to pass to `generate` and how many leading tokens of `ids` it
    already holds; `keep(cache, sequence)` stores it after a call; `clear()` forgets it (after an
    error, or to free memory).
    """

    def __init__(self, model, enabled: bool = True):
        self.model = model
        self.enabled = enabled
        self.rope_limit = length_dependent_rope_limit(model.config.get_text_config())
        self.clear()

    def clear(self) -> None:
        self.cache = None
        self.ids: list[int] = []
        self.floor = 0  # the shortest length the cache can be cropped back to exactly

    def reusable(self, ids: list[int]) -> int:
        """How many leading tokens of `ids` the kept cache can give exactly (at least one is left to feed)."""
        if not self.enabled or self.cache is None:
            return 0
        if self.rope_limit is not None and max(len(self.ids), len(ids)) > self.rope_limit:
            return 0
        shared = min(common_prefix_length(self.ids, ids), len(ids) - 1)
        if shared == len(self.ids):
            return shared  # nothing to crop
        if not self.cache.is_croppable or shared < self.floor:
            return 0
        return shared

    def prepare(self, ids: list[int]):
        """(cache, reused): the kept cache cut back to what `ids` shares with it, or a new cache."""
        reused = self.reusable(ids)
        if reused == 0:
            from transformers import DynamicCache

            self.clear()
            cache = DynamicCache(config=self.model.config)
        else:
            cache, before = self.cache, len(self.ids)
            if reused < before:
                cache.crop(reused - before)
                if any(before >= w and reused >= w for w in sliding_windows(cache)):
                    self.floor = reused  # older tokens left the sliding windows for good
            self.ids = self.ids[:reused]
        cache.activate_past_recording()  # sliding layers keep every token until the next crop
        return cache, reused

    def keep(self, cache, sequence: list[int]) -> None:
        """Remember `cache` after a call that produced `sequence` (prompt and new tokens)."""
        if self.enabled:
            self.cache, self.ids = cache, sequence[: cache.get_seq_length()]
