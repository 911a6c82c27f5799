"""Approving tool calls before they run: a policy per tool, and someone to ask.

`Agent(approve=ask)` asks `ask(request)` before every tool call; `Approver(ask, policy={...},
default=...)` asks only for the tools whose policy is "ask", runs those set to "always" and refuses
those set to "never" without asking. `ask` answers with a `Verdict`: run this call, run every call
of this tool from now on (for this Agent's life), edit (new arguments, checked like the model's:
when they do not fit, `ask` is asked again with the problem), or refuse with a reason the model
reads as its observation. A refused call is a step of kind "refused", an edited one "edited".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..format.arguments import ActionInputError, bad_input_message
from ..text import StrEnum
from ..tools.tool import Tool, ToolError
from .hooks import Hooks, Run, ToolCall
from .results import Step

#: How often `ask` is asked about one call whose edited arguments do not fit, before the call is refused.
DEFAULT_EDIT_ROUNDS = 3


class Policy(StrEnum):
    ASK = "ask"  # ask before each call (until answered "always")
    ALWAYS = "always"  # run without asking
    NEVER = "never"  # refuse without asking


class Decision(StrEnum):
    RUN = "run"
    ALWAYS = "always"
    EDIT = "edit"
    REFUSE = "refuse"


@dataclass(frozen=True)
class Verdict:
    """An answer to an approval request; make one with `Verdict.run()`, `.always()`, `.edit(args)`, `.refuse(why)`."""

    decision: Decision
    arguments: dict | str | None = None  # for edit: a dict, or JSON text as the model would write it
    reason: str = ""  # for refuse: what the model is told

    @classmethod
    def run(cls) -> Verdict:
        return cls(Decision.RUN)

    @classmethod
    def always(cls) -> Verdict:
        return cls(Decision.ALWAYS)

    @classmethod
    def edit(cls, arguments: dict | str) -> Verdict:
        return cls(Decision.EDIT, arguments=arguments)

    @classmethod
    def refuse(cls, reason: str = "") -> Verdict:
        return cls(Decision.REFUSE, reason=reason)


@dataclass(frozen=True)
class ApprovalRequest:
    """What `ask` sees: the call (tool, checked arguments, its step, the run) and, after an edit that did
    not fit, why."""

    tool: Tool
    arguments: dict
    step: Step
    run: Run | None
    problem: str | None = None

    @property
    def name(self) -> str:
        return self.tool.name_for_model


Ask = Callable[[ApprovalRequest], Verdict]


class Approver(Hooks):
    """Asks `ask` about the calls its policy says to ask about (see the module docstring).

    `policy` maps tool names to "ask", "always" or "never"; other tools get `default`. With no `ask`
    a call to be asked about is refused, and the model is told that no one could approve it.
    """

    def __init__(
        self,
        ask: Ask | None = None,
        policy: dict[str, str] | None = None,
        default: str = "ask",
        edit_rounds: int = DEFAULT_EDIT_ROUNDS,
    ):
        self.ask, self.default = ask, _policy(default, "default")
        self.policy = {name: _policy(value, name) for name, value in (policy or {}).items()}
        if isinstance(edit_rounds, bool) or not isinstance(edit_rounds, int) or edit_rounds < 1:
            raise ValueError(f"edit_rounds must be a whole number of at least 1, not {edit_rounds!r}")
        self.edit_rounds = edit_rounds
        self.always: set[str] = set()  # tools answered "always"

    def policy_for(self, name: str) -> Policy:
        return Policy.ALWAYS if name in self.always else self.policy.get(name, self.default)

    def before_tool(self, call: ToolCall) -> None:
        policy = self.policy_for(call.name)
        if policy == Policy.NEVER:
            call.refuse(f"calls to {call.name} are not allowed here")
        elif policy == Policy.ASK and self.ask is None:
            call.refuse(f"{call.name} needs approval and no one is here to approve it")
        elif policy == Policy.ASK:
            self._ask(call)

    def _ask(self, call: ToolCall) -> None:
        problem = None
        for _ in range(self.edit_rounds):
            verdict = self.ask(ApprovalRequest(call.tool, call.arguments, call.step, call.run, problem))
            if not isinstance(verdict, Verdict):
                raise TypeError(
                    f"an approver must answer with a Verdict (Verdict.run(), .always(), .edit(arguments) "
                    f"or .refuse(reason)), not {verdict!r}"
                )
            if verdict.decision == Decision.ALWAYS:
                self.always.add(call.name)
            if verdict.decision in (Decision.RUN, Decision.ALWAYS):
                return
            if verdict.decision == Decision.REFUSE:
                call.refuse(verdict.reason or "the user refused it")
                return
            try:
                call.edit(verdict.arguments if verdict.arguments is not None else {})
                return
            except (ActionInputError, ToolError) as e:
                problem = bad_input_message(call.tool, e)
        call.refuse(f"the edited arguments did not fit {self.edit_rounds} times ({problem})")


def give_asker(hooks: list[Hooks], ask: Ask) -> bool:
    """Let `ask` answer for the approvers among `hooks` that have no one to ask (what a config builds:
    the CLI's terminal, the chat page's card); True when there was one."""
    found = [hook for hook in hooks if isinstance(hook, Approver) and hook.ask is None]
    for hook in found:
        hook.ask = ask
    return bool(found)


def as_approver(approve: Approver | Ask) -> Approver:
    """`Agent(approve=...)`: an Approver as it is, a callable asked about every call."""
    if isinstance(approve, Approver):
        return approve
    if not callable(approve):
        raise TypeError(f"approve must be a callable (request -> Verdict) or an Approver, not {approve!r}")
    return Approver(approve)


def _policy(value: str, name: str) -> Policy:
    try:
        return Policy(value)
    except ValueError:
        raise ValueError(
            f"approval policy for {name}: {value!r} is not one of {', '.join(p.value for p in Policy)}"
        ) from None
