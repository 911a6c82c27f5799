"""Teacher forcing: replay a recorded reply through a real model at exactly the cost of generating it.

The recorded tokens are forced through a local model's own `generate` (`HFChatModel`, or
`LlamaCppModel`, whose logits processors get numpy rows) by a logits processor, so prompt building,
KV-cache reuse, stop strings and the generation loop are the model's own code; each reply token costs
the forward pass that would have chosen it, whatever the weights are. The benchmark
bench/episode_cost.py uses this to compare agent strategies and runtimes on any weights, even random.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable

from tinyagent.format.messages import Message
from tinyagent.models.llamacpp import LlamaCppModel
from tinyagent.models.local import LocalChatModel
from tinyagent.models.model import BaseModel, Reply


@dataclasses.dataclass
class RecordedReply:
    """One recorded model reply.

    `text`: the reply as a model with stop strings writes it, up to and including the stop string
    (`...Action Input: {...}\\nObservation:`), or a final answer that ends the turn.
    `continuation`: what a model without stop strings writes after `text` (an invented observation,
    more steps, a made-up answer) before it ends its turn; with `runs_on` it never ends the turn
    and generation goes on until max_new_tokens.
    """

    text: str
    continuation: str = ""
    runs_on: bool = False

    @property
    def ends_turn(self) -> bool:
        """True for a reply that closes the turn itself (a final answer): its end token is part of it."""
        return not self.continuation and not self.runs_on


@dataclasses.dataclass
class ReplayCounts:
    """What replaying cost, in model work. `tokens_processed` = every token fed through the model."""

    calls: int = 0
    forward_passes: int = 0
    prefilled: int = 0  # prompt tokens fed (not taken from the kept KV cache)
    fed: int = 0  # generated tokens fed back, one forward pass each
    decoded: int = 0  # tokens generated (the last of a call is never fed)
    discarded: int = 0  # generated tokens after the reply's own, cut away afterwards
    reply_tokens: int = 0  # tokens of the replies' own text (what enters the transcript)
    reused: int = 0  # prompt tokens taken from the kept KV cache
    decode_passes: int = 0  # forward passes of one token
    seconds: float = 0.0  # inside the model's generate
    decode_seconds: float = 0.0  # of that, the one-token forward passes
    overhead_seconds: float = 0.0  # tokenizing the recorded text (replay bookkeeping, not agent work)

    @property
    def tokens_processed(self) -> int:
        return self.prefilled + self.fed

    def __iadd__(self, other: ReplayCounts) -> ReplayCounts:
        for f in dataclasses.fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))
        return self


class ForceTokens:
    """Logits processor: step i chooses `ids[i]`; past them an end token, or with `run_on` the
    model's own choice with the end tokens banned (a reply that never closes its turn). It takes
    transformers' scores (a torch tensor of one row) or llama.cpp's (a numpy row)."""

    def __init__(self, ids: list[int], end_ids: list[int], run_on: bool = False):
        if not end_ids:
            raise ValueError("the model has no end token to close a replayed reply")
        self.ids, self.end_ids, self.run_on = list(ids), list(end_ids), run_on
        self.step = 0

    def __call__(self, input_ids, scores):
        import numpy as np

        step, self.step = self.step, self.step + 1
        if step >= len(self.ids) and self.run_on:
            scores[..., self.end_ids] = -float("inf")
            return scores
        keep = self.ids[step] if step < len(self.ids) else self.end_ids[0]
        forced = (
            scores.new_full(scores.shape, -float("inf"))
            if hasattr(scores, "new_full")
            else np.full_like(scores, -np.inf)
        )
        forced[..., keep] = 0.0
        return forced


class PassCounter:
    """Counts a torch module's forward passes and the tokens fed to each, and times one-token passes
    (synchronising CUDA so the times are the device's). A context manager; it counts every pass of
    the module meanwhile, so nothing else may run the same weights while it counts."""

    @property
    def passes(self) -> int:
        return len(self.sizes)

    @property
    def fed(self) -> int:
        return sum(self.sizes)

    def __init__(self, module):
        self.module = module
        self.sizes: list[int] = []
        self.single_passes = 0
        self.single_seconds = 0.0
        self._started = 0.0
        self._sync = module.device.type == "cuda" if hasattr(module, "device") else False
        self._handles: list = []

    def __enter__(self) -> PassCounter:
        self._handles = [
            self.module.register_forward_pre_hook(self._before, with_kwargs=True),
            self.module.register_forward_hook(self._after, with_kwargs=True),
        ]
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()

    def _before(self, module, args, kwargs) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        tokens = ids if ids is not None else kwargs["inputs_embeds"]
        self.sizes.append(int(tokens.shape[1]))
        self._synchronize()
        self._started = time.perf_counter()

    def _after(self, module, args, kwargs, output) -> None:
        if self.sizes[-1] == 1:
            self._synchronize()
            self.single_passes += 1
            self.single_seconds += time.perf_counter() - self._started

    def _synchronize(self) -> None:
        if self._sync:
            import torch

            torch.cuda.synchronize()


class RuntimeCounter:
    """The same counts for a llama.cpp model, from its runtime: the tokens llama.cpp itself counts as
    evaluated (`llama_perf_context`), the passes and the one-token passes' time around them."""

    def __init__(self, runtime):
        self.runtime = runtime

    def __enter__(self) -> RuntimeCounter:
        self._counters, self._perf = dataclasses.replace(self.runtime.counters), self.runtime.perf()
        return self

    def __exit__(self, *exc) -> None:
        after, perf = self.runtime.counters, self.runtime.perf()
        self.passes = after.calls - self._counters.calls
        self.fed = sum(perf[k] - self._perf[k] for k in ("prompt_tokens", "eval_tokens"))
        self.single_passes = after.single_passes - self._counters.single_passes
        self.single_seconds = after.single_seconds - self._counters.single_seconds


def counting(model: LocalChatModel):
    """A context manager counting the forward passes of `model` (see PassCounter)."""
    return RuntimeCounter(model.runtime) if isinstance(model, LlamaCppModel) else PassCounter(model.model)


def reply_ids(model: LocalChatModel, prompt_text: str, prompt_ids: list[int], text: str) -> list[int]:
    """The token ids a model writes for `text` after the prompt: the suffix of the encoded
    prompt + text, so token boundaries are the real tokenizer's."""
    full = model.encode_prompt(prompt_text + text)
    if full[: len(prompt_ids)] == prompt_ids:
        return full[len(prompt_ids) :]
    return model.encode_text(text)  # boundary merged: encode alone


def replay_generate(
    model: LocalChatModel,
    messages: list[Message],
    reply: RecordedReply,
    stop: list[str] | None = None,
    max_new_tokens: int | None = None,
) -> tuple[Reply, ReplayCounts]:
    """Run `model.generate(messages, stop)` with the recorded reply forced token by token.

    With stop strings the reply's `text` is forced (generation stops where the stop strings stop
    it); without, `text + continuation` is, as a model with no stop strings writes it. Returns the
    model's Reply and what it cost.
    """
    started = time.perf_counter()
    prompt_text = model.render_prompt(messages)
    prompt_ids = model.encode_prompt(prompt_text)
    own = reply_ids(model, prompt_text, prompt_ids, reply.text)
    forced = own if stop else reply_ids(model, prompt_text, prompt_ids, reply.text + reply.continuation)
    processor = ForceTokens(forced, model.end_token_ids, run_on=reply.runs_on and not stop)
    overhead = time.perf_counter() - started
    with counting(model) as passes:
        completion = model.generate(messages, stop=stop, max_new_tokens=max_new_tokens, logits_processor=[processor])
    decoded = completion.completion_tokens
    prefilled = completion.prompt_tokens - completion.cached_tokens
    kept = len(own) + (1 if reply.ends_turn else 0)
    counts = ReplayCounts(
        calls=1,
        forward_passes=passes.passes,
        prefilled=prefilled,
        fed=passes.fed - prefilled,
        decoded=decoded,
        discarded=max(0, decoded - kept),
        reply_tokens=len(own),
        reused=completion.cached_tokens,
        decode_passes=passes.single_passes,
        seconds=completion.seconds,
        decode_seconds=passes.single_seconds,
        overhead_seconds=overhead,
    )
    return completion, counts


class ReplayModel(BaseModel):
    """A model whose replies are recorded ones, forced through a local model; an `Agent` runs on it
    exactly as on the model itself. `use_stop=False` is the original TinyAgent loop: the agent's
    stop strings are dropped, so each reply's continuation is generated too and cut afterwards."""

    def __init__(
        self,
        model: LocalChatModel,
        replies: Iterable[RecordedReply] = (),
        use_stop: bool = True,
        max_new_tokens: int | None = None,
    ):
        self.model, self.use_stop, self.max_new_tokens = model, use_stop, max_new_tokens
        self.replies = list(replies)
        self.control_tokens = model.control_tokens
        self.counts = ReplayCounts()
        self.last_prompt_tokens = 0  # the prompt of the latest call ...
        self.last_reply_tokens = 0  # ... and the tokens of its reply: together, the transcript

    def generate(
        self, messages: list[Message], stop: list[str] | None = None, *, max_new_tokens: int | None = None, **ignored
    ) -> Reply:
        if not self.replies:
            raise RuntimeError("no recorded reply left: the agent asked for more steps than were recorded")
        reply = self.replies.pop(0)
        completion, counts = replay_generate(
            self.model, messages, reply, stop if self.use_stop else None, self.max_new_tokens or max_new_tokens
        )
        self.counts += counts
        self.last_prompt_tokens, self.last_reply_tokens = completion.prompt_tokens, counts.reply_tokens
        return completion
