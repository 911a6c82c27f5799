"""A tool call in four parts: resolve the tool the model named, validate its arguments, guard against
a repeat of an earlier call, invoke it through the hooks (which may approve, edit or refuse it first:
approval.py); several calls of one reply together (`run_together`). Each part turns what a model or a tool
can get wrong into a step the model reads as an observation; only bugs in the agent (and hooks that raise) raise."""

from __future__ import annotations

import contextvars
import json
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from ..format.arguments import ActionInputError, check_arguments_depth, read_arguments
from ..format.kinds import StepKind
from ..format.observations import kept, refused_observation, tool_failure
from ..format.templates import Prompts
from ..redaction import redact
from ..tools.tool import Tool, ToolError, invoke
from . import hooks
from .results import Step

log = logging.getLogger(__package__)  # "tinyagent.agent", for the whole loop

DEFAULT_TOOL_TIMEOUT = 120.0  # seconds a tool call may take (`Agent(tool_timeout=)`)


def resolve(step: Step, tools: dict[str, Tool]) -> Tool:
    """The tool of a step the reply reader resolved (`read_step` names tools by name_for_model)."""
    return tools[step.action]


def validate(tool: Tool, step: Step) -> dict:
    """The step's arguments, read from its input when the reader did not parse them, checked against
    the tool's parameters; raises ActionInputError or ToolError with a message for the model."""
    arguments = step.arguments if step.arguments is not None else read_arguments(step.action_input or "", tool)
    check_arguments_depth(arguments)
    return tool.validate(arguments)


def earlier_call(step: Step, previous: list[Step]) -> Step | None:
    """An earlier step that ran the same tool with the same arguments and got a result (a call that
    failed, e.g. timed out, may be tried again)."""
    key = _key(step.arguments)
    for earlier in previous:
        if (
            earlier.action == step.action
            and earlier.arguments is not None
            and earlier.kind in _RAN
            and _key(earlier.arguments) == key
        ):
            return earlier
    return None


def call(call: hooks.ToolCall, chain: list[hooks.Hooks], timeout: float | None) -> hooks.ToolCall:
    """`call` through the before_tool hooks (which may edit it, refuse it or answer it themselves), the tool
    unless they settled it, then the after_tool hooks; its output redacted."""
    with hooks.around(chain, "tool", call, settled=hooks.ToolCall.settled.fget):
        if not call.settled:
            call.output, call.kind, call.error, call.seconds = run(call.tool, call.arguments, timeout)
        if call.refusal is None and call.kind == StepKind.ACTION and call.edited_from is not None:
            call.kind = StepKind.EDITED
    if call.output is not None:  # also an answer a hook gave: redacted, then cut to what is kept
        call.output = kept(redact(call.output))
    return call


def settle(step: Step, call: hooks.ToolCall, lang: str, prompts: Prompts) -> str | None:
    """Fill `step` in from what became of its call: the raw output to shape into its observation, or
    None when the call was refused (the observation then says why)."""
    if call.refusal is not None:
        step.kind, step.error = StepKind.REFUSED, call.refusal
        step.observation = refused_observation(call.name, call.refusal, lang, prompts)
        return None
    step.kind, step.error, step.tool_seconds = call.kind, call.error, call.seconds
    step.arguments, step.edited_from = call.arguments, call.edited_from
    return call.output


def refuse_extra(step: Step, ran: int, made: int, lang: str, prompts: Prompts) -> None:
    """A call past the protocol's cap on calls per reply (`Tools.max_calls`): not run, and the model told so."""
    step.kind, step.error = StepKind.REFUSED, f"only the first {ran} of the {made} calls of one reply run"
    step.observation = prompts.fill("tools.too_many_calls", lang, tool=step.action, ran=ran, made=made)


def run(tool: Tool, arguments: dict, timeout: float | None) -> tuple[str, StepKind, str | None, float]:
    """Invoke `tool`: (its output or an error text, redacted, then cut to what is kept (`kept`); the step
    kind; the error; seconds)."""
    t0 = time.perf_counter()
    kind, error = StepKind.ACTION, None
    try:
        raw = invoke(tool, arguments, timeout)
    except ToolError as e:
        raw, error, kind = f"Error: {e}", redact(str(e)), StepKind.TOOL_ERROR
    except Exception as e:  # a tool bug must not end the run; the model can try something else
        log.warning("tool %s raised", tool.name_for_model, exc_info=True)
        raw, error, kind = tool_failure(tool.name_for_model, e), redact(f"{type(e).__name__}: {e}"), StepKind.TOOL_ERROR
    return kept(redact(raw)), kind, kept(error) if error else error, time.perf_counter() - t0


def run_together(
    calls: list[tuple[Step, Tool]], run_one: Callable[[Step, Tool], object], together: bool = True
) -> None:
    """Run the prepared calls of one reply: at the same time when there are several, `together` and every
    tool allows it (`Tool.concurrent`), else one after another, in order; each in the caller's context."""
    if together and len(calls) > 1 and all(tool.concurrent for _, tool in calls):
        # each call in its own copy of the caller's context, so what it opens there (its tracing span) has the
        # caller's as its parent: a pool thread starts with an empty one
        contexts = [contextvars.copy_context() for _ in calls]
        with ThreadPoolExecutor(max_workers=len(calls), thread_name_prefix="tinyagent-tool") as pool:
            list(pool.map(lambda context, call: context.run(run_one, *call), contexts, calls))
    else:
        for step, tool in calls:
            run_one(step, tool)


BAD_ARGUMENTS = (ActionInputError, ToolError)  # what `validate` raises
_RAN = (StepKind.ACTION, StepKind.EDITED)  # kinds of a call that ran and got a result


def _key(arguments) -> str:
    return json.dumps(arguments, sort_keys=True, ensure_ascii=False)
