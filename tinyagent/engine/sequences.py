"""Which llama.cpp sequence a prompt continues: the kept conversations of one context's KV cache.

Each sequence is a conversation kept between calls. A prompt goes to the sequence sharing the longest
token prefix with it, as `kept_prefixes.KeptPrefixes` decides for transformers:
- the same conversation going on (the sequence diverges only in its last `CONTINUATION_TAIL`
  tokens) takes the sequence over, cut back to the shared part;
- another conversation with the same start (the system prompt, the tools) gets a free sequence (or
  the least recently used one) holding a copy of the shared part, if at least `copy_min` tokens, and
  the first sequence stays for its owner.
A sequence a call is generating into is busy: it is never given to another call nor dropped, though
its start may be copied.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

from .kept_prefixes import CONTINUATION_TAIL
from .prefix_cache import common_prefix_length


class SequencePool:
    """`size` sequences over one cache. `remove(seq, start)` and `copy(source, target, tokens)` act on the
    cache; the pool tracks the token ids each sequence holds and which are busy. Not thread-safe: one
    thread (the scheduler's) uses it at a time."""

    def __init__(
        self, size: int, remove: Callable[[int, int], None], copy: Callable[[int, int, int], None], copy_min: int = 1
    ):
        self.size, self._remove, self._copy, self.copy_min = max(1, size), remove, copy, copy_min
        self.held: OrderedDict[int, list[int]] = OrderedDict((seq, []) for seq in range(self.size))  # LRU first
        self.busy: set[int] = set()
        self._forget: set[int] = set()  # busy sequences cleared meanwhile: dropped when released
        self.shared_tokens = 0  # tokens a conversation got from another's sequence (computed once, used twice)

    def shared(self, ids: list[int], leave: int = 1) -> int:
        """How many of `ids` (at most all but `leave`) some sequence holds already."""
        return max((min(common_prefix_length(kept, ids), len(ids) - leave) for kept in self.held.values()), default=0)

    def take(self, ids: list[int], reuse: bool = True, leave: int = 1) -> tuple[int, int] | None:
        """(sequence, reused): an idle sequence to feed `ids` into, now busy, holding their first `reused`
        tokens (at least `leave` of them, or all, are left to feed); None when every sequence is busy."""
        best, shared = None, 0
        for seq, kept in self.held.items() if reuse else ():
            n = min(common_prefix_length(kept, ids), len(ids) - leave)
            if n > shared:
                best, shared = seq, n
        if (
            best is not None
            and best not in self.busy
            and (len(self.held[best]) - shared <= CONTINUATION_TAIL or self.size == 1)
        ):
            target = best
            self._remove(target, shared)
        else:
            if shared < self.copy_min:  # too little to be worth a copy: computed again
                best, shared = None, 0
            idle = [seq for seq in self.held if seq not in self.busy and seq != best]
            target = next((seq for seq in idle if not self.held[seq]), idle[0] if idle else None)
            if target is None:
                return None
            if best is None:
                self._remove(target, 0)
            else:
                self._copy(best, target, shared)
                self.shared_tokens += shared
        self.held[target] = ids[:shared]
        self.held.move_to_end(target)
        self.busy.add(target)
        return target, shared

    def extend(self, seq: int, tokens: list[int]) -> None:
        """Record that `tokens` were fed into `seq` after what it held."""
        self.held[seq] = self.held[seq] + list(tokens)

    def release(self, seq: int, keep: bool = True) -> None:
        """The call using `seq` ended: it stays as a kept conversation (unless `keep` is False, or the pool
        was cleared meanwhile) for a later call to continue."""
        self.busy.discard(seq)
        if not keep or seq in self._forget:
            self.drop(seq)
        self._forget.discard(seq)

    def drop(self, seq: int) -> None:
        """Forget the sequence (after a failure: its cells may hold part of a chunk)."""
        self._remove(seq, 0)
        self.held[seq] = []

    def clear(self) -> None:
        """Drop every idle sequence; busy ones are dropped when their call ends."""
        for seq in self.held:
            if seq in self.busy:
                self._forget.add(seq)
            else:
                self.drop(seq)
