"""Progress of a long evaluation: questions done, right so far and the time left. On a terminal, one bar
redrawn in place; piped to a file or another program, one plain line per question (no control characters)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TextIO

from ..text import escape_controls

BAR_WIDTH = 24  # characters of the bar on a terminal


def duration(seconds: float) -> str:
    """`42s`, `3m05s`, `1h02m`."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def question_line(record: dict, mode: str = "agent") -> str:
    """What one finished question says: its mark, id, steps (agent), seconds and what went wrong."""
    mark = "ok  " if record["success"] else "FAIL"
    if mode == "direct":  # one reply: "format-valid" means it ended with the answer line
        notes = [] if record["format_valid"] or record["error"] else ["no answer line"]
    else:
        notes = [] if record["format_valid"] else ["format-error"]
    if record["tool_errors"]:
        notes.append(f"tool-errors={len(record['tool_errors'])}")
    if record.get("refused_calls") or record.get("edited_calls"):
        notes.append(f"refused={record['refused_calls']} edited={record['edited_calls']}")
    if record["error"]:
        notes.append(f"error: {record['error']}")
    steps = f"  steps={record['steps']}" if mode != "direct" else ""
    return escape_controls(
        f"{mark} {record['id']}{steps}  {record['seconds']:.1f}s"  # the error may quote a server
        + (f"  ({', '.join(notes)})" if notes else "")
    )


class Progress:
    """Call `update(record)` as each question finishes and `close()` at the end.

    The time left is the time so far per finished question times those left: questions run at once, so
    it is the throughput that counts, not one question's seconds.
    """

    def __init__(
        self,
        total: int,
        mode: str,
        stream: TextIO,
        tty: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
        kept: list[dict] = (),
    ):
        self.total, self.mode, self.stream, self.clock = total, mode, stream, clock
        self.tty = bool(getattr(stream, "isatty", lambda: False)()) if tty is None else tty
        # `kept`: an earlier run's records (--resume), counted as done but not in the time per question
        self.started, self.done, self.right, self.new = clock(), len(kept), sum(bool(r["success"]) for r in kept), 0

    def left(self) -> str:
        if not self.new:
            return "?"
        return duration((self.clock() - self.started) / self.new * (self.total - self.done))

    def update(self, record: dict) -> None:
        self.done += 1
        self.new += 1
        self.right += bool(record["success"])
        status = f"right {self.right}/{self.done}  ~{self.left()} left"
        if self.tty:
            filled = BAR_WIDTH * self.done // max(self.total, 1)
            bar = "#" * filled + "." * (BAR_WIDTH - filled)
            self.stream.write(f"\r\033[K{self.mode} [{bar}] {self.done}/{self.total}  {status}  {record['id']}")
        else:
            self.stream.write(f"{self.mode} [{self.done}/{self.total}] {question_line(record, self.mode)}  {status}\n")
        self.stream.flush()

    def close(self) -> None:
        """End the bar's line on a terminal, with the elapsed time."""
        if self.tty and self.done:
            self.stream.write(
                f"\r\033[K{self.mode}: {self.done}/{self.total} done, right {self.right}, "
                f"in {duration(self.clock() - self.started)}\n"
            )
            self.stream.flush()
