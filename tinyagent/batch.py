"""Many questions in parallel threads, results in question order, failures recorded rather than raised.

Threads suit agents behind HTTP model servers (OpenAIChatModel): the time goes to waiting on the
server, and one model instance is shared safely. Each question gets a fresh Agent from
`agent_factory`, so no conversation state is shared between runs.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass

from .agent import Agent, AgentResult
from .trace import redact

log = logging.getLogger(__name__)


@dataclass
class BatchItem:
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
    agent_factory: Callable[[], Agent],
    questions: Iterable[str],
    concurrency: int = 8,
    on_done: Callable[[BatchItem], None] | None = None,
) -> list[BatchItem]:
    """Answer every question with `concurrency` threads; return one BatchItem per question, in order.

    The default 8 is as many agents as a local `HFChatModel` decodes in one batch (`max_batch`).

    A run that raises becomes an item with `error` set (its type and message, redacted); the others
    go on. `on_done(item)` is called in the calling thread as each question finishes, in completion
    order. Ctrl-C cancels the questions not yet started, stops the running ones after their current
    step, and re-raises.
    """
    questions = list(questions)
    if int(concurrency) < 1:
        raise ValueError(f"concurrency must be at least 1, not {concurrency!r}")
    items = [BatchItem(index=i, question=q) for i, q in enumerate(questions)]
    if not items:
        return items
    cancel = threading.Event()
    pool = ThreadPoolExecutor(max_workers=min(int(concurrency), len(items)), thread_name_prefix="tinyagent")
    try:
        pending: set[Future] = {pool.submit(_run_one, agent_factory, item, cancel) for item in items}
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                _report(future.result(), on_done)
    except BaseException:
        cancel.set()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    return items


class Cancelled(Exception):
    """The batch was interrupted while this question ran."""


def _run_one(agent_factory: Callable[[], Agent], item: BatchItem, cancel: threading.Event) -> BatchItem:
    """Fill in `item`; never raises an Exception (KeyboardInterrupt / SystemExit still pass)."""
    started = time.perf_counter()
    try:
        if cancel.is_set():
            raise Cancelled("batch interrupted")
        agent = agent_factory()
        agent.on_step = _stop_when(cancel, agent.on_step)
        item.result = agent.run(item.question)
        if item.result.stop_reason == "model_error":  # the steps are kept; the error is what is reported
            item.error = item.result.error
    except Exception as e:
        item.error = one_line_error(e)
        log.info("question %d failed: %s", item.index, item.error)
    item.seconds = time.perf_counter() - started
    return item


def _stop_when(cancel: threading.Event, on_step: Callable | None) -> Callable:
    """The agent's own on_step, then a check that ends the run once the batch is cancelled."""
    def step_done(step) -> None:
        if on_step is not None:
            on_step(step)
        if cancel.is_set():
            raise Cancelled("batch interrupted")
    return step_done


def _report(item: BatchItem, on_done: Callable[[BatchItem], None] | None) -> None:
    if on_done is None:
        return
    try:
        on_done(item)
    except Exception:  # a broken progress display must not cost the batch its results
        log.exception("on_done callback failed for question %d", item.index)


def one_line_error(error: BaseException, limit: int = 300) -> str:
    """`Type: message` on one line, secrets redacted, at most `limit` characters."""
    message = " ".join(str(error).split())
    text = redact(f"{type(error).__name__}: {message}" if message else type(error).__name__)
    return text if len(text) <= limit else text[: limit - 3] + "..."
