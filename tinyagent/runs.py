"""Many agent runs in threads (layer 4): results in question order, failures recorded rather than raised.

Not the engine's batching (engine/batching.py), though it feeds it: runs in threads on one local
model decode together there.

Threads suit agents behind HTTP model servers (OpenAIChatModel): the time goes to waiting on the
server, and one model instance is shared safely. Each question gets a fresh Agent from
`agent_factory`, so no conversation state is shared between runs. Each run starts in a copy of the
caller's context variables, so what the caller set (an OpenTelemetry span, above all) is the parent
of what the run records, as if it ran in the caller's thread.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass

from .agent import Agent, AgentResult, DirectAnswer, StopReason
from .text import one_line

log = logging.getLogger(__name__)

#: What runs one question: the agent, or the model alone (`DirectAnswer`, the eval's baseline).
Runner = Agent | DirectAnswer


@dataclass
class RunItem:
    """One question's outcome: a result, or the one-line error that ended its run."""

    index: int
    question: str
    result: AgentResult | None = None
    error: str | None = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None


def run_many(
    agent_factory: Callable[[], Runner],
    questions: Iterable[str],
    concurrency: int = 8,
    on_done: Callable[[RunItem], None] | None = None,
) -> list[RunItem]:
    """Answer every question with `concurrency` threads; return one RunItem per question, in order.

    The default 8 is as many agents as a local `HFChatModel` decodes in one batch (`max_batch`).

    A run that raises becomes an item with `error` set (its type and message, redacted); the others
    go on. `on_done(item)` is called in the calling thread as each question finishes, in completion
    order. Ctrl-C cancels the questions not yet started, stops the running ones after their current
    step, and re-raises. A run that raises KeyboardInterrupt itself does the same, once the runs in
    progress have ended (their finished questions are reported first).
    """
    questions = list(questions)
    if int(concurrency) < 1:
        raise ValueError(f"concurrency must be at least 1, not {concurrency!r}")
    items = [RunItem(index=i, question=q) for i, q in enumerate(questions)]
    if not items:
        return items
    cancel = threading.Event()
    pool = ThreadPoolExecutor(max_workers=min(int(concurrency), len(items)), thread_name_prefix="tinyagent")
    try:
        order = {
            pool.submit(contextvars.copy_context().run, _run_one, agent_factory, item, cancel): item.index
            for item in items
        }
        pending: set[Future] = set(order)
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            interrupt = _report_done(done, order, on_done)
            if interrupt is not None:
                cancel.set()
                for future in pending:
                    future.cancel()  # not started yet
                _report_done(wait(pending)[0], order, on_done)
                raise interrupt
    except BaseException:
        cancel.set()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    return items


class Cancelled(Exception):
    """The batch was interrupted while this question ran."""


def _run_one(agent_factory: Callable[[], Runner], item: RunItem, cancel: threading.Event) -> RunItem:
    """Fill in `item`; never raises an Exception (KeyboardInterrupt / SystemExit still pass)."""
    started = time.perf_counter()
    try:
        if cancel.is_set():
            raise Cancelled("batch interrupted")
        agent = agent_factory()
        agent.on_step = _stop_when(cancel, agent)
        item.result = agent.run(item.question)
        if cancel.is_set() and item.result.stop_reason == StopReason.STOPPED:
            raise Cancelled("batch interrupted")
        if item.result.stop_reason.failed:  # the steps are kept; the error is what is reported
            item.error = item.result.error
    except Exception as e:
        item.error = one_line(e, whole=True)
        log.info("question %d failed: %s", item.index, item.error)
    item.seconds = time.perf_counter() - started
    return item


def _stop_when(cancel: threading.Event, agent: Agent) -> Callable:
    """The agent's own on_step, then a check that stops the run once the batch is cancelled (a step
    that answers ends the run anyway, so its answer is kept)."""
    on_step = agent.on_step

    def step_done(step) -> None:
        if on_step is not None:
            on_step(step)
        if cancel.is_set() and step.final_answer is None:
            agent.stop()

    return step_done


def _report_done(
    done: set[Future], order: dict[Future, int], on_done: Callable[[RunItem], None] | None
) -> BaseException | None:
    """Report the finished runs in question order; the first KeyboardInterrupt / SystemExit a run
    raised, if any (a cancelled run is not reported)."""
    interrupt = None
    for future in sorted((f for f in done if not f.cancelled()), key=order.__getitem__):
        error = future.exception()
        if error is not None:
            interrupt = interrupt or error
            continue
        item = future.result()
        if not (item.error or "").startswith(Cancelled.__name__):
            _report(item, on_done)
    return interrupt


def _report(item: RunItem, on_done: Callable[[RunItem], None] | None) -> None:
    if on_done is None:
        return
    try:
        on_done(item)
    except Exception:  # a broken progress display must not cost the batch its results
        log.exception("on_done callback failed for question %d", item.index)
