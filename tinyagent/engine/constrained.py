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
import logging

from ..format.step_format import StepFormat, pattern_of
from .automaton import CompiledPattern, Pieces, Vocabulary, compile_pattern

log = logging.getLogger(__name__)


# --- decoding -----------------------------------------------------------------------------------


def step_processor(
    tokenizer,
    fmt: StepFormat,
    *,
    end_ids: list[int],
    max_new_tokens: int,
    stop: list[str] | None = None,
    pieces: Pieces | None = None,
) -> StepProcessor:
    """A fresh logits processor for one `generate` call that keeps the reply in `fmt` (`pieces`: see
    `automaton.compile_pattern`)."""
    markers = ()
    if fmt.calls is not None and pieces is None:
        markers = tuple(m for m in fmt.calls.markers if m in tokenizer.get_vocab())
    vocab, compiled = compile_pattern(tokenizer, pattern_of(fmt), markers, pieces)
    shortest = int(compiled.to_final[compiled.initial])
    if max_new_tokens < shortest:
        log.warning(
            "max_new_tokens=%d is too few for any complete constrained reply (the shortest takes %d "
            "tokens): the reply will be cut",
            max_new_tokens,
            shortest,
        )
    return StepProcessor(vocab, compiled, end_ids, max_new_tokens, fmt.max_line_tokens, stop or [])


class StepProcessor:
    """A logits processor for one reply; it keeps state, so make one per call. Called as transformers
    calls one (torch tensors), or `apply(reply, scores)` on a numpy row (llama.cpp's logits).

    The compiled automaton is shared (read only) with every other call; this object holds the
    current state, the tokens used in the reply and in its current line, and the last characters.
    """

    def __init__(
        self,
        vocab: Vocabulary,
        compiled: CompiledPattern,
        end_ids: list[int],
        max_new_tokens: int,
        max_line_tokens: int,
        stop: list[str],
    ):
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

    def apply(self, reply: list[int], scores):
        """`scores` (a numpy row) with every token that would leave the format at -inf; `reply` holds
        the tokens chosen so far (its last one is the one to move past)."""
        import numpy as np

        if self.generated < len(reply):
            self.advance(reply[-1])
        return np.where(self._banned(scores.shape[-1]), np.float32(-np.inf), scores)

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
        """True for each token the model may not choose next (a torch tensor on `device`)."""
        import torch

        banned = self._banned(width)
        if banned is not self.compiled.masks.get((self.state, self.end_ids, width)):
            return torch.from_numpy(banned).reshape(1, width).to(device)
        key = (self.state, self.end_ids, width, str(device))  # the state's plain mask: one tensor per device
        mask = self.compiled.masks.get(key)
        if mask is None:
            mask = self.compiled.masks[key] = torch.from_numpy(banned).reshape(1, width).to(device)
        return mask

    def _banned(self, width: int):
        """True for each token the model may not choose next (a numpy bool array of `width`)."""
        c, s = self.compiled, self.state
        left, line_left = self._left()
        if c.worst_to_final[s] > left or c.worst_to_line_end[s] > line_left:
            mask = _mask_of(self.allowed_tokens(), width)
        else:  # the budgets do not bind here: the state's plain mask, cached under all that shapes it
            key = (s, self.end_ids, width)
            mask = c.masks.get(key)
            if mask is None:
                mask = c.masks[key] = _mask_of(self.allowed_tokens(), width)
        banned = [t for t in self._stop_completions() if t < width]
        if banned:
            fewer = mask.copy()
            fewer[banned] = True
            if not fewer.all():
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


def _mask_of(allowed, width: int):
    import numpy as np

    mask = np.ones(width, dtype=bool)
    mask[allowed[allowed < width]] = False
    return mask
