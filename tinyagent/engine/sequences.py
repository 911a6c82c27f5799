"""Which llama.cpp sequence a prompt continues: the kept conversations of one context's KV cache.

llama.cpp keeps several sequences in one cache; a cell may belong to several of them, so a start
two conversations share (the system prompt, the tools) is computed once and held once. A prompt
goes to the sequence sharing the longest token prefix with it, as `kept_prefixes.KeptPrefixes`
decides for transformers:
- the same conversation going on (the sequence diverges only in its last `CONTINUATION_TAIL`
  tokens) takes the sequence over, cut back to the shared part;
- another conversation with the same start gets a free sequence (or the least recently used one)
  holding the shared part, and the first sequence stays for its owner.
When the cache has no free cell, the least recently used other sequences are dropped one by one.
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

from .kept_prefixes import CONTINUATION_TAIL
from .prefix_cache import common_prefix_length


class SequencePool:
    """`size` sequences over one cache. `remove(seq, start)` and `copy(source, target, tokens)` act on the
    cache; the pool tracks the token ids each sequence holds. Not thread-safe: one caller at a time."""

    def __init__(self, size: int, remove: Callable[[int, int], None], copy: Callable[[int, int, int], None]):
        self.size, self._remove, self._copy = max(1, size), remove, copy
        self.held: OrderedDict[int, list[int]] = OrderedDict((seq, []) for seq in range(self.size))  # LRU first
        self.shared_tokens = 0  # tokens a conversation got from another's sequence (computed once, used twice)

    def take(self, ids: list[int], reuse: bool = True, leave: int = 1) -> tuple[int, int]:
        """(sequence, reused): the sequence to feed `ids` into, holding their first `reused` tokens (at least
        `leave` of them, or all, are left to feed)."""
        best, shared = None, 0
        for seq, kept in self.held.items() if reuse else ():
            n = min(common_prefix_length(kept, ids), len(ids) - leave)
            if n > shared:
                best, shared = seq, n
        if best is not None and (len(self.held[best]) - shared <= CONTINUATION_TAIL or self.size == 1):
            target = best
            self._remove(target, shared)
        else:
            target = next(iter(seq for seq, kept in self.held.items() if not kept), None)
            if target is None:  # the least recently used sequence that is not the one to copy from
                target = next(seq for seq in self.held if seq != best)
            if best is None:
                self._remove(target, 0)
            else:
                self._copy(best, target, shared)
                self.shared_tokens += shared
        self.held[target] = ids[:shared]
        self.held.move_to_end(target)
        return target, shared

    def extend(self, seq: int, tokens: list[int]) -> None:
        """Record that `tokens` were fed into `seq` after what it held."""
        self.held[seq] = self.held[seq] + list(tokens)

    def drop(self, seq: int) -> None:
        """Forget the sequence (after a failure: its cells may hold part of a chunk)."""
        self._remove(seq, 0)
        self.held[seq] = []

    def clear(self) -> None:
        for seq in self.held:
            self.drop(seq)

    def evict(self, keep: int) -> bool:
        """Drop the least recently used sequence other than `keep` that holds anything; False when none does."""
        seq = next((s for s, kept in self.held.items() if s != keep and kept), None)
        if seq is None:
            return False
        self.drop(seq)
        return True
