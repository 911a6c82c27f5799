"""A ReAct reply pattern compiled into a token automaton for one tokenizer, with per-state budgets.

outlines-core (the engine of outlines, the optional `constrained` extra) compiles the regex of a
reply (`format.step_format.pattern_of`) into an index over the tokenizer's vocabulary. Each state
also gets the fewest tokens to the end of its line and of the reply, computed once, so the
decoder (`constrained.py`) can keep every reply complete within its budgets. Compiling takes
seconds; it is done once per (tokenizer, pattern) and cached.
"""

from __future__ import annotations

import functools
import logging
import re
import threading
import time
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

from ..format.step_format import require_outlines

log = logging.getLogger(__name__)

#: () -> (the bytes of each ordinary token id, the end-of-sequence id): a vocabulary not read from a tokenizer
Pieces = Callable[[], tuple[dict[int, bytes], int | None]]
MAX_PATTERNS = 16  # compiled patterns kept per tokenizer (one per tool set, plus the forced answer)


@dataclass
class Vocabulary:
    """A tokenizer's vocabulary as the automaton sees it: the text of each token id."""

    core: object  # outlines_core.Vocabulary (special tokens left out: they are never text)
    texts: list[str]  # token id -> its text (U+FFFD for part of a character); "" for special tokens
    patterns: OrderedDict = field(default_factory=OrderedDict)  # pattern -> CompiledPattern
    stop_candidates: dict = field(default_factory=dict)  # stop strings -> token ids that may end one


@dataclass
class CompiledPattern:
    """A pattern's automaton and, per state, its tokens and the fewest tokens to the end of the line / reply.

    States are numbered 0..n-1 here (`engine_states[i]` is the engine's id of state i).
    """

    index: object  # outlines_core.Index
    engine_states: list[int]
    initial: int
    final: object  # numpy bool per state: the reply may end here
    tokens: list  # per state: numpy array of the token ids allowed (end-of-turn aside)
    targets: list  # per state: numpy array of the state each of those tokens leads to
    ends_line: list  # per state: numpy bool per token, True when its text holds a newline
    to_final: object  # numpy int per state: fewest tokens to reach a final state
    to_line_end: object  # numpy int per state: fewest tokens to end the line (newline or end of turn)
    worst_to_final: object  # numpy int per state: the largest to_final among its next states
    worst_to_line_end: object  # the same for to_line_end, over tokens without a newline
    seconds: float  # how long compiling took
    masks: dict = field(default_factory=dict)  # (state, end ids, width[, device]) -> numpy [torch] mask, True = masked


_vocabularies: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # tokenizer -> {markers: Vocabulary}
_lock = threading.Lock()  # compiling takes seconds: one thread compiles, the others wait for its result


def compile_pattern(
    tokenizer, pattern: str, markers: tuple[str, ...] = (), pieces: Pieces | None = None
) -> tuple[Vocabulary, CompiledPattern]:
    """The compiled automaton of `pattern` for `tokenizer`, from the cache when it was built before.

    `tokenizer` is a transformers tokenizer, or any object that keys the cache when `pieces` gives
    its vocabulary (a llama.cpp model: see `engine.llama_runtime.token_pieces`). `markers`: special
    tokens the pattern writes as text (a tool call's `[TOOL_CALLS]`), kept in a tokenizer's vocabulary.
    """
    require_outlines()
    with _lock:
        by_markers = _vocabularies.setdefault(tokenizer, {})
        vocab = by_markers.get(markers)
        if vocab is None:
            built = pieces() if pieces is not None else (token_bytes(tokenizer, markers), tokenizer.eos_token_id)
            vocab = by_markers[markers] = _build_vocabulary(*built)
        compiled = vocab.patterns.get(pattern)
        if compiled is None:
            compiled = vocab.patterns[pattern] = _compile(vocab, pattern)
            while len(vocab.patterns) > MAX_PATTERNS:
                vocab.patterns.popitem(last=False)
        vocab.patterns.move_to_end(pattern)
        return vocab, compiled


def token_bytes(tokenizer, markers: tuple[str, ...] = ()) -> dict[int, bytes]:
    """The exact bytes each ordinary (not special) token id writes, so the automaton is byte-exact
    and a character split over several tokens is always finished; special tokens in `markers` write
    their text.

    Byte-level BPE vocabularies (GPT-2's alphabet) map back char by char; sentencepiece ones
    write "▁" for a space and <0xXX> for a raw byte; any other vocabulary uses the decoded text.
    """
    special = set(tokenizer.all_special_tokens)
    special |= {t.content for t in getattr(tokenizer, "added_tokens_decoder", {}).values() if t.special}
    special -= set(markers)
    added = set(getattr(tokenizer, "added_tokens_encoder", {})) - special
    tokens = {t: i for t, i in tokenizer.get_vocab().items() if t not in special}
    plain = [t for t in tokens if t not in added]
    byte_of = _byte_level_alphabet()
    if all(ch in byte_of for t in plain for ch in t):

        def to_bytes(t: str) -> bytes:
            return bytes(byte_of[ch] for ch in t)
    elif any("▁" in t for t in plain):

        def to_bytes(t: str) -> bytes:
            raw = _RAW_BYTE.fullmatch(t)
            return bytes([int(raw.group(1), 16)]) if raw else t.replace("▁", " ").encode()
    else:

        def to_bytes(t: str) -> bytes:
            return tokenizer.convert_tokens_to_string([t]).encode()

    pieces = {i: t.encode() if t in added else to_bytes(t) for t, i in tokens.items()}
    return {i: piece for i, piece in pieces.items() if piece}


_RAW_BYTE = re.compile(r"<0x([0-9A-Fa-f]{2})>")


@functools.lru_cache(maxsize=1)
def _byte_level_alphabet() -> dict[str, int]:
    """GPT-2's byte-level BPE alphabet: the character that stands for each byte."""
    kept = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {b: chr(b) for b in kept}, 0
    for b in range(256):
        if b not in chars:
            chars[b], extra = chr(256 + extra), extra + 1
    return {ch: b for b, ch in chars.items()}


def _build_vocabulary(pieces: dict[int, bytes], eos: int | None) -> Vocabulary:
    from outlines_core import Vocabulary as CoreVocabulary

    texts = [""] * (max(pieces, default=0) + 1)
    by_piece: dict[bytes, list[int]] = {}
    for token_id, piece in pieces.items():
        texts[token_id] = piece.decode("utf-8", errors="replace")
        by_piece.setdefault(piece, []).append(token_id)
    return Vocabulary(CoreVocabulary(eos if eos is not None else len(texts), by_piece), texts)


def _compile(vocab: Vocabulary, pattern: str) -> CompiledPattern:
    import numpy as np
    from outlines_core import Index

    started = time.perf_counter()
    index = Index(pattern, vocab.core)
    transitions = index.get_transitions()
    engine_states = sorted(transitions.keys() | index.get_final_states())
    number = {state: i for i, state in enumerate(engine_states)}
    eos = vocab.core.get_eos_token_id()
    tokens, targets, ends_line = [], [], []
    for state in engine_states:
        moves = {t: number[to] for t, to in transitions.get(state, {}).items() if t != eos}
        ids = np.fromiter(moves.keys(), dtype=np.int64, count=len(moves))
        tokens.append(ids)
        targets.append(np.fromiter(moves.values(), dtype=np.int64, count=len(moves)))
        ends_line.append(np.fromiter(("\n" in vocab.texts[t] for t in ids.tolist()), dtype=bool, count=len(ids)))
    final = np.zeros(len(engine_states), dtype=bool)
    final[[number[s] for s in index.get_final_states()]] = True
    in_line = [t[~e] for t, e in zip(targets, ends_line)]
    to_final = _fewest_tokens(targets, final, 0)
    to_line_end = _fewest_tokens(in_line, final | np.array([e.any() for e in ends_line], dtype=bool), 1)
    compiled = CompiledPattern(
        index,
        engine_states,
        number[index.get_initial_state()],
        final,
        tokens,
        targets,
        ends_line,
        to_final,
        to_line_end,
        np.array([to_final[t].max(initial=0) for t in targets]),
        np.array([to_line_end[t].max(initial=0) for t in in_line]),
        time.perf_counter() - started,
    )
    log.info(
        "compiled a constrained-decoding pattern (%d characters, %d states) in %.2f s",
        len(pattern),
        len(engine_states),
        compiled.seconds,
    )
    return compiled


def _fewest_tokens(targets: list, sources, at_source: int):
    """Per state, the fewest tokens to reach a state in `sources` (which count `at_source`), by a
    breadth-first search backwards over the transitions; a huge number where none can be reached."""
    import numpy as np

    unreachable = np.iinfo(np.int64).max // 4
    fewest = np.full(len(targets), unreachable, dtype=np.int64)
    before: list[set[int]] = [set() for _ in targets]
    for state, nexts in enumerate(targets):
        for to in np.unique(nexts).tolist():
            before[to].add(state)
    queue = deque(np.flatnonzero(sources).tolist())
    fewest[list(queue)] = at_source
    while queue:
        state = queue.popleft()
        for earlier in before[state]:
            if fewest[earlier] == unreachable:
                fewest[earlier] = fewest[state] + 1
                queue.append(earlier)
    return fewest
