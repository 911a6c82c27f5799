"""One run in progress, its model calls and its tool calls: the state the loop and its protocol share.

`RunState.generate` is the one way a run calls its model: the conversation plus the steps so far, as the
protocol writes them (messages, stop strings, tools, the reply's format when constrained), fitted to the
context window, through the model hooks, its reply kept as the protocol keeps it and counted in the run's
usage. `RunState.call_tool` is the one way it calls a tool: through the tool hooks and approval, its output
shaped into the observation. The loop (`loop.py`) and the protocol's own turns (`react.py`) both call them;
they call neither.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field, replace

from ..format.messages import Message
from ..format.templates import Prompts
from ..models.model import BaseModel, Reply
from ..text import one_line
from ..tools.tool import Tool
from . import context, shaping, tool_calls
from .answer_schema import AnswerSchema
from .hooks import Hooks, ModelCall, Run, ToolCall, around, guarded, notify
from .results import AgentResult, Generation, Step
from .shaping import Observations

log = logging.getLogger(__package__)  # "tinyagent.agent", for the whole loop


class ModelFailed(Exception):
    """The model raised; `message` is its redacted first line."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


@dataclass
class RunState:
    """A run's question, language, messages and result, with what it needs of its agent (the model, tools,
    protocol, prompts, hooks, callbacks and generation settings)."""

    question: str
    lang: str
    result: AgentResult
    model: BaseModel
    tools: dict[str, Tool]
    protocol: object  # the agent's resolved protocol (protocols.BaseProtocol)
    prompts: Prompts
    hooks: list[Hooks]
    generate_kwargs: dict
    observations: Observations
    tool_timeout: float | None
    stop_event: threading.Event
    on_step: object = None  # Callable[[Step], None] | None
    on_text: object = None  # Callable[[str], None] | None
    messages: list[Message] = field(default_factory=list)
    asked: str = ""  # the question as the model is asked it (with what an answer schema adds)
    history: list = field(default_factory=list)  # the conversation's earlier turns
    answer_schema: AnswerSchema | None = None  # what the final answer must fit (`Agent.run(answer_schema=...)`)
    memo: dict = field(default_factory=dict)  # what a protocol keeps between the calls of one run
    view: Run | None = None  # the run as hooks see it

    def __post_init__(self) -> None:
        self.view = Run(self.question, self.lang, self.result, self.model, self.tools, self.stop_event.set)

    @property
    def stopped(self) -> bool:
        """`Agent.stop()` was asked: the run ends after the step in progress."""
        return self.stop_event.is_set()

    def show(self, text: str) -> None:
        """Stream `text` to the agent's `on_text`, as if the model had written it."""
        if self.on_text is not None:
            guarded(self.on_text, "on_text", text)

    def record(self, step: Step) -> Step:
        """Append `step` to the run, and tell `on_step` and the hooks."""
        self.result.steps.append(step)
        if self.on_step is not None:
            guarded(self.on_step, "on_step", step)
        notify(self.hooks, "on_step", step)
        return step

    def generate(self, suffix: str = "", purpose: str = "step", lead: str = "", free: bool = False) -> Generation:
        """One model call on the conversation plus the run's steps (then `suffix`), as the protocol writes
        them: its messages, stop strings, tools and, when constrained (and not `free`), the reply's format.
        `lead` begins the reply (in the prompt, and in the reply returned)."""
        protocol, tools, pad = self.protocol, list(self.tools.values()), lead + suffix
        kwargs = dict(self.generate_kwargs)
        kwargs.update(
            protocol.options(
                tools,
                self.result.steps,
                forced=bool(suffix),
                constrained=protocol.constrained and not free,
                lang=self.lang,
                answer_schema=self.answer_schema.text if self.answer_schema else None,
            )
        )
        notes = context.fit_prompt(
            self.messages, self.result.steps, pad, self.model, kwargs, self.lang, render=protocol.prompt
        )
        if self.on_text is not None:
            kwargs["on_text"] = self.on_text
            if lead:
                self.show(lead)
        prompt = protocol.prompt(self.messages, self.result.steps, pad)
        notes += protocol.before_call(self.model, prompt, kwargs.get("tools"), self)
        call = self.call_model(prompt, purpose, **kwargs)
        reply = Reply.of(call.reply)
        protocol.after_call(reply, self)
        self.result.add_usage(reply)
        if lead and reply.text.strip():  # an empty reply stays empty
            reply = replace(reply, text=lead + reply.text)
        return Generation(protocol.reply(reply), call.seconds, notes)

    def call_model(self, messages: list[Message], purpose: str, **kwargs) -> ModelCall:
        """One model call through the model hooks (which may change the prompt or answer it themselves)."""
        return call_model(self.model, self.hooks, self.view, len(self.result.steps), messages, purpose, kwargs)

    def call_tool(self, step: Step, tool: Tool) -> Step:
        """Invoke a prepared call (`step.arguments`) through the tool hooks and approval, and shape its output
        into the step's observation."""
        call = ToolCall(self.view, step, tool, step.arguments)
        raw = tool_calls.settle(step, tool_calls.call(call, self.hooks, self.tool_timeout), self.lang, self.prompts)
        if raw is not None:
            step.observation = self._observation_text(raw, step.thought)
            step.raw_observation = raw if step.observation != raw else None
        return step

    def _observation_text(self, raw: str, thought: str) -> str:
        """Tool output as it enters the prompt (`shaping.shaped`), distilled by the model when it is long and
        `observations.distill` is on (that call counted in the run's usage)."""
        settings = self.observations

        def distill(text: str) -> str:
            if not settings.distill or len(text) <= settings.distill_threshold:
                return text
            budget = context.prompt_budget(self.model, self.generate_kwargs)
            return shaping.distilled(
                text, self.lang, self.question, thought, self._ask, self.model.count_tokens, budget, self.prompts
            )

        return shaping.shaped(raw, self.lang, getattr(self.model, "control_tokens", ()), settings.max_chars, distill)

    def _ask(self, messages: list[Message]) -> str:
        """A model call outside the scratchpad (distilling), counted in the run's usage."""
        reply = Reply.of(self.call_model(messages, "distill", **self.generate_kwargs).reply)
        self.result.add_usage(reply)
        return reply.text


def call_model(
    model: BaseModel,
    hooks: list[Hooks],
    view: Run | None,
    index: int,
    messages: list[Message],
    purpose: str,
    kwargs: dict,
) -> ModelCall:
    """`model.generate` through the model hooks; a model that raises is `ModelFailed` (its steps are kept)."""
    call = ModelCall(view, index, purpose, messages, kwargs)
    with around(hooks, "model", call, settled=lambda c: c.reply is not None):
        if call.reply is None:
            t0 = time.perf_counter()
            try:
                call.reply = model.generate(call.messages, **call.options)
            except Exception as e:  # a server's 400, out of memory: the run ends, its steps are kept
                log.info("the model failed", exc_info=True)
                call.error = e
                raise ModelFailed(one_line(e, limit=None)) from e
            finally:
                call.seconds = time.perf_counter() - t0
    return call
