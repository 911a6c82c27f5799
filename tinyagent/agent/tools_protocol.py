"""The model's own tool calls: tools given to the chat template (`tools=`), calls read in the family's
format (`format.tool_reading`), each reply an assistant turn and each result a tool message.

The family is `model.tool_format` (else hermes). A model whose template does not render `tools=`
(`model.native_tools` False) gets the family's tools text in the system prompt, and its results as user
messages in the family's wrapping.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import ClassVar

from ..format.messages import Message, tool_turn_messages
from ..format.reading import Reading
from ..format.step_format import next_step_format
from ..format.templates import Prompts
from ..format.tool_formats import DEFAULT_FORMAT, FORMATS, ToolFormat, result_text, tool_schema, tools_block
from ..format.tool_reading import read_calls
from ..models.model import BaseModel, Reply
from .protocols import BaseProtocol, ProtocolName
from .results import Step
from .run import RunState

log = logging.getLogger(__package__)  # "tinyagent.agent"

#: Stop strings of the tools protocol, per family: a result the model starts to invent.
TOOL_STOPS = {"hermes": ["<tool_response>"]}
DEFAULT_MAX_CALLS = 5


@dataclass(frozen=True)
class Tools(BaseProtocol):
    """The model's own tool-call format and its settings:

    - `parallel`: the calls of one reply run at the same time (when every tool allows it, `Tool.concurrent`).
    - `max_calls`: the most calls of one reply that run; the rest are refused with an observation saying so
      (a model stuck writing calls cannot start hundreds).
    - `family`: the format calls are written in (`format.tool_formats.FORMATS`). None: the model's
      (`BaseModel.tool_format`), else hermes.
    - `constrained`: decode only replies in the family's format. None: as the model prefers.
    """

    name: ClassVar[ProtocolName] = ProtocolName.TOOLS
    parallel: bool = True
    max_calls: int = DEFAULT_MAX_CALLS
    family: str | None = None
    constrained: bool | None = None
    # what the model does with tools, from the model (`resolved`): its template or server shows `tools=` to it;
    # replies go back as OpenAI-style turns with `tool_calls` and call ids
    native: bool = field(default=False, init=False, compare=False)
    call_turns: bool = field(default=False, init=False, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.max_calls, bool) or not isinstance(self.max_calls, int) or self.max_calls < 1:
            raise ValueError(f"max_calls must be a whole number of at least 1, not {self.max_calls!r}")
        if self.family is not None and self.family not in FORMATS:
            raise ValueError(f"family must be one of {', '.join(FORMATS)}, not {self.family!r}")

    def resolved(self, model: BaseModel, tools) -> Tools:
        resolved = super().resolved(model, tools)
        object.__setattr__(resolved, "family", self.family or getattr(model, "tool_format", None) or DEFAULT_FORMAT)
        object.__setattr__(resolved, "native", bool(getattr(model, "native_tools", False)))
        object.__setattr__(resolved, "call_turns", bool(getattr(model, "tool_call_turns", False)))
        return resolved

    def record(self) -> dict:
        return {
            "protocol": str(self.name),
            "parallel": self.parallel,
            "max_calls": self.max_calls,
            "family": self.family,
            "constrained": self.constrained,
        }

    @property
    def fmt(self) -> ToolFormat:
        return FORMATS[self.family or DEFAULT_FORMAT]

    # --- the prompt and each call ----------------------------------------------------------------

    def system_prompt(self, tools, lang: str, prompts: Prompts) -> str:
        prompt = prompts.text("tools.system", lang)
        if tools and not self.native:
            prompt += "\n\n" + tools_block(self.fmt, [tool_schema(t, lang) for t in tools])
        return prompt

    def prompt(self, messages: list[Message], steps, suffix: str = "") -> list[Message]:
        return tool_turn_messages(
            messages,
            steps,
            suffix,
            result_role="tool" if self.native else None,
            wrap=lambda text: result_text(self.fmt, text),
            call_turns=self.call_turns,
        )

    def options(
        self, tools, steps, forced: bool, constrained: bool, lang: str = "en", answer_schema: str | None = None
    ) -> dict:
        """The call's stop strings, tools and format (an `answer_schema` is checked after, not decoded within)."""
        options: dict = {"stop": [] if self.call_turns else list(TOOL_STOPS.get(self.fmt.name, []))}
        if self.native and tools:
            options["tools"] = [tool_schema(t, lang) for t in tools]
        if constrained:
            options["constraint"] = next_step_format(tools, steps, forced=forced, calls=self.fmt)
        return options

    def before_call(self, model: BaseModel, prompt: list[Message], tools, run: RunState) -> list[str]:
        """Notes for the step of this call: that the template re-rendered an earlier turn (said once a run),
        when the model renders its prompts (`render_prompt`)."""
        render = getattr(model, "render_prompt", None)
        rendered = render(prompt, tools) if render is not None else None
        run.memo["rendered"] = rendered
        expected = run.memo.pop("expected", None) if run.result.steps else None
        note = prefix_note(rendered, expected) if rendered is not None else None
        if note is None or any(n.startswith(note.split(":")[0]) for s in run.result.steps for n in s.notes):
            return []
        log.info("prefix: %s", note)
        return [note]

    def after_call(self, reply: Reply, run: RunState) -> None:
        if run.memo.get("rendered") is not None:
            run.memo["expected"] = run.memo["rendered"] + reply.text

    def read(self, reply: Reply, tools, lang: str, prompts: Prompts | None = None) -> list[Reading]:
        return read_calls(reply.text, tools, self.fmt, lang, structured=reply.tool_calls)

    def forced_suffix(self, lang: str, prompts: Prompts) -> str:
        return prompts.text("tools.force_answer", lang)

    def forced_answer(self, text: str, lang: str, prompts: Prompts | None = None) -> str:
        """The answer after the turn cap: the reply's text (a call it still makes is not run)."""
        reading = read_calls(text, (), self.fmt, lang)[0]
        return (reading.answer if reading.answer is not None else reading.thought) or ""

    def error_observation(self, message: str, worked_tool, prompts: Prompts) -> str:
        return f"Error: {message}"

    def repeated_call(self, step: Step, earlier: Step, lang: str, prompts: Prompts) -> str:
        """The repeat of an earlier call gets that call's result again, and is asked for the answer: small
        models call again and again after a result they should answer from (measured, docs/tools-protocol.md)."""
        return prompts.fill("tools.repeated_call", lang, name=step.action, result=(earlier.observation or "").strip())

    # --- around a turn ------------------------------------------------------------------------------

    def calls_at_once(self, count: int) -> int:
        return min(count, self.max_calls)

    def together(self) -> bool:
        return self.parallel


def prefix_note(rendered: str, expected: str | None) -> str | None:
    """Why the KV cache cannot be reused whole, when the prompt `rendered` (of a run's later call) does not
    start with the last prompt and its reply (`expected`): the chat template re-rendered an earlier turn."""
    if not expected or rendered.startswith(expected):
        return None
    same = next((i for i, (a, b) in enumerate(zip(rendered, expected)) if a != b), min(len(rendered), len(expected)))
    return (
        f"the chat template re-rendered an earlier turn: the prompt keeps {same} of the {len(expected)} "
        "characters of the last prompt and its reply, so the KV cache is reused only that far"
    )
