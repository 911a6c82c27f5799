"""Kept KV prefixes for many conversations at once: an LRU of (token ids, batch-1 cache) entries.

Each agent's cache stays between its steps, so its next step feeds only the new tokens. A new
request starts from the entry sharing the longest token prefix with it:
- the same conversation going on (the entry diverges only in its last `CONTINUATION_TAIL`
  tokens, e.g. a stop string re-tokenised) takes the entry over, cropped: no copy;
- another conversation with the same start (the system prompt, the tools, even the question)
  gets a copy of the shared part, and the entry stays for its owner.
So a shared system prompt is computed once, though each agent holds its own copy: a request's
attention reads its cache as one tensor per layer (packed.py), with no blocks that two
requests could share. Only full-attention `DynamicLayer` caches are kept here (see
`batching.supports`).
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from .prefix_cache import common_prefix_length

CONTINUATION_TAIL = 16  # tokens an entry may lose at its end and still count as the same conversation


class KeptPrefixes:
    """At most `size` kept caches, least recently used dropped first (0 keeps nothing)."""

    def __init__(self, model, size: int, rope_limit: int | None = None):
        self.model, self.size, self.rope_limit = model, size, rope_limit  # no reuse past rope_limit
        self._entries: OrderedDict[int, tuple[list[int], object]] = OrderedDict()
        self._next = 0
        self._lock = threading.Lock()
        self.shared_tokens = 0  # tokens copied from another conversation's entry (computed once, used twice)

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def _best(self, ids: list[int]) -> tuple[int | None, int]:
        """(key, tokens) of the entry sharing the longest start with `ids` (leaving at least one of them)."""
        best, shared = None, 0
        for key, (kept, _) in self._entries.items():
            if self.rope_limit is not None and max(len(kept), len(ids)) > self.rope_limit:
                continue  # keys cached at another rope base than a fresh prefill would use
            n = min(common_prefix_length(kept, ids), len(ids) - 1)
            if n > shared:
                best, shared = key, n
        return best, shared

    def longest(self, ids: list[int]) -> int:
        """How many tokens of `ids` `take` would give now."""
        with self._lock:
            return self._best(ids)[1]

    def take(self, ids: list[int]):
        """(cache, reused): a batch-1 cache holding the first `reused` tokens of `ids` (at least one is left)."""
        from transformers import DynamicCache

        with self._lock:
            best, shared = self._best(ids)
            if best is None:
                return DynamicCache(config=self.model.config), 0
            kept, cache = self._entries[best]
            if len(kept) - shared <= CONTINUATION_TAIL:
                del self._entries[best]
                if shared < len(kept):
                    cache.crop(shared - len(kept))
                return cache, shared
            self.shared_tokens += shared
            self._entries.move_to_end(best)
            return copy_start(cache, shared, self.model.config), shared

    def put(self, ids: list[int], cache) -> None:
        """Keep `cache`, which holds exactly `ids`; entries holding only a start of `ids` are dropped."""
        if self.size <= 0 or not ids:
            return
        with self._lock:
            for key in [k for k, (kept, _) in self._entries.items() if ids[: len(kept)] == kept]:
                del self._entries[key]
            self._entries[self._next] = (ids, cache)
            self._next += 1
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)


def copy_start(cache, tokens: int, config):
    """A new batch-1 `DynamicCache` holding a copy of the first `tokens` positions of `cache`."""
    return cache_of(((layer.keys[:, :, :tokens], layer.values[:, :, :tokens]) for layer in cache.layers), config)


def cache_of(layers, config):
    """A new `DynamicCache` holding copies of `layers`, one (keys, values) pair per layer."""
    from transformers import DynamicCache

    copy = DynamicCache(config=config)
    for index, (keys, values) in enumerate(layers):
        copy.update(keys.clone(), values.clone(), index)
    return copy
