"""The model interface (layer 2): one method to implement, `generate`, and the `Reply` it returns."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

from ..format.messages import Message


@dataclass(frozen=True)
class Reply:
    """What `generate` returns: the new text, the tool calls the backend parsed itself, and what the call cost.

    A value, not text with attributes: a changed reply is a new one (`dataclasses.replace`), so nothing
    is dropped on the way. Returning it (rather than storing "last usage" on the model) keeps one model
    safe to share between threads. A custom model may return a plain `str`; `Reply.of` wraps it once.
    """

    text: str
    tool_calls: list[dict] | None = None  # calls the backend parsed itself: [{"id", "name", "arguments"}]
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None  # prompt tokens read from the KV cache, not computed again
    seconds: float | None = None
    finish_reason: str | None = None  # "stop" (a stop string or the end of the turn) or "length"

    def __str__(self) -> str:
        """The text alone (`print(reply)`); string operations need `reply.text`, which keeps nothing else."""
        return self.text

    @classmethod
    def of(cls, value: Reply | str) -> Reply:
        """`value` as a Reply: a plain `str` (a custom model's) becomes one without counts."""
        if isinstance(value, Reply):
            return value
        if isinstance(value, str):
            return cls(value)
        raise TypeError(f"generate() must return a Reply or a str, not {type(value).__name__}")

    @property
    def usage(self) -> dict:
        """The counts, as a run adds them up."""
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "seconds": self.seconds,
            "cached_tokens": self.cached_tokens,
            "finish_reason": self.finish_reason,
        }


class BaseModel(ABC):
    """A chat model. Subclasses implement `generate`; everything else is built on it.

    `generate(messages, stop, **kwargs)` returns only new text. When the last message is an
    assistant message the model continues it (the agent's scratchpad) instead of starting a
    new turn. The text ends before the first stop string. Keyword arguments the agent may
    pass, all optional for a subclass to honour: `max_new_tokens`, `temperature`, `top_p`,
    `on_text` (a callback receiving text as it is generated), `constraint` (the step format),
    `tools` (the tools protocol: function schemas for the chat template or server; a backend that
    parses calls itself returns them as `Reply.tool_calls`).
    Backends call `check_generation_options` so a misspelt setting is an error, not ignored.
    """

    #: Tokens of this model's chat template that must not appear literally in tool output.
    control_tokens: tuple[str, ...] = ()
    #: The model's context window in tokens, when known (used for the context budget).
    context_window: int | None = None
    #: Defaults for max_new_tokens / temperature / top_p; the context budget reserves max_new_tokens.
    generation_defaults: dict = {}
    #: The generation keywords `generate` honours (besides AGENT_OPTIONS); the Agent and the
    #: backends refuse others, so a typo such as `temprature=0.5` is an error, not silently dropped.
    generation_options: frozenset[str] = frozenset({"max_new_tokens", "temperature", "top_p"})
    #: Keywords the agent may pass to any backend's `generate`, beyond the generation settings.
    AGENT_OPTIONS = frozenset({"on_text", "constraint", "tools"})
    #: The tools protocol: the family format this model writes calls in (`format.tool_formats.FORMATS`),
    #: None when unknown; whether `generate(tools=...)` shows the tools to it itself (its template or
    #: server does); whether replies go back as OpenAI-style turns with `tool_calls` and call ids.
    tool_format: str | None = None
    native_tools: bool = False
    tool_call_turns: bool = False
    #: Whether this model follows the ReAct format only when its decoding is constrained (the embedded 135M
    #: model): what `ReAct(constrained=None)` and `Tools(constrained=None)` decide from.
    prefers_constrained: bool = False
    #: What serves the model, for traces (OpenTelemetry's gen_ai.provider.name).
    provider: str = "tinyagent"

    @property
    def model_id(self) -> str:
        """The model's name or path, for traces (gen_ai.request.model); backends that know it say it."""
        return type(self).__name__

    @abstractmethod
    def generate(self, messages: list[Message], stop: list[str] | None = None, **kwargs) -> Reply | str:
        """The model's next text for `messages`, ending before the first stop string, as a `Reply` (a
        plain `str` is taken too)."""

    def unknown_options(self, options, agent_options: bool = True) -> list[str]:
        """The keywords in `options` this backend does not take, sorted."""
        return sorted(set(options) - self._valid_options(agent_options))

    def check_generation_options(self, options, where: str = "generate", agent_options: bool = True) -> None:
        """Raise TypeError naming the valid keywords when `options` holds one this backend does not know."""
        unknown = self.unknown_options(options, agent_options)
        if unknown:
            valid = self._valid_options(agent_options)
            raise TypeError(
                f"{type(self).__name__}.{where}() got unknown keyword argument(s) "
                f"{', '.join(map(repr, unknown))}; valid: {', '.join(sorted(valid))}"
            )

    def _valid_options(self, agent_options: bool) -> frozenset[str]:
        return self.generation_options | (self.AGENT_OPTIONS if agent_options else frozenset())

    def count_tokens(self, messages: list[Message], tools: list[dict] | None = None) -> int | None:
        """Prompt length in tokens (with `tools` shown), when the backend can tell without generating."""
        return None
