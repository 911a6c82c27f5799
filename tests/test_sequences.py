"""SequencePool: which llama.cpp sequence a prompt continues, with sequences busy while a call generates into
them (never given to another call, never dropped, though their start may be shared)."""

from __future__ import annotations

from tinyagent.engine.prefix_cache import common_prefix_length
from tinyagent.engine.sequences import SequencePool


class Cache:
    """What the pool asks of llama.cpp, recorded: the positions each sequence holds."""

    def __init__(self):
        self.log = []

    def remove(self, seq, start):
        self.log.append(("remove", seq, start))

    def copy(self, source, target, tokens):
        self.log.append(("copy", source, target, tokens))


def pool(size=3):
    cache = Cache()
    return SequencePool(size, cache.remove, cache.copy), cache


def test_a_conversation_going_on_takes_its_sequence_over_once_it_is_idle():
    p, cache = pool()
    seq, reused = p.take(list(range(10)))
    assert reused == 0 and p.busy == {seq}
    p.extend(seq, list(range(10)))
    assert p.take(list(range(14))) == (1, 10)  # busy: another sequence gets a copy of the shared start
    assert cache.log[-1] == ("copy", seq, 1, 10) and p.shared_tokens == 10
    p.release(seq)
    p.release(1)
    assert p.take(list(range(20)), leave=2) == (seq, 10)  # idle again: the same conversation goes on in it
    assert cache.log[-1] == ("remove", seq, 10)


def test_busy_sequences_are_never_taken_nor_cleared():
    p, cache = pool(2)
    a = p.take([1, 2, 3])[0]
    b = p.take([7, 8, 9])[0]
    assert p.take([4, 5, 6]) is None  # every sequence busy: the call waits
    p.extend(a, [1, 2, 3])
    p.clear()
    assert p.held[a] == [1, 2, 3]  # cleared when its call ends, not under it
    p.release(a)
    assert p.held[a] == []
    p.release(b, keep=False)
    assert p.held[b] == [] and not p.busy


def test_a_short_shared_start_is_computed_again_not_copied():
    p, cache = pool(2)
    p.copy_min = 5
    held = list(range(1, 31))
    a = p.take(held)[0]
    p.extend(a, held)
    p.release(a)
    assert p.take([1, 2, 3, 99, 99]) == (1, 0)  # another conversation sharing 3 < 5 tokens: computed again
    assert not any(entry[0] == "copy" for entry in cache.log)
    p.release(1)
    assert p.take(list(range(1, 7)) + [99] * 5) == (1, 6)  # sharing 6: copied
    assert cache.log[-1] == ("copy", a, 1, 6)


def test_a_failed_or_unkept_call_leaves_nothing_behind():
    p, cache = pool(1)
    seq, _ = p.take([1, 2, 3])
    p.extend(seq, [1, 2])
    p.release(seq, keep=False)
    assert p.held[seq] == [] and ("remove", seq, 0) in cache.log and not p.busy


def test_common_prefix_length_matches_a_plain_loop():
    import random

    rng = random.Random(0)
    for _ in range(3000):
        a = [rng.randint(0, 2) for _ in range(rng.randint(0, 40))]
        b = a[: rng.randint(0, len(a))] + [rng.randint(0, 2) for _ in range(rng.randint(0, 5))]
        expected = 0
        while expected < min(len(a), len(b)) and a[expected] == b[expected]:
            expected += 1
        assert common_prefix_length(a, b) == expected == common_prefix_length(tuple(a), b)
