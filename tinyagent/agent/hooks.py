"""Hooks: your code around each part of a run, to watch it or change it.

A `Hooks` subclass overrides the methods it needs; `Agent(hooks=[...])` calls them in list order
before each part and in reverse order after it, so the first hook wraps the others (put tracing
last: its spans then time the call alone). Approval (approval.py) and OpenTelemetry tracing
(telemetry.py) are hooks; so can be a cache of tool results or a token budget.

- `before_run(run)` / `after_run(run)`: `run.result` is final in `after_run`.
- `before_model(call)` may change `call.messages` (this call's prompt only) and `call.options`, or set
  `call.reply` (the model is then not called); `after_model(call)` sees `call.reply` or `call.error`
  and may replace `call.reply`.
- `before_tool(call)` may `call.edit(arguments)`, `call.refuse(reason)` or set `call.output` (the
  tool is then not run, nor the hooks after this one); `after_tool(call)` sees `call.output`,
  `call.kind` and `call.error` and may replace `call.output`.
- `on_step(step)`: after each step is recorded, like `Agent(on_step=...)`.

Every `after_*` runs for each hook whose `before_*` ran, also when the model or a later hook
raised. A hook that raises ends the run like a model error: stop_reason "hook_error", the steps
so far kept, `result.error` naming the hook. KeyboardInterrupt passes through.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ..format.arguments import read_arguments
from ..format.kinds import StepKind
from ..format.messages import Message
from ..models.model import BaseModel
from ..text import one_line
from ..tools.tool import Tool
from .results import AgentResult, Step

log = logging.getLogger(__package__)


@dataclass
class Run:
    """The run in progress, as hooks see it."""

    question: str
    lang: str
    result: AgentResult  # the steps and usage so far; final in after_run
    model: BaseModel
    tools: dict[str, Tool]
    stop: Callable[[], None]  # end the run after the step in progress (`Agent.stop`)


@dataclass
class ModelCall:
    """One call of the model: for a step, the forced answer at the turn cap, or distilling an observation."""

    run: Run | None
    index: int  # the step it is for
    purpose: str  # "step", "working", "correction", "answer", "forced_answer" or "distill"
    messages: list[Message]
    options: dict  # the keywords for `model.generate` (stop, max_new_tokens, constraint, ...)
    reply: str | None = None
    error: BaseException | None = None
    seconds: float = 0.0


@dataclass
class ToolCall:
    """One tool call the model asked for, after its arguments were checked."""

    run: Run | None  # None for `call_plugin`, outside a run
    step: Step
    tool: Tool
    arguments: dict
    output: str | None = None  # the tool's output (or its error text), redacted
    kind: StepKind = StepKind.ACTION  # action, tool_error or edited once it ran
    error: str | None = None
    refusal: str | None = None  # why it was refused (then it does not run)
    edited_from: dict | None = None  # the model's arguments, when a hook edited them
    seconds: float = 0.0

    @property
    def name(self) -> str:
        return self.tool.name_for_model

    def edit(self, arguments: dict | str) -> None:
        """Run with these arguments instead: checked like the model's (JSON text is read as the model's
        would be); raises ActionInputError or ToolError when they do not fit."""
        parsed = read_arguments(arguments, self.tool) if isinstance(arguments, str) else arguments
        checked = self.tool.validate(parsed)
        self.edited_from = self.edited_from if self.edited_from is not None else self.arguments
        self.arguments = checked

    def refuse(self, reason: str) -> None:
        """Do not run it; the model reads `reason` as the observation."""
        self.refusal = " ".join(str(reason).split()) or "refused"

    @property
    def settled(self) -> bool:
        """Refused, or answered by a hook: no tool runs, and no later before_tool hook."""
        return self.refusal is not None or self.output is not None


class Hooks:
    """Override what you need; every method is a no-op here."""

    def before_run(self, run: Run) -> None: ...

    def after_run(self, run: Run) -> None: ...

    def before_model(self, call: ModelCall) -> None: ...

    def after_model(self, call: ModelCall) -> None: ...

    def before_tool(self, call: ToolCall) -> None: ...

    def after_tool(self, call: ToolCall) -> None: ...

    def on_step(self, step: Step) -> None: ...


class HookFailed(Exception):
    """A hook raised; `message` names it and says what (one line, redacted)."""

    def __init__(self, where: str, error: Exception):
        self.message = f"the hook {where} raised {one_line(error)}"
        super().__init__(self.message)


def guarded(fn: Callable, where: str, *args) -> None:
    """fn(*args), its failure a HookFailed naming `where`."""
    try:
        fn(*args)
    except HookFailed:
        raise
    except Exception as e:
        log.info("hook %s failed", where, exc_info=True)
        raise HookFailed(where, e) from e


def notify(hooks: list[Hooks], method: str, *args) -> None:
    """Each hook's `method`, in order."""
    for hook in hooks:
        guarded(getattr(hook, method), f"{type(hook).__name__}.{method}", *args)


_NO_HOOKS = contextlib.nullcontext()


def around(
    hooks: list[Hooks], part: str, call, settled: Callable[[object], bool] | None = None
) -> contextlib.AbstractContextManager:
    """before_<part> of each hook (until `settled(call)`), the body, then after_<part> of those that ran,
    in reverse, whatever happened in between; the first hook failure is raised once all have run. With no
    hooks, a context that does nothing."""
    return _around(hooks, part, call, settled) if hooks else _NO_HOOKS


@contextlib.contextmanager
def _around(hooks: list[Hooks], part: str, call, settled: Callable[[object], bool] | None) -> Iterator[None]:
    ran: list[Hooks] = []
    failure: HookFailed | None = None
    try:
        for hook in hooks:
            guarded(getattr(hook, f"before_{part}"), f"{type(hook).__name__}.before_{part}", call)
            ran.append(hook)
            if settled is not None and settled(call):
                break
        yield
    except HookFailed as e:
        failure = e
    finally:
        for hook in reversed(ran):
            try:
                guarded(getattr(hook, f"after_{part}"), f"{type(hook).__name__}.after_{part}", call)
            except HookFailed as e:
                failure = failure or e
    if failure is not None:
        raise failure
