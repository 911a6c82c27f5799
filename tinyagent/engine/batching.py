"""Continuous batching for one local model: many threads' `generate` calls run together.

A forward pass reads every weight once whatever it feeds, so eight agents stepping together cost
little more per step than one. A worker thread owns the model while requests are in flight. Each
pass it admits waiting requests (up to `max_batch` in flight), then feeds, in one packed row
(packed.py), the last chosen token of every request that is decoding plus the next chunk of
the prompt of those still prefilling (`PREFILL_CHUNK` tokens while others decode, so their steps
ride along instead of waiting; `PREFILL_MAX` when nobody decodes). Every request whose tokens are
all in then chooses its next token with its own logits processors (constraints, forced replies),
sampling settings, stop strings, end ids and cancel event. A request that ends (or raises) leaves
at once; its cache goes to the kept prefixes.

A request prefills into its own batch-1 KV cache: the one kept from its conversation's last call
(or a copy of the start it shares with another conversation, e.g. the system prompt), extended in
place by each chunk. Once it decodes, its cache is copied into a slot of the batcher's `SlotPool`
(slots.py), where each step writes every decoding request's new key with one indexed write
per layer; attention reads each request's own length (one by one on a CPU, in one masked call
elsewhere). Nothing is padded in the matrix products, and a request joins or leaves without
touching the others' caches. Results equal a request decoded alone up to float rounding (greedy
tokens are compared in tests/test_batching.py). Only models whose cache is made of plain
full-attention layers and whose attention goes through transformers' attention interface are
batched (`supports`); sliding-window, quantised or recurrent caches keep the one-at-a-time path.
With rope that depends on the length (dynamic NTK), a request that may pass the original length
runs alone.

Why not transformers' own continuous batching (`generate_batch`, the manager behind
`transformers serve`): it carries per-request end ids, max_new_tokens and temperature / top_p /
top_k, but no per-request logits processor objects (constrained decoding, replayed replies),
no stop strings, no per-request streaming of text, and its block sharing finds prefixes by
hashing full blocks of a paged cache rather than keeping each conversation's cache.

This file runs a little over 300 lines: `Batcher` is one scheduler (admit, pass, choose, finish over
the same request state), clearer whole than split.
"""

from __future__ import annotations

import atexit
import logging
import threading
import weakref
from dataclasses import dataclass, field

from . import packed
from .kept_prefixes import KeptPrefixes, copy_start
from .prefix_cache import common_prefix_length, length_dependent_rope_limit
from .slots import SlotPool

SHARE_MIN = 64  # tokens a request must share with one in flight to copy its start rather than compute it
PREFILL_CHUNK = 256  # prompt tokens per pass while other requests decode (bounds their stall: ~0.8 s on a 2-core CPU)
PREFILL_MAX = 1024  # prompt tokens per pass when none decodes

log = logging.getLogger(__name__)


def supports(model) -> bool:
    """True when `model` can be batched: its cache is all plain full-attention layers, and its
    attention can run packed (see packed.py)."""
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    layers = DynamicCache(config=model.config).layers
    text = model.config.get_text_config()
    if not layers or any(type(layer) is not DynamicLayer for layer in layers):
        return False
    if getattr(text, "attn_logit_softcapping", None):  # not in the packed attention
        return False
    return packed.install(model)  # a no-op when already installed


@dataclass
class Request:
    """One `generate` call in the batcher: its prompt, rules, and what it produced."""

    ids: list[int]
    config: object  # GenerationConfig: max_new_tokens, do_sample, end ids
    processors: object  # LogitsProcessorList, the generation config's and the caller's
    stopping: list  # stopping criteria called with (ids so far, scores)
    on_token: object  # callable(new ids) -> None, or None: streams the text
    new: list[int] = field(default_factory=list)
    reused: int = 0  # prompt tokens taken from a kept cache or another request's
    cache: object = None  # while prefilling: this request's batch-1 DynamicCache, holding `fed` tokens
    slot: int | None = None  # while decoding: its slot of the batcher's SlotPool, holding `fed` tokens
    fed: int = 0
    todo: list[int] = field(default_factory=list)  # tokens not yet fed: the prompt's rest, then the last chosen
    sequence: object = None  # tensor [1, n]: prompt and new tokens, what processors and criteria see
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)


class Batcher:
    """Runs `HFChatModel` generation for all threads at once (see the module docstring).

    `max_batch` requests are in flight together (more wait for a free place); `kept` is how many
    conversations' caches are kept between their calls.
    """

    def __init__(self, model, max_batch: int = 8, kept: int = 16):
        self.model, self.max_batch = model, max_batch
        # Rope that changes past this length (dynamic NTK) changes for the whole pass, so a request
        # that may pass it runs alone, and no kept cache is reused past it.
        self.rope_limit = length_dependent_rope_limit(model.config.get_text_config())
        self.prefixes = KeptPrefixes(model, kept, self.rope_limit)
        from transformers import DynamicCache

        self.pool = SlotPool(
            len(DynamicCache(config=model.config).layers), max_batch, one_by_one=model.device.type == "cpu"
        )
        self._waiting: list[Request] = []
        self._worker: threading.Thread | None = None
        self._cond = threading.Condition()
        self._rows: list[Request] = []  # in flight, in arrival order
        self.passes = 0  # forward passes that fed decoding requests
        self.prefilled = 0  # prompt tokens fed (not taken from a kept cache)
        self.stepped = 0  # decoding requests' tokens fed: one per request and pass
        self._closing = False
        _batchers.add(self)

    def close(self, timeout: float | None = 30.0) -> None:
        """Stop the worker after its current pass (waiting calls get an error) and wait for it: a
        thread still inside torch when Python exits can abort the process."""
        with self._cond:
            self._closing, worker = True, self._worker
        if worker is not None and worker is not threading.current_thread():
            worker.join(timeout)

    @property
    def fed_tokens(self) -> int:
        """Tokens through the model."""
        return self.prefilled + self.stepped

    def run(self, ids: list[int], config, processors, stopping: list, on_token=None) -> tuple[list[int], int]:
        """Generate after `ids` with the others; returns (new ids, prompt tokens taken from a kept cache)."""
        request = Request(ids, config, processors, stopping, on_token)
        with self._cond:
            self._waiting.append(request)
            if self._worker is None:
                self._worker = threading.Thread(target=self._loop, name="tinyagent-batcher", daemon=True)
                self._worker.start()
        request.done.wait()
        if request.error is not None:
            raise request.error
        return request.new, request.reused

    # --- the worker ---------------------------------------------------------------------------

    def _loop(self) -> None:
        import torch

        while True:
            with self._cond:
                if self._closing:
                    for r in [*self._waiting, *self._rows]:
                        if not r.done.is_set():
                            self._finish(r, RuntimeError("the model is shutting down"))
                    self._waiting, self._rows, self._worker = [], [], None
                    return
                self._admit()
                if not self._rows:
                    self._worker = None
                    return
            try:
                with torch.inference_mode():
                    self._pass()
            except BaseException:  # a failed pass has failed the requests it fed (see _pass)
                log.exception("batched generation failed")
                self._rows = [r for r in self._rows if not r.done.is_set()]

    def _long(self, request: Request) -> bool:
        """True when the request may pass the rope limit: it then runs alone."""
        return self.rope_limit is not None and len(request.ids) + request.config.max_new_tokens > self.rope_limit

    def _admit(self) -> None:
        """Start waiting requests, in arrival order, while there is room: a long one only alone (the
        ones after it wait for it); one whose start a request in flight is still computing waits for
        it (see `_start`)."""
        if any(self._long(r) for r in self._rows):
            return
        still: list[Request] = []
        for i, r in enumerate(self._waiting):
            if len(self._rows) >= self.max_batch or self._long(r) and self._rows:
                still += self._waiting[i:]
                break
            if not self._start(r):
                still.append(r)
            elif self._long(r):
                still += self._waiting[i + 1 :]
                break
        self._waiting = still

    def _start(self, request: Request) -> bool:
        """Give the request the longest start of its prompt already computed: a kept cache, or a copy
        from a request in flight that shares at least `SHARE_MIN` more; False (wait) while one in
        flight is still prefilling such a start."""
        import torch

        kept = self.prefixes.longest(request.ids)
        source, shared = None, kept + SHARE_MIN - 1
        for other in self._rows:
            n = min(common_prefix_length(other.ids, request.ids), len(request.ids) - 1)
            if n > shared and (not self._long(other) and not self._long(request)):
                source, shared = other, n
        if source is not None and source.fed < shared:
            return False
        try:
            if source is not None:
                request.cache = (
                    self.pool.take_out(source.slot, shared, self.model.config)
                    if source.slot is not None
                    else copy_start(source.cache, shared, self.model.config)
                )
                request.reused = shared
                self.prefixes.shared_tokens += shared
            else:
                request.cache, request.reused = self.prefixes.take(request.ids)
            request.fed, request.todo = request.reused, request.ids[request.reused :]
            request.sequence = torch.tensor([request.ids], device=self.model.device)
        except BaseException as e:  # noqa: BLE001  (this request's failure, raised in its own thread)
            self._finish(request, e)
            return True
        self._rows.append(request)
        return True

    def _pass(self) -> None:
        """One packed forward pass: every decoding request's token, then prompt chunks up to the budget."""
        import torch

        decoding = [r for r in self._rows if r.slot is not None]
        budget = PREFILL_CHUNK if decoding else PREFILL_MAX
        chunks: list[tuple[Request, int]] = []
        for r in self._rows:
            if r.slot is None and budget > 0:
                chunks.append((r, min(budget, len(r.todo))))
                budget -= chunks[-1][1]
        tokens = [r.todo[0] for r in decoding]
        positions = [r.fed for r in decoding]
        segments, last = [], list(range(len(decoding)))
        for r, n in chunks:
            segments.append(packed.Segment(r.cache, len(tokens), n))
            tokens += r.todo[:n]
            positions += range(r.fed, r.fed + n)
            if n == len(r.todo):
                last.append(len(tokens) - 1)
        device = self.model.device
        fed = [(r, 1) for r in decoding] + chunks
        try:
            step = self.pool.step([r.slot for r in decoding]) if decoding else None
            with packed.running(packed.PackedPass(segments, self.pool, step)) as cache:
                # a 4D mask is taken as given: transformers builds none (attention is per request)
                logits = self.model(
                    input_ids=torch.tensor([tokens], device=device),
                    position_ids=torch.tensor([positions], device=device),
                    attention_mask=torch.ones(1, 1, 1, 1, dtype=torch.bool, device=device),
                    cache=cache,
                    use_cache=True,
                    logits_to_keep=torch.tensor(last, dtype=torch.long, device=device),
                ).logits[0]
        except BaseException as e:
            for r, _ in fed:  # their caches may hold part of this pass: not kept
                r.cache = None
                self._finish(r, e)
            raise
        if decoding:
            self.passes += 1
            self.stepped += len(decoding)
        self.prefilled += len(tokens) - len(decoding)
        row = 0
        for r, n in fed:
            r.fed += n
            r.todo = r.todo[n:]
            if r.todo:
                continue
            try:
                token, ended = self._choose(r, logits[row : row + 1])
                if not ended and r.slot is None:  # its prompt is in: it decodes from its slot from now on
                    r.slot, r.cache = self.pool.add(r.cache), None
            except BaseException as e:  # noqa: BLE001  (this request's failure only)
                token, ended = None, e
            row += 1
            if ended:
                self._finish(r, ended if isinstance(ended, BaseException) else None)
            else:
                r.todo = [token]
        self._rows = [r for r in self._rows if not r.done.is_set()]

    def _choose(self, request: Request, logits) -> tuple[int, bool]:
        """Pick the request's next token from its logits row; (token, whether that ends the request)."""
        import torch

        scores = request.processors(request.sequence, logits.float())
        if request.config.do_sample:
            token = int(torch.multinomial(torch.softmax(scores, dim=-1), 1)[0, 0])
        else:
            token = int(scores.argmax(dim=-1)[0])
        request.new.append(token)
        request.sequence = torch.cat([request.sequence, request.sequence.new_tensor([[token]])], dim=1)
        if request.on_token is not None:
            request.on_token(request.new)
        eos = request.config.eos_token_id
        return token, (
            token in (eos if isinstance(eos, (list, tuple)) else [eos])
            or len(request.new) >= request.config.max_new_tokens
            or any(bool(c(request.sequence, scores).any()) for c in request.stopping)
        )

    def _finish(self, request: Request, error: BaseException | None) -> None:
        """Keep the request's cache (unless it failed), free its slot, and wake its caller."""
        if request.slot is not None:
            if error is None and self.prefixes.size > 0:
                request.cache = self.pool.take_out(request.slot, request.fed, self.model.config)
            self.pool.release(request.slot)
            request.slot = None
        if error is None and request.cache is not None:
            self.prefixes.put((request.ids + request.new)[: request.fed], request.cache)
        request.cache, request.error = None, error
        request.done.set()


_batchers: weakref.WeakSet = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    """At exit, let every worker finish its pass before Python tears down (see `Batcher.close`)."""
    for batcher in list(_batchers):
        batcher.close(timeout=10.0)
