"""Discouraging a small model from looping inside one reply ("你的生命中，你的生命中，…").

transformers' own `repetition_penalty` and `no_repeat_ngram_size` look at the whole sequence, prompt
included, so in a ReAct prompt they would ban the format's own words and the names a reply must copy
from an observation. `ReplyRepetition` looks only at the tokens of the reply being written, and never
bans the last tokens left: placed after the constrained-decoding processor, it only chooses among
the tokens the format allows, so a reply still always fits the format.
"""

from __future__ import annotations


class ReplyRepetition:
    """A logits processor for one reply: `penalty` (> 1) lowers the scores of tokens the reply already
    used (as CTRL does); `ngram` (> 0) bans a token that would repeat an n-gram of the reply. Called
    as transformers calls one (torch tensors), or `apply(reply, scores)` on a numpy row (llama.cpp)."""

    def __init__(self, penalty: float = 1.0, ngram: int = 0):
        self.penalty, self.ngram = penalty, ngram
        self.prompt_length: int | None = None

    def __call__(self, input_ids, scores):
        import torch

        if self.prompt_length is None:
            self.prompt_length = input_ids.shape[1]
        reply = input_ids[0, self.prompt_length :]
        if len(reply) == 0:
            return scores
        scores = scores.clone()
        if self.penalty != 1.0:
            used = torch.unique(reply)
            chosen = scores[0, used]
            scores[0, used] = torch.where(chosen > 0, chosen / self.penalty, chosen * self.penalty)
        banned = self._repeating(reply.tolist())
        if banned:
            finite = torch.isfinite(scores[0])
            rest = finite.clone()
            rest[[t for t in banned if t < scores.shape[-1]]] = False
            if rest.any():  # never ban the only ways left (e.g. the format's next fixed token)
                scores[0, ~rest & finite] = float("-inf")
        return scores

    def apply(self, reply: list[int], scores):
        """The numpy row `scores` after the reply's tokens `reply`, as `__call__` treats a torch row."""
        import numpy as np

        if not reply:
            return scores
        scores = scores.copy()
        if self.penalty != 1.0:
            used = np.unique(reply)
            chosen = scores[used]
            scores[used] = np.where(chosen > 0, chosen / self.penalty, chosen * self.penalty)
        banned = [t for t in self._repeating(reply) if t < len(scores)]
        if banned:
            finite = np.isfinite(scores)
            rest = finite.copy()
            rest[banned] = False
            if rest.any():
                scores[~rest & finite] = -np.inf
        return scores

    def _repeating(self, reply: list[int]) -> set[int]:
        """Tokens that would complete an n-gram the reply already holds."""
        n = self.ngram
        if n <= 0 or len(reply) < n:
            return set()
        head = tuple(reply[len(reply) - n + 1 :]) if n > 1 else ()
        return {reply[i + n - 1] for i in range(len(reply) - n + 1) if tuple(reply[i : i + n - 1]) == head}
