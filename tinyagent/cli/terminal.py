"""Asking on the terminal whether a tool call may run (`tinyagent ask / chat` with --approve or
agent.approve).

The question goes to the controlling terminal (/dev/tty), not to stdout (answers, --json) nor stdin
(which may carry piped questions): y runs the call, a runs it and every later call of that tool, e
edits its arguments (JSON, checked like the model's; asked again when they do not fit), n refuses
it with a reason the model reads. With no terminal the call is refused, and stderr says so.

What the person reads is what runs: the tool's name and arguments are shown with every control
character, right-to-left override, directional isolate and zero-width character escaped (`\u202e`),
so neither an escape sequence nor reordered text can make the call look like another.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Callable

from ..agent.approval import ApprovalRequest, Verdict
from ..redaction import redact
from ..text import escape_controls
from .report import note

TTY = "/dev/tty"
NO_TERMINAL = "it needs approval and there is no terminal to ask on"
CHOICES = "[y] run it  [a] always run {tool}  [e] edit the arguments  [n] refuse"


class TerminalApprover:
    """Asks on `tty` (see the module docstring); `before()` runs first, e.g. to end a streamed line."""

    def __init__(self, before: Callable[[], None] | None = None, tty: str = TTY):
        self.before, self.tty = before, tty

    def __call__(self, request: ApprovalRequest) -> Verdict:
        if self.before is not None:
            self.before()
        try:
            fd = os.open(self.tty, os.O_RDWR | os.O_NOCTTY)
        except OSError:
            note(
                f"refused {request.name}: {NO_TERMINAL} (run on a terminal, or set agent.approve: "
                f"{{{request.name}: always}})"
            )
            return Verdict.refuse(NO_TERMINAL)
        with io.TextIOWrapper(io.FileIO(fd, "r+"), encoding="utf-8", errors="replace", line_buffering=True) as tty:
            return self._ask(tty, request)

    def _ask(self, tty: io.TextIOWrapper, request: ApprovalRequest) -> Verdict:
        arguments = shown(json.dumps(request.arguments, ensure_ascii=False))
        name = shown(request.name)
        if request.problem:
            tty.write(shown(f"  those arguments do not fit: {request.problem}") + "\n")
        tty.write(f"Approve {name} {arguments}?\n  {CHOICES.format(tool=name)}\n")
        while True:
            answer = _read(tty, "> ")
            if answer is None:  # end of input (Ctrl-D)
                return Verdict.refuse("the user refused it")
            choice = answer.strip().lower()[:1]
            if choice == "y":
                return Verdict.run()
            if choice == "a":
                return Verdict.always()
            if choice == "e":
                edited = _read(tty, f"  new arguments for {name} as JSON (now {arguments}): ")
                if edited and edited.strip():
                    return Verdict.edit(edited.strip())
            elif choice == "n":
                reason = _read(tty, "  why, for the model (Enter: no reason): ")
                return Verdict.refuse((reason or "").strip() or "the user refused it")
            else:
                tty.write("  answer y, a, e or n\n")


def shown(text: str) -> str:
    """`text` as the prompt shows it: redacted, with every character that could hide or reorder what it
    says escaped."""
    return escape_controls(redact(text), invisible=True)


def _read(tty: io.TextIOWrapper, prompt: str) -> str | None:
    """One line from the terminal, or None at its end."""
    tty.write(prompt)
    tty.flush()
    line = tty.readline()
    return line.rstrip("\n") if line else None
