"""Text as a local model generates it: the streamer that decodes new tokens into a `StopHoldback`
(text.py), stopping criteria read on decoded text, and `stream()` as an iterator over a worker thread.
"""

from __future__ import annotations

import codecs
import logging
import queue
import threading
from collections.abc import Callable, Iterator

from ..text import StopHoldback, TextCallback, stop_index

log = logging.getLogger(__name__)


def make_streamer(decode: Callable[[list[int]], str], holdback: StopHoldback):
    """A transformers streamer that updates `holdback` with the text of the generated ids so far
    (`decode`, a `ReplyText`: text ending in part of a character waits for the next token).

    `generate` first puts the prompt, then each new token; the prompt is skipped.
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
            holdback.update(decode(self.ids))

        def end(self) -> None:
            pass

    return _Streamer()


class ReplyText:
    """A reply's text kept up to date as its token ids grow, decoding a short window per token rather than
    the whole reply again (for the stop check and the stream, which share one per call).

    `decode(ids)` is the tokenizer's (special tokens skipped); `context` are the prompt's last ids, so a
    leading space survives. Each new token decodes the ids since the last complete text twice (with and
    without it) and appends the difference; text ending in part of a character (U+FFFD) waits for the
    token that finishes it. Called with the reply's ids so far, it returns the reply's text.
    """

    def __init__(self, decode: Callable[[list[int]], str], context: list[int]):
        self.decode, self.context = decode, list(context)
        self._reset()

    def _reset(self) -> None:
        self.ids, self.text, self.count = list(self.context), "", 0
        self.start, self.read = 0, len(self.context)  # the window: ids[start:] decoded against ids[start:read]

    def __call__(self, new: list[int]) -> str:
        if len(new) < self.count or new[: self.count] != self.ids[len(self.context) :]:
            self._reset()  # not the same reply growing (never in a generate call): decode it afresh
        for token in new[self.count :]:
            self.ids.append(int(token))
            self.count += 1
            before = self.decode(self.ids[self.start : self.read])
            after = self.decode(self.ids[self.start :])
            if len(after) > len(before) and not after.endswith("\ufffd"):
                self.text += after[len(before) :]
                self.start, self.read = self.read, len(self.ids)
        return self.text


class PieceText:
    """A reply's text kept up to date token by token from each token's bytes (`piece(token)`), so neither
    the stop check nor the stream decodes the whole reply again. `text` holds complete characters only:
    the bytes of a character split over tokens wait for the token that finishes it."""

    def __init__(self, piece: Callable[[int], bytes]):
        self.piece = piece
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.text = ""

    def add(self, token: int) -> str:
        """Append `token`; the text so far."""
        self.text += self._decoder.decode(self.piece(token))
        return self.text

    def final(self) -> str:
        """The whole text, an unfinished character at the end written as U+FFFD."""
        self.text += self._decoder.decode(b"", final=True)
        return self.text


class TextStop:
    """A transformers stopping criterion that is true once the reply holds a stop string, read on its
    decoded text as `text.stop_index` reads it: a stop string that starts with a newline matches at
    a line start (the reply's start too), and nothing inside a `<think>` block counts. Token-level
    matching (transformers' StopStringCriteria) can do neither."""

    def __init__(self, decode: Callable[[list[int]], str], prompt_length: int, stop: list[str]):
        self.decode, self.prompt_length, self.stop = decode, prompt_length, list(stop)

    def __call__(self, input_ids, scores, **kwargs):
        import torch

        done = [stop_index(self.decode(row[self.prompt_length :].tolist()), self.stop) is not None for row in input_ids]
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)


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
