"""The two ways one loop talks to a model: ReAct text, or the model's own tool-call format.

The loop (`loop.py`) asks its protocol for the system prompt, the messages and options of each model
call, and what a reply says (one `Reading` per tool call, or one answer or error); everything else, the
tool calls, guards, forced answer and records, is the loop's and the same for both.
"""
from __future__ import annotations

import logging

from ..format import prompts
from ..format.messages import Message, prompt_messages, tool_turn_messages
from ..format.observations import error_observation, repeated_call_observation
from ..format.reading import Reading, cut_at_observation, read_forced_answer, read_step
from ..format.step_format import next_step_format
from ..format.tool_formats import (
    DEFAULT_FORMAT,
    FORCE_ANSWER,
    FORMATS,
    SYSTEM_PROMPT,
    result_text,
    tool_schema,
    tools_block,
)
from ..format.tool_reading import read_calls
from ..models.base import BaseModel
from ..text import StrEnum

log = logging.getLogger(__package__)  # "tinyagent.agent"

PROTOCOLS = ("react", "tools", "auto")
REPEATED_CALL = {"en": "You already called {name} with these arguments, and it returned: {result}\n"
                       "Do not call it again: reply with the answer now.",
                 "zh": "你已经用这些参数调用过 {name}，它返回了：{result}\n不要再调用它：现在直接回复答案。"}
#: Stop strings of the tools protocol, per family: a result the model starts to invent.
TOOL_STOPS = {"hermes": ["<tool_response>"]}


class ProtocolName(StrEnum):
    REACT = "react"
    TOOLS = "tools"


class ReAct:
    """ReAct text: Thought / Action / Action Input, the scratchpad continued as one assistant message
    (whose rendering `HFChatModel.render_prompt` checks, so the prompt only grows)."""

    name = ProtocolName.REACT
    react_text = True  # a reply may be continued in place (`ask_answer`) or sent back to be checked (`recheck`)
    lead = prompts.THOUGHT_LEAD  # what a reply is begun with under `Agent(thought_first=True)`

    def before_call(self, model: BaseModel, prompt: list[Message], tools, steps) -> list[str]:
        return []

    def after_call(self, reply: str) -> None:
        pass

    def system_prompt(self, tools, lang: str, examples) -> str:
        return prompts.build_system_prompt(tools, lang, examples)

    def prompt(self, messages: list[Message], steps, suffix: str = "") -> list[Message]:
        return prompt_messages(messages, steps, suffix)

    def options(self, tools, steps, forced: bool, constrained: bool, lang: str = "en") -> dict:
        options: dict = {"stop": list(prompts.STOP_WORDS)}
        if constrained:
            options["constraint"] = next_step_format(tools, steps, forced=forced)
        return options

    def reply(self, text: str) -> str:
        """The reply as the protocol keeps it: an observation the model invented is cut."""
        return cut_at_observation(text)

    def read(self, reply: str, tools, lang: str) -> list[Reading]:
        return [read_step(reply, tools, lang)]

    def forced_suffix(self, lang: str) -> str:
        return prompts.FORCE_FINAL[lang]

    def forced_answer(self, reply: str, lang: str) -> str:
        return read_forced_answer(reply)

    def error_observation(self, message: str, worked_tool=None) -> str:
        return error_observation(message, worked_tool)

    def repeated_call(self, step, earlier, lang: str) -> str:
        return repeated_call_observation(step.action, earlier.index + 1)


class Tools:
    """The model's own tool calls: tools given to the chat template (`tools=`), calls read in the family's
    format (`format.tool_reading`), each reply an assistant turn and each result a tool message.

    `fmt` is the family (`model.tool_format`, else hermes). A model whose template does not render
    `tools=` (`model.native_tools` False) gets the family's tools text in the system prompt, and its
    results as user messages in the family's wrapping.
    """

    name = ProtocolName.TOOLS
    react_text = False
    lead = ""

    def __init__(self, model: BaseModel):
        self.fmt = FORMATS[getattr(model, "tool_format", None) or DEFAULT_FORMAT]
        self.native = bool(getattr(model, "native_tools", False))
        self.call_turns = bool(getattr(model, "tool_call_turns", False))
        self._expected: str | None = None  # the last prompt as rendered, then its reply
        self._rendered: str | None = None

    def before_call(self, model: BaseModel, prompt: list[Message], tools, steps) -> list[str]:
        """Notes for the step of this call: that the template re-rendered an earlier turn (said once a run),
        when the model renders its prompts (`render_prompt`)."""
        render = getattr(model, "render_prompt", None)
        self._rendered = render(prompt, tools) if render is not None else None
        note = self.prefix_note(self._rendered, first=not steps) if self._rendered is not None else None
        if note is None or any(n.startswith(note.split(":")[0]) for s in steps for n in s.notes):
            return []
        log.info("prefix: %s", note)
        return [note]

    def after_call(self, reply: str) -> None:
        if self._rendered is not None:
            self._expected = self._rendered + reply

    def prefix_note(self, rendered: str, first: bool) -> str | None:
        """Why the KV cache cannot be reused whole, when the prompt `rendered` (of a run's later call) does
        not start with the last prompt and its reply: the chat template re-rendered an earlier turn."""
        expected, self._expected = (None if first else self._expected), None
        if not expected or rendered.startswith(expected):
            return None
        same = next((i for i, (a, b) in enumerate(zip(rendered, expected)) if a != b), min(len(rendered), len(expected)))
        return (f"the chat template re-rendered an earlier turn: the prompt keeps {same} of the {len(expected)} "
                "characters of the last prompt and its reply, so the KV cache is reused only that far")

    def system_prompt(self, tools, lang: str, examples) -> str:
        prompt = SYSTEM_PROMPT[lang]
        if tools and not self.native:
            prompt += "\n\n" + tools_block(self.fmt, [tool_schema(t, lang) for t in tools])
        return prompt

    def prompt(self, messages: list[Message], steps, suffix: str = "") -> list[Message]:
        return tool_turn_messages(messages, steps, suffix, result_role="tool" if self.native else None,
                                  wrap=lambda text: result_text(self.fmt, text), call_turns=self.call_turns)

    def options(self, tools, steps, forced: bool, constrained: bool, lang: str = "en") -> dict:
        options: dict = {"stop": [] if self.call_turns else list(TOOL_STOPS.get(self.fmt.name, []))}
        if self.native and tools:
            options["tools"] = [tool_schema(t, lang) for t in tools]
        if constrained:
            options["constraint"] = next_step_format(tools, steps, forced=forced, calls=self.fmt)
        return options

    def reply(self, text: str) -> str:
        return text

    def read(self, reply: str, tools, lang: str) -> list[Reading]:
        return read_calls(reply, tools, self.fmt, lang, structured=getattr(reply, "tool_calls", None))

    def forced_suffix(self, lang: str) -> str:
        return FORCE_ANSWER[lang]

    def forced_answer(self, reply: str, lang: str) -> str:
        """The answer after the turn cap: the reply's text (a call it still makes is not run)."""
        reading = read_calls(reply, (), self.fmt, lang)[0]
        return (reading.answer if reading.answer is not None else reading.thought) or ""

    def error_observation(self, message: str, worked_tool=None) -> str:
        return f"Error: {message}"

    def repeated_call(self, step, earlier, lang: str) -> str:
        """The repeat of an earlier call gets that call's result again, and is asked for the answer: small
        models call again and again after a result they should answer from (measured, docs/tools-protocol.md)."""
        return REPEATED_CALL[lang].format(name=step.action, result=(earlier.observation or "").strip())


def protocol_for(name: str, model: BaseModel) -> ReAct | Tools:
    """The protocol `name` asks for; "auto" picks by `auto_protocol`."""
    if name not in PROTOCOLS:
        raise ValueError(f"protocol must be one of {', '.join(PROTOCOLS)}, not {name!r}")
    if name == "auto":
        name = auto_protocol(model)
    return Tools(model) if name == ProtocolName.TOOLS else ReAct()


def auto_protocol(model: BaseModel) -> str:
    """What "auto" picks, by what was measured (docs/tools-protocol.md#measured): ReAct for a local model, even
    one whose template takes tools (Qwen2.5-Coder-0.5B-Instruct: ReAct answered more questions, with fewer
    steps, than its own format); the model's own format behind a server that parses calls itself
    (`tool_call_turns`: vLLM, LMDeploy, llama.cpp, Ollama, `transformers serve`), which was not measured here."""
    return ProtocolName.TOOLS if getattr(model, "tool_call_turns", False) else ProtocolName.REACT
