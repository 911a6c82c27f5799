"""Text as it is generated: decode the new tokens and hold back what may turn into a stop string.

`on_text` must only ever receive text that ends up in the returned text, so a tail such as
"Obser" (maybe the start of "Observation:") waits until the next tokens show what it is.
"""
from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterable, Iterator

from .base import TextCallback, trim_at_stop

log = logging.getLogger(__name__)


def partial_stop_length(text: str, stop: Iterable[str]) -> int:
    """Length of the longest tail of `text` that is a proper prefix of some stop string."""
    best = 0
    for s in stop:
        for k in range(min(len(s) - 1, len(text)), best, -1):
            if text.endswith(s[:k]):
                best = k
                break
    return best


class StopHoldback:
    """Feeds `on_text` with the safe part of the text generated so far.

    `update(text)` takes everything generated so far; `finish(final)` sends what is left of the
    returned text, so the chunks sent always concatenate to exactly `final`.
    """

    def __init__(self, on_text: TextCallback, stop: Iterable[str] | None):
        self.on_text = on_text
        self.stop = [s for s in stop or () if s]
        self.sent = ""
        self.stopped = False

    def update(self, text: str) -> None:
        if self.stopped:
            return
        safe = trim_at_stop(text, self.stop)
        if len(safe) < len(text):
            self.stopped = True
        else:
            safe = text[: len(text) - partial_stop_length(text, self.stop)]
        self._send(safe)

    def finish(self, final: str) -> None:
        if final.startswith(self.sent):
            self._send(final)
        else:  # the decoder revised text it had already shown; nothing sensible left to send
            log.warning("streamed text diverged from the final text; the stream ends early")

    def _send(self, text: str) -> None:
        if len(text) > len(self.sent) and text.startswith(self.sent):
            chunk, self.sent = text[len(self.sent):], text
            self.on_text(chunk)


def make_streamer(decode: Callable[[list[int]], str], holdback: StopHoldback):
    """A transformers streamer that decodes the generated ids so far and updates `holdback`.

    `generate` first puts the prompt, then each new token; the prompt is skipped. Text ending in
    an incomplete UTF-8 character (U+FFFD) waits for the next token.
    """
    from transformers.generation import BaseStreamer

    class _Streamer(BaseStreamer):
        def __init__(self) -> None:
            self.ids: list[int] = []
            self.prompt_seen = False

        def put(self, value) -> None:
            if not self.prompt_seen:
                self.prompt_seen = True
                return
            self.ids.extend(int(i) for i in value.reshape(-1).tolist())
            holdback.update(decode(self.ids).rstrip("\ufffd"))

        def end(self) -> None:
            pass

    return _Streamer()


class CancelCriterion:
    """A transformers stopping criterion that is true once `event` is set."""

    def __init__(self, event: threading.Event):
        self.event = event

    def __call__(self, input_ids, scores, **kwargs):
        import torch

        return torch.full((input_ids.shape[0],), self.event.is_set(), dtype=torch.bool, device=input_ids.device)


def stream_in_thread(run: Callable[[TextCallback, threading.Event], object]) -> Iterator[str]:
    """The text chunks `run(on_text, cancel)` produces in a background thread, as an iterator.

    The worker waits while a chunk is not taken, so it never runs more than a chunk or two ahead;
    closing or abandoning the iterator sets `cancel` and waits for the worker to end (so the model
    is free again). Whatever the worker raises, `BaseException` included, is raised here.
    """
    chunks: queue.Queue = queue.Queue(maxsize=1)
    cancel = threading.Event()
    done = object()

    def hand_over(item) -> None:
        while not cancel.is_set():
            try:
                chunks.put(item, timeout=0.05)
                return
            except queue.Full:
                pass

    def work() -> None:
        try:
            run(hand_over, cancel)
            hand_over(done)
        except BaseException as e:  # noqa: BLE001  (handed to the consumer, raised there)
            hand_over(e)

    def consume() -> Iterator[str]:
        worker = threading.Thread(target=work, daemon=True)
        worker.start()
        try:
            while (item := chunks.get()) is not done:
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            cancel.set()
            worker.join()

    return consume()
