"""Constrained ReAct decoding for local transformers models, built on outlines (the optional extra).

`format.step_format` writes one reply as a regular expression; outlines-core (the engine of outlines)
turns each tool's JSON schema into the regex of its arguments and compiles the whole pattern into a
token automaton for the model's vocabulary. Compiling is done once per (tokenizer, pattern) and
cached; each `generate` call gets its own `StepProcessor`, which walks the automaton and masks the
logits of every token that would leave the format.

Three more rules make every reply complete and finite, whatever the weights prefer:
- the line budget: once a line has used `max_line_tokens` tokens, only tokens on a shortest way
  to the end of that line remain (a newline after a thought, the rest of the JSON object, the end);
- the reply budget: no token is allowed after which the reply could not be finished within what
  is left of `max_new_tokens`;
- no token may complete a stop string, so a stop string never cuts a reply short.
The budgets use, per automaton state, the fewest tokens to the end of the line and of the reply,
computed once when the pattern is compiled.
"""
from __future__ import annotations

import bisect
import functools
import logging
import re
import threading
import time
import weakref
from collections import OrderedDict, deque
from dataclasses import dataclass, field

from ..format.step_format import StepFormat, pattern_of, require_outlines

log = logging.getLogger(__name__)

MAX_PATTERNS = 16  # compiled patterns kept per tokenizer (one per tool set, plus the forced answer)


# --- compiling ----------------------------------------------------------------------------------

@dataclass
class Vocabulary:
    """A tokenizer's vocabulary as the automaton sees it: the text of each token id."""

    core: object          # outlines_core.Vocabulary (special tokens left out: they are never text)
    texts: list[str]      # token id -> its text (U+FFFD for part of a character); "" for special tokens
    patterns: OrderedDict = field(default_factory=OrderedDict)  # pattern -> CompiledPattern
    stop_candidates: dict = field(default_factory=dict)         # stop strings -> token ids that may end one


@dataclass
class CompiledPattern:
    """A pattern's automaton and, per state, its tokens and the fewest tokens to the end of the line / reply.

    States are numbered 0..n-1 here (`engine_states[i]` is the engine's id of state i).
    """

    index: object                 # outlines_core.Index
    engine_states: list[int]
    initial: int
    final: object                 # numpy bool per state: the reply may end here
    tokens: list                  # per state: numpy array of the token ids allowed (end-of-turn aside)
    targets: list                 # per state: numpy array of the state each of those tokens leads to
    ends_line: list               # per state: numpy bool per token, True when its text holds a newline
    to_final: object              # numpy int per state: fewest tokens to reach a final state
    to_line_end: object           # numpy int per state: fewest tokens to end the line (newline or end of turn)
    worst_to_final: object        # numpy int per state: the largest to_final among its next states
    worst_to_line_end: object     # the same for to_line_end, over tokens without a newline
    seconds: float                # how long compiling took
    masks: dict = field(default_factory=dict)  # (state, end ids, width, device) -> bool tensor, True = masked


_vocabularies: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # tokenizer -> Vocabulary
_lock = threading.Lock()  # compiling takes seconds: one thread compiles, the others wait for its result


def compile_pattern(tokenizer, pattern: str) -> tuple[Vocabulary, CompiledPattern]:
    """The compiled automaton of `pattern` for `tokenizer`, from the cache when it was built before."""
    require_outlines()
    with _lock:
        vocab = _vocabularies.get(tokenizer)
        if vocab is None:
            vocab = _vocabularies[tokenizer] = _build_vocabulary(tokenizer)
        compiled = vocab.patterns.get(pattern)
        if compiled is None:
            compiled = vocab.patterns[pattern] = _compile(vocab, pattern)
            while len(vocab.patterns) > MAX_PATTERNS:
                vocab.patterns.popitem(last=False)
        vocab.patterns.move_to_end(pattern)
        return vocab, compiled


def token_bytes(tokenizer) -> dict[int, bytes]:
    """The exact bytes each ordinary (not special) token id writes, so the automaton is byte-exact
    and a character split over several tokens is always finished.

    Byte-level BPE vocabularies (GPT-2's alphabet) map back char by char; sentencepiece ones
    write "▁" for a space and <0xXX> for a raw byte; any other vocabulary uses the decoded text.
    """
    special = set(tokenizer.all_special_tokens)
    special |= {t.content for t in getattr(tokenizer, "added_tokens_decoder", {}).values() if t.special}
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
    kept = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
            *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {b: chr(b) for b in kept}, 0
    for b in range(256):
        if b not in chars:
            chars[b], extra = chr(256 + extra), extra + 1
    return {ch: b for b, ch in chars.items()}


def _build_vocabulary(tokenizer) -> Vocabulary:
    from outlines_core import Vocabulary as CoreVocabulary

    pieces = token_bytes(tokenizer)
    texts = [""] * (max(pieces, default=0) + 1)
    by_piece: dict[bytes, list[int]] = {}
    for token_id, piece in pieces.items():
        texts[token_id] = piece.decode("utf-8", errors="replace")
        by_piece.setdefault(piece, []).append(token_id)
    eos = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else len(texts)
    return Vocabulary(CoreVocabulary(eos, by_piece), texts)


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
        index, engine_states, number[index.get_initial_state()], final, tokens, targets, ends_line,
        to_final, to_line_end, np.array([to_final[t].max(initial=0) for t in targets]),
        np.array([to_line_end[t].max(initial=0) for t in in_line]), time.perf_counter() - started)
    log.info("compiled a constrained-decoding pattern (%d characters, %d states) in %.2f s",
             len(pattern), len(engine_states), compiled.seconds)
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


# --- decoding -----------------------------------------------------------------------------------

def step_processor(tokenizer, fmt: StepFormat, *, end_ids: list[int], max_new_tokens: int,
                   stop: list[str] | None = None) -> StepProcessor:
    """A fresh logits processor for one `generate` call that keeps the reply in `fmt`."""
    vocab, compiled = compile_pattern(tokenizer, pattern_of(fmt))
    shortest = int(compiled.to_final[compiled.initial])
    if max_new_tokens < shortest:
        log.warning("max_new_tokens=%d is too few for any complete constrained reply (the shortest takes %d "
                    "tokens): the reply will be cut", max_new_tokens, shortest)
    return StepProcessor(vocab, compiled, end_ids, max_new_tokens, fmt.max_line_tokens, stop or [])


class StepProcessor:
    """A transformers logits processor for one reply; it keeps state, so make one per call.

    The compiled automaton is shared (read only) with every other call; this object holds the
    current state, the tokens used in the reply and in its current line, and the last characters.
    """

    def __init__(self, vocab: Vocabulary, compiled: CompiledPattern, end_ids: list[int], max_new_tokens: int,
                 max_line_tokens: int, stop: list[str]):
        self.vocab, self.compiled = vocab, compiled
        self.end_ids = tuple(sorted(set(end_ids)))
        self.max_new_tokens, self.max_line_tokens = max_new_tokens, max_line_tokens
        self.stop = [s for s in stop if s]
        self.state = compiled.initial
        self.generated = self.line_tokens = 0
        self.tail = ""  # the last characters of the reply: enough to see a stop string being completed
        self._started = False

    def __call__(self, input_ids, scores):
        if scores.shape[0] != 1:
            raise ValueError("constrained decoding generates one sequence at a time")
        if self._started:
            self.advance(int(input_ids[0, -1]))
        self._started = True
        return scores.masked_fill(self._mask(scores.shape[-1], scores.device), float("-inf"))

    def advance(self, token: int) -> None:
        """Move past `token`, the one the model chose."""
        texts = self.vocab.texts
        text = texts[token] if 0 <= token < len(texts) else ""
        engine_state = self.compiled.index.get_next_state(self.compiled.engine_states[self.state], token)
        if engine_state is None:
            raise RuntimeError(f"constrained decoding: token {token} ({text!r}) does not fit the format")
        self.state = bisect.bisect_left(self.compiled.engine_states, engine_state)  # they are sorted
        self.generated += 1
        self.line_tokens = 0 if "\n" in text else self.line_tokens + 1
        keep = max((len(s) for s in self.stop), default=1) - 1
        self.tail = (self.tail + text)[-keep:] if keep else ""

    def _left(self) -> tuple[int, int]:
        """Tokens left after the next one: in the reply, and in the current line."""
        return (self.max_new_tokens - self.generated - 1, self.max_line_tokens - self.line_tokens - 1)

    def allowed_tokens(self):
        """The token ids the next token may be (a numpy array): the format, then both budgets."""
        import numpy as np

        c, s = self.compiled, self.state
        left, line_left = self._left()
        tokens, targets = c.tokens[s], c.targets[s]
        keep = np.ones(len(tokens), dtype=bool)
        if c.worst_to_final[s] > left:  # past the budget: the shortest way
            keep &= c.to_final[targets] <= max(left, c.to_final[s] - 1)
        if c.worst_to_line_end[s] > line_left:
            in_line = c.ends_line[s] | (c.to_line_end[targets] <= max(line_left, c.to_line_end[s] - 1))
            if (keep & in_line).any() or c.final[s]:  # ending the turn also ends the line
                keep &= in_line
        if not keep.any() and not c.final[s]:
            keep[:] = True  # no complete reply fits in max_new_tokens: at least stay in the format
        ends = np.asarray(self.end_ids if c.final[s] else [], dtype=np.int64)
        return np.concatenate([tokens[keep], ends])

    def _mask(self, width: int, device):
        """True for each token the model may not choose next."""
        c, s = self.compiled, self.state
        left, line_left = self._left()
        if c.worst_to_final[s] > left or c.worst_to_line_end[s] > line_left:
            mask = _mask_of(self.allowed_tokens(), width, device)
        else:  # the budgets do not bind here: the state's plain mask, cached under all that shapes it
            key = (s, self.end_ids, width, str(device))
            mask = c.masks.get(key)
            if mask is None:
                mask = c.masks[key] = _mask_of(self.allowed_tokens(), width, device)
        banned = [t for t in self._stop_completions() if t < width]
        if banned:
            fewer = mask.clone()
            fewer[0, banned] = True
            if not bool(fewer.all()):
                mask = fewer
        return mask

    def _stop_completions(self) -> list[int]:
        """Tokens that would complete a stop string after what the reply holds so far."""
        if not self.stop:
            return []
        key = tuple(self.stop)
        candidates = self.vocab.stop_candidates.get(key)
        if candidates is None:  # only a token holding a stop string's last character can complete it
            last = {s[-1] for s in self.stop}
            candidates = [i for i, text in enumerate(self.vocab.texts) if any(ch in text for ch in last)]
            self.vocab.stop_candidates[key] = candidates
        texts, tail = self.vocab.texts, self.tail
        return [t for t in candidates if any(s in tail + texts[t] for s in self.stop)]


def _mask_of(allowed, width: int, device):
    import torch

    mask = torch.ones(1, width, dtype=torch.bool)
    mask[0, torch.from_numpy(allowed[allowed < width])] = False
    return mask.to(device)
