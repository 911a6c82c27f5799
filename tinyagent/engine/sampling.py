"""Choosing the next token from a numpy row of logits (llama.cpp's), as transformers chooses from a tensor.

The reply's processors run first, in the order transformers' path runs them: the caller's (a replay's
forced tokens), the step format (`constrained.StepProcessor.apply`), then repetition within the reply
(`repetition.ReplyRepetition.apply`), which only picks among what the format allows. Then greedy, or
temperature and nucleus (top-p) sampling as transformers' warpers do it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

#: processor(prompt and reply ids so far, scores) -> scores, a caller's own (e.g. forcing recorded tokens)
NumpyProcessor = Callable[[list[int], object], object]


class ReplyChooser:
    """Picks each token of one reply: `processors` in order, then greedy, or `temperature` / `top_p` drawing
    from `rng` (a numpy Generator)."""

    def __init__(
        self,
        prompt: Sequence[int],
        processors: list[NumpyProcessor],
        constraint=None,
        repetition=None,
        temperature: float = 0.0,
        top_p: float = 1.0,
        rng=None,
    ):
        self.prompt, self.processors = list(prompt), list(processors)
        self.constraint, self.repetition = constraint, repetition
        self.temperature, self.top_p = temperature, top_p
        self.rng = rng if temperature and temperature > 0 else None

    def choose(self, reply: list[int], logits) -> int:
        """The next token after `reply`, from the logits row that follows it."""
        import numpy as np

        scores = logits.astype(np.float32, copy=False)
        for processor in self.processors:
            scores = processor(self.prompt + reply, scores)
        if self.constraint is not None:
            scores = self.constraint.apply(reply, scores)
        if self.repetition is not None:
            scores = self.repetition.apply(reply, scores)
        if self.rng is None or self.temperature is None:
            return int(np.argmax(scores))
        return sample(scores, self.temperature, self.top_p, self.rng)


def sample(scores, temperature: float, top_p: float, rng) -> int:
    """A token drawn from softmax(scores / temperature), keeping the smallest set of most likely tokens
    whose probability reaches `top_p` (at least one)."""
    import numpy as np

    scaled = scores.astype(np.float64) / temperature
    finite = np.isfinite(scaled)
    if not finite.any():
        return int(np.argmax(scores))
    probs = np.zeros_like(scaled)
    probs[finite] = np.exp(scaled[finite] - scaled[finite].max())
    probs /= probs.sum()
    if top_p < 1.0:
        order = np.argsort(-probs, kind="stable")
        cumulative = np.cumsum(probs[order])
        cut = int(np.searchsorted(cumulative, top_p)) + 1  # tokens up to the one that reaches top_p
        kept = np.zeros_like(probs)
        kept[order[:cut]] = probs[order[:cut]]
        probs = kept / kept.sum()
    return int(rng.choice(len(probs), p=probs))
