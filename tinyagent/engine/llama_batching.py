"""Concurrent generate calls on one llama.cpp context, stepped together (continuous batching).

llama.cpp's server runs its parallel slots this way (`tools/server`, `examples/parallel`): each
`llama_decode` carries the last chosen token of every sequence that is generating, then chunks of the
prompts still being read, up to the context's batch size. One pass reads every weight once whatever it
carries, so eight agents stepping together cost far less than eight passes.

A worker thread owns the context while calls are in flight (each `generate` call waits for its own
request). Each pass it admits waiting requests (at most `max_batch` in flight, each on an idle
sequence of `SequencePool`, which also decides what of the prompt the cache already holds), builds one
batch, decodes it, and lets every request whose tokens are all in choose its next token with its own
`ReplyChooser` (logits processors, the step format, repetition rules, sampling), stop strings, end ids,
budget and cancel event; its stream is written in the caller's own thread, so a slow reader holds up
no one else. A request that ends (or fails, or whose caller leaves) gives its
sequence back at once: kept for its conversation's next call, or dropped after a failure.

A request whose prompt shares at least `SHARE_MIN` more tokens with one still reading it (agents
started together with one system prompt) waits until that start is in, then copies it instead of
computing it again. Each sequence has a stream of cells of its own, as long as the context window, so a
request that fits the window always has room; a new conversation takes an idle sequence, the least
recently used first.
"""

from __future__ import annotations

import atexit
import logging
import queue
import threading
import time
import weakref
from dataclasses import dataclass, field

from ..text import StopHoldback, stop_index
from .prefix_cache import common_prefix_length
from .sampling import ReplyChooser
from .sequences import SequencePool
from .streaming import PieceText

SHARE_MIN = 64  # tokens a request must gain by waiting for another's start before it waits for it

log = logging.getLogger(__name__)


@dataclass
class Request:
    """One `generate` call: its prompt, how it chooses and ends, and what it produced."""

    ids: list[int]
    chooser: ReplyChooser
    budget: int  # most tokens to generate
    stop: list[str]
    end_ids: frozenset[int]
    piece: object  # token -> bytes
    holdback: StopHoldback | None = None
    cancel: threading.Event | None = None
    reuse: bool = True
    seq: int | None = None
    reused: int = 0  # prompt tokens the cache held already
    fed: int = 0  # positions of `seq` holding this request's tokens
    todo: list[int] = field(default_factory=list)  # not fed yet: the prompt's rest, then the last chosen token
    new: list[int] = field(default_factory=list)
    reply: PieceText | None = None
    text: str = ""
    error: BaseException | None = None
    left: bool = False  # the caller stopped waiting (it was interrupted, or its stream failed)
    done: threading.Event = field(default_factory=threading.Event)
    texts: queue.SimpleQueue = field(default_factory=queue.SimpleQueue)  # each text so far, then None: the stream

    @property
    def decoding(self) -> bool:
        return len(self.todo) == 1 and self.fed >= len(self.ids)

    def stopped(self) -> bool:
        return self.left or (self.cancel is not None and self.cancel.is_set())


class LlamaBatcher:
    """Runs a runtime's generation for all threads at once (see the module docstring)."""

    def __init__(self, runtime, pool: SequencePool, max_batch: int = 8):
        self.runtime, self.pool = runtime, pool
        self.max_batch = max(1, min(max_batch, pool.size))
        self._cond = threading.Condition()
        self._waiting: list[Request] = []
        self._rows: list[Request] = []  # in flight, in arrival order
        self._worker: threading.Thread | None = None
        self._closing = False
        self._clear = False
        _batchers.add(self)

    # --- callers -----------------------------------------------------------------------------

    def run(self, request: Request) -> Request:
        """Generate for `request` beside the other calls; returns it done (its error raised)."""
        request.reply = PieceText(request.piece)
        with self._cond:
            if self._closing:
                raise RuntimeError("the model is closed")
            self._waiting.append(request)
            if self._worker is None:
                self._worker = threading.Thread(target=self._loop, name="tinyagent-llama", daemon=True)
                self._worker.start()
            self._cond.notify_all()
        try:
            if request.holdback is not None:  # streamed in the caller's thread: a slow reader holds up no one
                while (text := request.texts.get()) is not None:
                    request.holdback.update(text)
            request.done.wait()
        except BaseException:  # interrupted: the worker ends the request at its next pass and frees its sequence
            request.left = True
            raise
        if request.error is not None:
            raise request.error
        return request

    def clear(self) -> None:
        """Forget the kept conversations (those in flight when their call ends)."""
        with self._cond:
            if self._worker is None:
                self.pool.clear()
            else:
                self._clear = True

    def in_flight(self) -> int:
        with self._cond:
            return len(self._rows) + len(self._waiting)

    def close(self, timeout: float | None = 30.0) -> None:
        """Stop the worker after its current pass (calls in flight get an error) and wait for it: a thread
        inside llama.cpp when Python exits can crash the process."""
        with self._cond:
            self._closing, worker = True, self._worker
        if worker is not None and worker is not threading.current_thread():
            worker.join(timeout)

    # --- the worker ----------------------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            with self._cond:
                if self._closing:
                    for r in [*self._waiting, *self._rows]:
                        self._finish(r, RuntimeError("the model was closed while generating"))
                    self._waiting, self._rows, self._worker = [], [], None
                    return
                if self._clear:
                    self.pool.clear()
                    self._clear = False
                self._admit()
                if not self._rows:
                    if self._waiting:  # every sequence busy cannot happen with no rows: a bug, not a hang
                        for r in self._waiting:
                            self._finish(r, RuntimeError("no llama.cpp sequence is free"))
                        self._waiting = []
                    self._worker = None
                    return
            try:
                self._pass()
            except BaseException as e:  # noqa: BLE001  (a bug: the calls in flight fail, the thread goes on)
                log.exception("batched llama.cpp generation failed")
                for r in self._rows:
                    self._finish(r, e, keep=False)
            self._rows = [r for r in self._rows if not r.done.is_set()]

    def _admit(self) -> None:
        """Start waiting requests in arrival order while a place and a sequence are free; a request
        whose start another in flight is still reading waits for it (it will share those cells)."""
        still: list[Request] = []
        for r in self._waiting:
            if r.stopped():
                self._finish(r, None)
                continue
            if len(self._rows) >= self.max_batch or self._reading_its_start(r):
                still.append(r)
                continue
            try:
                taken = self.pool.take(r.ids, r.reuse, leave=2)  # the prompt's last row from a batch, as a
                # full prefill computes it (llama.cpp's one-token kernels round differently: `chunks`)
            except BaseException as e:  # noqa: BLE001  (this request's failure)
                self._finish(r, e)
                continue
            if taken is None:
                still.append(r)
                continue
            r.seq, r.reused = taken
            r.fed, r.todo = r.reused, r.ids[r.reused :]
            self._rows.append(r)
        self._waiting = still

    def _reading_its_start(self, request: Request) -> bool:
        if not request.reuse:
            return False
        coming = max(
            (
                min(common_prefix_length(other.ids, request.ids), len(request.ids) - 2)
                for other in self._rows
                if other.fed < len(other.ids)
            ),
            default=0,
        )
        return coming >= SHARE_MIN and coming >= self.pool.shared(request.ids, leave=2) + SHARE_MIN

    def _pass(self) -> None:
        """One llama_decode: every decoding request's token, then prompt chunks up to the batch size."""
        for r in self._rows:
            if r.stopped():
                self._finish(r, None)
        rows = [r for r in self._rows if not r.done.is_set()]
        decoding = [r for r in rows if r.decoding]
        plan = self._plan(decoding, [r for r in rows if not r.decoding])
        if not plan:
            return
        code = self._decode(plan)
        if code == 1:  # no free cell in a stream: cannot happen within the context window, but never a hang
            newest = max((r for r, _ in plan), key=self._rows.index)
            self._finish(
                newest,
                RuntimeError(
                    f"llama.cpp's KV cache is full (a conversation holds {self.runtime.context_window} cells)"
                ),
                keep=False,
            )
            return
        if code != 0:
            error = RuntimeError(f"llama_decode failed (code {code})")
            for r, _ in plan:
                self._finish(r, error, keep=False)
            raise error
        index = 0
        for r, n in plan:
            self.pool.extend(r.seq, r.todo[:n])
            r.fed += n
            r.todo = r.todo[n:]
            index += n
            if not r.todo:
                self._choose(r, index - 1)

    def _plan(self, decoding: list[Request], reading: list[Request]) -> list[tuple[Request, int]]:
        """(request, tokens) of the next pass: a token of each decoding request, then prompt chunks in
        arrival order while the batch has room. A chunk is never a lone token unless the whole rest is
        (see `llama_runtime.chunks`)."""
        room = self.runtime.batch_size - len(decoding)
        plan = [(r, 1) for r in decoding]
        for r in reading:
            if room <= 0:
                break
            n = min(room, len(r.todo))
            if len(r.todo) - n == 1:
                n -= 1
            if n > 0:
                plan.append((r, n))
                room -= n
        return plan

    def _decode(self, plan: list[tuple[Request, int]]) -> int:
        rows = []
        for r, n in plan:
            last = n == len(r.todo)
            rows += [(t, r.fed + i, r.seq, last and i == n - 1) for i, t in enumerate(r.todo[:n])]
        return self.runtime.decode(rows, decoding=sum(1 for r, n in plan if r.decoding))

    def _choose(self, r: Request, index: int) -> None:
        """The request's next token from its logits row `index`; ends the request when that ends it."""
        try:
            token = r.chooser.choose(r.new, self.runtime.logits(index))
            r.new.append(token)
            if token in r.end_ids:
                self._finish(r, None)
                return
            r.text = r.reply.add(token)
            if r.holdback is not None:
                r.texts.put(r.text)
            if (r.stop and stop_index(r.text, r.stop) is not None) or len(r.new) >= r.budget or r.stopped():
                self._finish(r, None)
                return
            r.todo = [token]
        except BaseException as e:  # noqa: BLE001  (this request's failure only)
            self._finish(r, e, keep=False)

    def _finish(self, r: Request, error: BaseException | None, keep: bool = True) -> None:
        """Give the request's sequence back (kept unless it failed, or its prompt was not all read) and
        wake its caller."""
        if r.done.is_set():
            return
        if r.seq is not None:
            self.pool.release(r.seq, keep=keep and r.reuse and error is None and r.fed >= len(r.ids))
            r.seq = None
        if error is None and r.reply is not None:
            r.text = r.reply.final()
        r.error = error
        r.done.set()
        r.texts.put(None)


_batchers: weakref.WeakSet = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    """At exit, let every worker finish its pass before Python tears down (see `LlamaBatcher.close`)."""
    for batcher in list(_batchers):
        batcher.close(timeout=10.0)


def wait_idle(batcher: LlamaBatcher, timeout: float = 10.0) -> bool:
    """True once no call is in flight (for tests and benchmarks)."""
    deadline = time.monotonic() + timeout
    while batcher.in_flight() and time.monotonic() < deadline:
        time.sleep(0.01)
    return not batcher.in_flight()
