"""What a run produces: its steps, why it ended, and what one model call returned."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..format.kinds import StepKind
from ..format.reading import Reading
from ..models.model import Reply
from ..text import StrEnum


class StopReason(StrEnum):
    FINAL_ANSWER = "final_answer"  # the model answered
    NO_ACTION = "no_action"  # a reply with no ReAct labels, taken as the answer
    MAX_TURNS = "max_turns"  # the answer was forced at the turn cap
    NO_FORCED_ANSWER = "no_forced_answer"  # no answer even at the turn cap
    CONTEXT_OVERFLOW = "context_overflow"  # the prompt did not fit the context window
    MODEL_ERROR = "model_error"  # the model raised
    HOOK_ERROR = "hook_error"  # a hook (or on_step) raised
    STOPPED = "stopped"  # `Agent.stop()` was called

    @property
    def finished(self) -> bool:
        """The run ended with an answer from the model (final, chit-chat or forced)."""
        return self in (StopReason.FINAL_ANSWER, StopReason.NO_ACTION, StopReason.MAX_TURNS)

    @property
    def failed(self) -> bool:
        """Something raised and ended the run (`result.error` says what): reported as an error."""
        return self in (StopReason.MODEL_ERROR, StopReason.HOOK_ERROR)


@dataclass
class Step:
    """One model reply and what the agent did with it."""

    index: int
    text: str  # the reply as it enters the scratchpad
    kind: StepKind | str = ""  # what the reply was
    thought: str = ""
    action: str | None = None  # tool name the model asked for
    action_input: str | None = None  # the raw text after `Action Input:`
    arguments: dict | None = None  # the parsed arguments, when they parsed (the approver's, when edited)
    edited_from: dict | None = None  # the model's arguments, when the approver edited them
    observation: str | None = None  # what the model sees next
    raw_observation: str | None = None  # the tool's output before cutting / distilling, if different
    final_answer: str | None = None
    error: str | None = None  # what went wrong in this step, if anything
    notes: list[str] = field(default_factory=list)  # how the prompt was shortened to fit, or its cache reuse cut
    turn: int | None = None  # tools protocol: which model reply the step came from (one reply, many calls)
    call_id: str | None = None  # tools protocol: the call's id, when the server gave one
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    model_seconds: float = 0.0
    tool_seconds: float = 0.0

    def __post_init__(self) -> None:
        if self.kind:  # "action" -> StepKind.ACTION; a kind that does not exist is a bug, and raises
            self.kind = StepKind(self.kind)

    @classmethod
    def of(cls, index: int, reading: Reading) -> Step:
        """The step a reply was read as, before the agent acts on it."""
        return cls(
            index=index,
            text=reading.text,
            kind=reading.kind,
            thought=reading.thought,
            action=reading.action,
            action_input=reading.action_input,
            arguments=reading.arguments,
            call_id=reading.call_id,
        )


@dataclass
class AgentResult:
    """The outcome of one `run`."""

    question: str
    answer: str = ""
    steps: list[Step] = field(default_factory=list)
    finished: bool = False  # True only when the model gave an answer (final, chit-chat or forced)
    stop_reason: StopReason | str = ""
    error: str | None = None  # for model_error / hook_error / context_overflow: what went wrong (redacted)
    lang: str = "en"
    protocol: str = "react"  # how the model called tools: "react" text or its own "tools" format
    data: object = None  # with an answer_schema: the answer as data that fits it (a dict, a list, a
    # pydantic model's instance); None when it did not fit
    generate_calls: int = 0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    seconds: float = 0.0

    def __post_init__(self) -> None:
        if self.stop_reason:
            self.stop_reason = StopReason(self.stop_reason)

    def add_usage(self, reply: Reply) -> None:
        """Count one model call and its tokens."""
        self.generate_calls += 1
        for key in ("prompt_tokens", "completion_tokens"):
            if getattr(reply, key) is not None:
                setattr(self, key, (getattr(self, key) or 0) + getattr(reply, key))


@dataclass
class Generation:
    """One model call of a run: the reply (as the protocol keeps it) and how long the call took."""

    reply: Reply
    seconds: float
    notes: list[str]  # how the prompt was shortened to fit, or its cache reuse cut

    @property
    def text(self) -> str:
        return self.reply.text

    def then(self, more: Generation, text: str, *notes: str) -> Generation:
        """This call and the one that went on from it (`more`) as one step's: its text `text`, its prompt
        the second (longer) one, its generated tokens and seconds both calls', every note."""
        first, second = self.reply.completion_tokens, more.reply.completion_tokens
        reply = replace(more.reply, text=text, completion_tokens=None if second is None else (first or 0) + second)
        return Generation(reply, self.seconds + more.seconds, [*self.notes, *more.notes, *notes])

    def into(self, step: Step) -> Step:
        """`step` with this call's counts, time and notes filled in."""
        step.prompt_tokens, step.completion_tokens = self.reply.prompt_tokens, self.reply.completion_tokens
        step.cached_tokens, step.model_seconds, step.notes = self.reply.cached_tokens, self.seconds, self.notes
        return step
