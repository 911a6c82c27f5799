"""Continuous batching for one local model: many threads' `generate` calls decode together.

Decoding reads every weight once per forward pass whatever the batch, so eight agents stepping
together cost little more per step than one. A worker thread owns the model while requests are
in flight. Each step it admits waiting requests (prefilled alone, on their kept prefix, then
added to the batch: continuous batching), runs one batched forward pass over every active
request's last token, and lets each request choose its token with its own logits processors
(constraints, forced replies), sampling settings, stop strings, end ids and cancel event. A
request that ends (or raises) leaves the batch at once; its cache goes to the kept prefixes.

The batch is one left-padded `DynamicCache` with an attention mask and per-row positions. Padded
columns are masked, so results equal a request decoded alone up to float rounding (greedy tokens
are compared in tests/test_batching.py). Only caches made of plain full-attention layers are
batched (`supports`); sliding-window, quantised or recurrent caches keep the one-at-a-time path.
With rope that depends on the length (dynamic NTK), a request that may pass the original length
runs alone.

Why not transformers' own continuous batching (`generate_batch`, the manager behind
`transformers serve`): it carries per-request end ids, max_new_tokens and temperature / top_p /
top_k, but no per-request logits processor objects (constrained decoding, replayed replies),
no stop strings, no per-request streaming of text, and its block sharing finds prefixes by
hashing full blocks of a paged cache rather than keeping each conversation's cache.
"""
from __future__ import annotations

import atexit
import logging
import threading
import weakref
from dataclasses import dataclass, field

from .kept_prefixes import KeptPrefixes
from .prefix_cache import common_prefix_length, length_dependent_rope_limit

SHARE_MIN = 64  # tokens two requests admitted together must share before the first one's prompt cache is copied

log = logging.getLogger(__name__)


def supports(model) -> bool:
    """True when `model`'s cache is all plain full-attention layers (left padding is exact for those)."""
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    layers = DynamicCache(config=model.config).layers
    return bool(layers) and all(type(layer) is DynamicLayer for layer in layers)


@dataclass
class Request:
    """One `generate` call in the batcher: its prompt, rules, and what it produced."""

    ids: list[int]
    config: object            # GenerationConfig: max_new_tokens, do_sample, end ids
    processors: object        # LogitsProcessorList, the generation config's and the caller's
    stopping: list            # stopping criteria called with (ids so far, scores)
    on_token: object          # callable(new ids) -> None, or None: streams the text
    new: list[int] = field(default_factory=list)
    reused: int = 0
    cache: object = None      # batch-1 cache while prefilling
    sequence: object = None   # tensor [1, n]: prompt and new tokens, what processors and criteria see
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)


class Batcher:
    """Runs `HFChatModel` generation for all threads at once (see the module docstring).

    `max_batch` requests decode together (more wait for a free row); `kept` is how many
    conversations' caches are kept between their calls.
    """

    def __init__(self, model, max_batch: int = 8, kept: int = 16):
        self.model, self.max_batch = model, max_batch
        # Rope that changes past this length (dynamic NTK) changes for the whole pass, so a request
        # that may pass it runs alone, and no kept cache is reused past it.
        self.rope_limit = length_dependent_rope_limit(model.config.get_text_config())
        self.prefixes = KeptPrefixes(model, kept, self.rope_limit)
        self._waiting: list[Request] = []
        self._worker: threading.Thread | None = None
        self._cond = threading.Condition()
        self._rows: list[Request] = []
        self._cache = None      # the batch's DynamicCache, rows in `_rows` order
        self._mask = None       # attention mask [rows, columns]: 0 over left padding
        self._lengths: list[int] = []  # real tokens per row
        self.passes = 0         # batched decode passes
        self.prefilled = 0      # prompt tokens fed (not taken from a kept cache)
        self.stepped = 0        # rows of the decode passes: one fed token each
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
        """Tokens through the model, padding aside."""
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
                    self._waiting, self._rows, self._cache, self._mask, self._lengths = [], [], None, None, []
                    self._worker = None
                    return
                admitted = self._admit()
                if not admitted and not self._rows:
                    self._worker = None
                    return
            try:
                with torch.inference_mode():
                    joining = []
                    for i, r in enumerate(admitted):
                        if self._prefill(r):
                            joining.append(r)
                            self._share(r, admitted[i + 1:])
                    if joining:
                        self._join(joining)
                    if self._rows:
                        self._step()
            except BaseException as e:  # a failed pass loses the batch: every caller gets the error
                log.exception("batched generation failed")
                for r in {id(r): r for r in [*admitted, *self._rows]}.values():
                    if not r.done.is_set():
                        self._finish(r, e)
                self._rows, self._lengths, self._cache, self._mask = [], [], None, None

    def _long(self, request: Request) -> bool:
        """True when the request may pass the rope limit: it then runs alone."""
        return self.rope_limit is not None and len(request.ids) + request.config.max_new_tokens > self.rope_limit

    def _admit(self) -> list[Request]:
        """The waiting requests that join now, in arrival order: as many as there are free rows; a long
        one only into an empty batch, and alone (the requests after it wait for it)."""
        if any(self._long(r) for r in self._rows):
            return []
        admitted: list[Request] = []
        for r in self._waiting:
            if len(self._rows) + len(admitted) >= self.max_batch:
                break
            if self._long(r):
                if not self._rows and not admitted:
                    admitted.append(r)
                break
            admitted.append(r)
        self._waiting = self._waiting[len(admitted):]
        return admitted

    def _prefill(self, request: Request) -> bool:
        """Feed the request's prompt after its kept prefix and choose its first token; False once it ended."""
        import torch

        try:
            request.cache, request.reused = self.prefixes.take(request.ids)
            device = self.model.device
            request.sequence = torch.tensor([request.ids], device=device)
            fresh = request.sequence[:, request.reused:]
            positions = torch.arange(request.reused, len(request.ids), device=device)[None]
            logits = self.model(input_ids=fresh, attention_mask=torch.ones_like(request.sequence),
                                position_ids=positions, cache=request.cache, use_cache=True, logits_to_keep=1).logits
            self.prefilled += fresh.shape[1]
            if self._choose(request, logits[:, -1]):
                self._finish(request, None)
                return False
            return True
        except BaseException as e:  # noqa: BLE001  (this request's failure, raised in its own thread)
            self._finish(request, e)
            return False

    def _share(self, request: Request, later: list[Request]) -> None:
        """Keep a copy of the request's prompt cache when a request admitted with it shares a long start
        (agents arriving together with the same system prompt): that start is then computed once."""
        if any(common_prefix_length(request.ids, r.ids) >= SHARE_MIN for r in later):
            self.prefixes.put(request.ids, _row_cache(request.cache, 0, 0, self.model.config))

    def _choose(self, request: Request, logits) -> bool:
        """Pick the request's next token from its logits row; True when that ends the request."""
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
        return (token in (eos if isinstance(eos, (list, tuple)) else [eos])
                or len(request.new) >= request.config.max_new_tokens
                or any(bool(c(request.sequence, scores).any()) for c in request.stopping))

    def _finish(self, request: Request, error: BaseException | None) -> None:
        """Keep the request's cache (unless it failed) and wake its caller."""
        if error is None and request.cache is not None:
            self.prefixes.put((request.ids + request.new)[: request.cache.get_seq_length()], request.cache)
        request.cache, request.error = None, error
        request.done.set()

    def _join(self, joining: list[Request]) -> None:
        """Add prefilled requests to the batch, left-padding every row to the longest."""
        import torch

        width = max([len(r.ids) for r in joining] + ([self._mask.shape[1]] if self._rows else []))
        parts = ([(self._cache, self._mask)] if self._rows else []) + [
            (r.cache, torch.ones(1, len(r.ids), dtype=torch.long, device=self.model.device)) for r in joining]
        from transformers import DynamicCache

        cache = DynamicCache(config=self.model.config)
        for index in range(len(parts[0][0].layers)):
            keys = torch.cat([_pad_left(c.layers[index].keys, width) for c, _ in parts])
            values = torch.cat([_pad_left(c.layers[index].values, width) for c, _ in parts])
            cache.update(keys, values, index)
        self._mask = torch.cat([_pad_left(m, width) for _, m in parts])
        self._cache = cache
        self._lengths += [len(r.ids) for r in joining]
        self._rows += joining
        for r in joining:
            r.cache = None

    def _step(self) -> None:
        """One batched forward pass over every row's last token; each row then chooses its next token."""
        import torch

        rows, device = self._rows, self.model.device
        tokens = torch.tensor([[r.new[-1]] for r in rows], device=device)
        self._mask = torch.cat([self._mask, self._mask.new_ones(len(rows), 1)], dim=1)
        positions = torch.tensor([[n] for n in self._lengths], device=device)
        logits = self.model(input_ids=tokens, attention_mask=self._mask, position_ids=positions,
                            cache=self._cache, use_cache=True, logits_to_keep=1).logits[:, -1]
        self.passes += 1
        self.stepped += len(rows)
        self._lengths = [n + 1 for n in self._lengths]
        ended = []
        for i, r in enumerate(rows):
            try:
                if self._choose(r, logits[i:i + 1]):
                    r.cache = _row_cache(self._cache, i, self._mask.shape[1] - self._lengths[i], self.model.config)
                    self._finish(r, None)
                    ended.append(i)
            except BaseException as e:  # noqa: BLE001  (this row's failure only)
                self._finish(r, e)
                ended.append(i)
        if ended:
            self._leave(ended)

    def _leave(self, ended: list[int]) -> None:
        """Drop ended rows from the batch, and the left padding no row needs any more."""
        import torch

        keep = [i for i in range(len(self._rows)) if i not in ended]
        self._rows = [self._rows[i] for i in keep]
        self._lengths = [self._lengths[i] for i in keep]
        if not keep:
            self._cache = self._mask = None
            return
        index = torch.tensor(keep, device=self.model.device)
        start = self._mask.shape[1] - max(self._lengths)
        self._mask = self._mask[index, start:]
        for layer in self._cache.layers:
            layer.keys, layer.values = layer.keys[index, :, start:], layer.values[index, :, start:]


def _pad_left(tensor, width: int):
    """`tensor` (keys [b, h, n, d] or a mask [b, n]) padded with zeros on the left of its length axis to `width`."""
    import torch.nn.functional as F

    axis = 2 if tensor.dim() == 4 else 1
    missing = width - tensor.shape[axis]
    if missing == 0:
        return tensor
    return F.pad(tensor, (0, 0, missing, 0) if axis == 2 else (missing, 0))


def _row_cache(cache, row: int, padding: int, config):
    """A batch-1 copy of one row of the batch cache, its left padding cut."""
    from transformers import DynamicCache

    single = DynamicCache(config=config)
    for index, layer in enumerate(cache.layers):
        single.update(layer.keys[row:row + 1, :, padding:].clone(), layer.values[row:row + 1, :, padding:].clone(),
                      index)
    return single


_batchers: weakref.WeakSet = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    """At exit, let every worker finish its pass before Python tears down (see `Batcher.close`)."""
    for batcher in list(_batchers):
        batcher.close(timeout=10.0)
