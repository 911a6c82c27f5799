"""What a step was: one vocabulary for the reply reader, the loop, scoring, the CLI and the chat page.

The kinds a reply can be read as (`read_step`) are a subset; the loop adds what it made of a call
(`tool_error`, `repeated_call`), of an answer it sent back to be checked (`recheck`), of what the approver made of a call (`edited`, `refused`), of the
turn cap (`forced_answer`, `no_forced_answer`) and of a run that ended without a reply
(`context_overflow`, `model_error`, `hook_error`). Every list of kinds elsewhere derives from the
properties here, so none can disagree with another.
"""

from __future__ import annotations

from ..text import StrEnum


class StepKind(StrEnum):
    SEARCHED = "searched"  # the question searched before the model's first reply (ReAct search
    # first): no reply; its results are in the question's message
    WORKING = "working"  # the model's own working, first and free (`ReAct(working_first=True)`)
    FINAL_ANSWER = "final_answer"  # the reply gave the answer
    NO_ACTION = "no_action"  # no ReAct labels at all: chit-chat, taken as the answer
    ACTION = "action"  # a known tool with valid arguments; it ran
    TOOL_ERROR = "tool_error"  # it ran and failed or timed out
    REPEATED_CALL = "repeated_call"  # the same call as an earlier one: refused, not run again
    EDITED = "edited"  # the approver changed the arguments; the edited call ran
    REFUSED = "refused"  # the approver (or the policy) refused the call: not run
    EMPTY = "empty"  # format errors, each answered with an observation
    MALFORMED = "malformed"  # saying what to write instead
    UNKNOWN_TOOL = "unknown_tool"
    BAD_INPUT = "bad_input"
    ANSWER_ASKED = "answer_asked"  # the reply only reasoned; its Final Answer was asked for in the same step
    RECHECK = "recheck"  # an answer right after a failed call: sent back once to be checked
    FORCED_ANSWER = "forced_answer"  # the answer asked for at the turn cap
    NO_FORCED_ANSWER = "no_forced_answer"  # none came even then
    CONTEXT_OVERFLOW = "context_overflow"  # ends without a reply: the prompt did not fit
    MODEL_ERROR = "model_error"  # ends without a reply: the model raised
    HOOK_ERROR = "hook_error"  # ends without a reply: a hook (or on_step) raised

    @property
    def format_valid(self) -> bool:
        """The reply followed the ReAct format (whatever the tool then did)."""
        return self in _VALID

    @property
    def format_error(self) -> bool:
        """The reply did not follow the format: scored as a format error."""
        return self in _FORMAT_ERRORS

    @property
    def corrected(self) -> bool:
        """A format error the model is told about in an `Error:` observation, with what to write."""
        return self in _CORRECTED

    @property
    def has_reply(self) -> bool:
        """The step holds a model reply (the last three kinds record why a run ended without one)."""
        return self not in (StepKind.CONTEXT_OVERFLOW, StepKind.MODEL_ERROR, StepKind.HOOK_ERROR)

    @property
    def readable(self) -> bool:
        """`read_step` can return this kind for a reply."""
        return self in _CORRECTED or self in (StepKind.ACTION, StepKind.FINAL_ANSWER, StepKind.NO_ACTION)


_VALID = frozenset(
    {
        StepKind.SEARCHED,
        StepKind.WORKING,
        StepKind.FINAL_ANSWER,
        StepKind.ACTION,
        StepKind.TOOL_ERROR,
        StepKind.REPEATED_CALL,
        StepKind.EDITED,
        StepKind.REFUSED,
        StepKind.RECHECK,
        StepKind.FORCED_ANSWER,
    }
)
#: Calls that failed, so gave the model nothing to answer from (an answer right after one is sent back
#: once): the tool raised, or the call named no tool or had arguments the tool cannot take.
FAILED_CALLS = frozenset({StepKind.TOOL_ERROR, StepKind.UNKNOWN_TOOL, StepKind.BAD_INPUT})
_CORRECTED = frozenset({StepKind.EMPTY, StepKind.MALFORMED, StepKind.UNKNOWN_TOOL, StepKind.BAD_INPUT})
_FORMAT_ERRORS = _CORRECTED | {StepKind.NO_ACTION, StepKind.NO_FORCED_ANSWER, StepKind.ANSWER_ASKED}
