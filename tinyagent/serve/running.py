"""One question answered by a fresh Agent in a worker thread, for the async servers: what the run shows while it
works arrives on the event loop as text (`AgentRun.deltas`), a run can be stopped from there, and `Admission`
bounds how many run at once and how many wait for a turn.

The shown text (`Reasoning`) is the model's replies as it writes them and each step's observation after it,
redacted; a tail that could be the start of a secret is held back until the next text shows what it is.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Callable

from ..agent import Agent, AgentResult, Step
from ..format.observations import observation_line
from ..redaction import redact, secrets
from ..text import one_line
from .conversation import Conversation

log = logging.getLogger(__name__)

#: factory(on_step=..., on_text=...) -> a new Agent (one per request; they share the model and tools)
AgentFactory = Callable[..., Agent]
_DONE = object()


class Reasoning:
    """The text a run shows, for people: its replies as written and its observations; `add_*` return what
    may be sent now (redacted, without a tail that could begin a secret), `finish` the rest."""

    def __init__(self):
        self.raw = ""  # everything written so far, unredacted (never sent as it is)
        self.sent = ""  # what was sent: each call's return value, joined
        self._streamed = False

    def add_text(self, text: str) -> str:
        self.raw += text
        self._streamed = self._streamed or bool(text)
        return self._flush()

    def add_step(self, step: Step) -> str:
        if not self._streamed:  # a model that does not stream: the step's reply, whole
            self.raw += step.text.lstrip(" ")
        self.raw += "" if not self.raw or self.raw.endswith("\n") else "\n"
        line = observation_line(step)
        self.raw += line + "\n" if line is not None else ""
        self._streamed = False
        return self._flush()

    def finish(self) -> str:
        return self._flush(final=True)

    def _flush(self, final: bool = False) -> str:
        shown = redact(self.raw)
        if not final:
            for secret in secrets():
                for k in range(min(len(secret) - 1, len(shown)), 0, -1):
                    if shown.endswith(secret[:k]):
                        shown = shown[:-k]
                        break
        if not shown.startswith(self.sent):  # redaction changed text already sent (a URL grew credentials)
            return ""
        delta, self.sent = shown[len(self.sent) :], shown
        return delta


class AgentRun:
    """`conversation`'s question answered by `factory()`'s Agent in a thread of its own (start it with
    `start`). `deltas()` yields (shown text, None) as the model writes and (shown text, step) as each step
    ends, and ends when the run does; then `result` (or `error`, for a bug that escaped the run) is set.
    `stop()` ends the run after its current step. `on_end` is called from the worker thread when the run
    is over.

    Text written while the event loop has not yet taken the last piece is joined to it: one wake-up of the
    loop (and one chunk sent) per batch, not per token, however fast the model writes."""

    def __init__(self, factory: AgentFactory, conversation: Conversation, on_end: Callable[[], None] = lambda: None):
        self.loop = asyncio.get_running_loop()
        self.conversation, self.on_end = conversation, on_end
        self.reasoning = Reasoning()
        self.result: AgentResult | None = None
        self.error: BaseException | None = None
        self._ready = asyncio.Event()  # set on the loop when `_pending` has something
        self._pending: list = []  # (text, step) items and finally _DONE, taken by `deltas`
        self._woken = False  # a wake-up of the loop is on its way
        self._lock = threading.Lock()
        self.agent = factory(
            on_step=lambda step: self._put(self.reasoning.add_step(step), step),
            on_text=lambda text: self._put(self.reasoning.add_text(text)),
        )
        self._thread = threading.Thread(target=self._work, name="tinyagent-serve", daemon=True)

    def start(self) -> AgentRun:
        self._thread.start()
        return self

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def stop(self) -> None:
        if self.running:
            self.agent.stop()

    async def deltas(self) -> AsyncIterator[tuple[str, Step | None]]:
        while True:
            await self._ready.wait()
            self._ready.clear()
            with self._lock:
                items, self._pending, self._woken = self._pending, [], False
            for item in items:
                if item is _DONE:
                    return
                yield item

    def _work(self) -> None:
        try:
            self.result = self.agent.run(self.conversation.question, history=self.conversation.history)
            log.info("run ended: %s after %d steps", self.result.stop_reason, len(self.result.steps))
        except BaseException as e:  # a bug: the request fails with one line, the server goes on
            log.warning("run failed: %s", one_line(e), exc_info=e)
            self.error = e
        finally:
            self._put(self.reasoning.finish())
            self._put(_DONE)
            self.on_end()

    def _put(self, text, step: Step | None = None) -> None:
        """From the worker thread: `text` (and the step that ended, if any), or _DONE, for `deltas`."""
        if text == "" and step is None:
            return
        with self._lock:
            last = self._pending[-1] if self._pending else None
            if text is not _DONE and step is None and last is not None and last is not _DONE and last[1] is None:
                self._pending[-1] = (last[0] + text, None)
            else:
                self._pending.append(text if text is _DONE else (text, step))
            if self._woken:
                return
            self._woken = True
        try:
            self.loop.call_soon_threadsafe(self._ready.set)
        except RuntimeError:  # the event loop is closed: the server has shut down, nobody is listening
            pass


class Full(Exception):
    """As many runs as allowed are running and as many requests as allowed are waiting."""


class Admission:
    """At most `max_runs` runs at once; at most `max_waiting` more requests wait for a turn (in arrival
    order), and further ones are refused (`admit` raises Full). Used from one event loop."""

    def __init__(self, max_runs: int, max_waiting: int):
        self.max_runs, self.max_waiting = max_runs, max_waiting
        self._slots = asyncio.Semaphore(max_runs)
        self.waiting = 0
        self.runs: set[AgentRun] = set()  # those running, so that a shutdown can stop them

    def admit(self) -> None:
        """Refuse now, before a response starts, a request that could only wait beyond the limit."""
        if self._slots.locked() and self.waiting >= self.max_waiting:
            raise Full(
                f"the server is answering {self.max_runs} questions and {self.waiting} more are waiting: "
                "try again shortly"
            )

    async def enter(self, gone: asyncio.Event) -> bool:
        """Wait for a turn; False when `gone` is set first (the client went away)."""
        self.waiting += 1
        acquired = asyncio.ensure_future(self._slots.acquire())
        left = asyncio.ensure_future(gone.wait())
        try:
            await asyncio.wait({acquired, left}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:  # cancelled while waiting: a turn it got meanwhile goes back
            self._give_back(acquired)
            raise
        finally:
            self.waiting -= 1
            left.cancel()
        if gone.is_set():
            self._give_back(acquired)
            return False
        return True

    def _give_back(self, acquired: asyncio.Future) -> None:
        if acquired.done() and not acquired.cancelled():
            self._slots.release()
        else:
            acquired.cancel()

    def start(self, factory: AgentFactory, conversation: Conversation) -> AgentRun:
        """A run in the turn `enter` gave; the turn is handed back when its thread ends (not when the
        client goes: a stopped run still finishes its step)."""
        loop = asyncio.get_running_loop()
        run = None

        def ended() -> None:
            def release() -> None:
                self.runs.discard(run)
                self._slots.release()

            try:
                loop.call_soon_threadsafe(release)
            except RuntimeError:  # the loop is closed: the server has shut down
                pass

        try:
            run = AgentRun(factory, conversation, on_end=ended)
            self.runs.add(run)
            return run.start()
        except BaseException:  # the agent could not be made: the turn is handed back at once
            ended()
            raise

    def stop_all(self) -> None:
        for run in list(self.runs):
            run.stop()
