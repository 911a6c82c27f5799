"""The ReAct loop: ask the model for a step, run the tool it names, append the observation, repeat."""
from __future__ import annotations

import importlib.util
import inspect
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from . import context, react
from .llm.base import BaseModel, Message, history_to_messages, usage_of
from .tools.base import Tool, ToolError, invoke, tool as make_tool
from .tools.llm_tool import LLMTool
from .trace import redact

log = logging.getLogger(__name__)

DEFAULT_MAX_OBSERVATION_CHARS = 4000
DEFAULT_DISTILL_THRESHOLD = 1500
#: The most of a tool result a distill prompt shows (then fitted to the context window).
DISTILL_MAX_CHARS = 16_000
TRUNCATION_MARKER = {"en": "\n[... {n} more characters cut ...]", "zh": "\n[……已截去 {n} 个字符……]"}


#: What each step was (README, "Step kinds"). A reply that was read: final_answer, no_action (no
#: ReAct labels at all: chit-chat, taken as the answer), action (the tool ran), tool_error (it ran
#: and failed or timed out), repeated_call (refused, not run again). Format errors, each answered
#: with an observation saying what to write: empty, malformed (labels but no usable action or
#: answer), unknown_tool, bad_input. After the turn cap: forced_answer, no_forced_answer. Ends
#: without a reply: context_overflow, model_error (the model raised).
STEP_KINDS = ("final_answer", "no_action", "action", "tool_error", "repeated_call", "empty", "malformed",
              "unknown_tool", "bad_input", "forced_answer", "no_forced_answer", "context_overflow", "model_error")
FORMAT_ERRORS = ("empty", "malformed", "unknown_tool", "bad_input")
#: Why a run ended (AgentResult.stop_reason); `finished` is True only for the first three.
STOP_REASONS = ("final_answer", "no_action", "max_turns", "no_forced_answer", "context_overflow", "model_error",
                "stopped")
DEFAULT_TOOL_TIMEOUT = 120.0


@dataclass
class Step:
    """One model reply and what the agent did with it."""

    index: int
    text: str                       # the reply as it enters the scratchpad
    kind: str = ""                  # what the reply was; one of STEP_KINDS
    thought: str = ""
    action: str | None = None       # tool name the model asked for
    action_input: str | None = None  # the raw text after `Action Input:`
    arguments: dict | None = None   # the parsed arguments, when they parsed
    observation: str | None = None  # what the model sees next
    raw_observation: str | None = None  # the tool's output before cutting / distilling, if different
    final_answer: str | None = None
    error: str | None = None        # what went wrong in this step, if anything
    notes: list[str] = field(default_factory=list)  # how the prompt was shortened to fit the context
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    model_seconds: float = 0.0
    tool_seconds: float = 0.0


@dataclass
class AgentResult:
    """The outcome of one `run`."""

    question: str
    answer: str = ""
    steps: list[Step] = field(default_factory=list)
    finished: bool = False          # True only when the model gave an answer (final, chit-chat or forced)
    stop_reason: str = ""           # one of STOP_REASONS
    error: str | None = None        # for model_error / context_overflow: what went wrong (redacted)
    lang: str = "en"
    generate_calls: int = 0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    seconds: float = 0.0

    def add_usage(self, usage: dict) -> None:
        self.generate_calls += 1
        for key in ("prompt_tokens", "completion_tokens"):
            if usage.get(key) is not None:
                setattr(self, key, (getattr(self, key) or 0) + usage[key])


class Agent:
    """A ReAct agent over any `BaseModel` and a list of tools.

    One `Agent` keeps one conversation (`chat`); use one instance per thread.
    `on_step(step)` is called after each step, `on_text(text)` with text as the model writes it.
    `constrained=True` has the model decode only replies in the ReAct format for these tools
    (`react.next_step_format`); the model must support it (`HFChatModel` with outlines installed).
    """

    def __init__(
        self,
        model: BaseModel,
        tools: list[Tool | Callable] | None = None,
        lang: str = "auto",
        max_turns: int = 5,
        system_prompt: str | None = None,
        examples: list[dict] | dict[str, list[dict]] | None = None,
        max_observation_chars: int | None = DEFAULT_MAX_OBSERVATION_CHARS,
        llm_fallback: bool = False,
        distill_observations: bool = False,
        distill_threshold: int = DEFAULT_DISTILL_THRESHOLD,
        constrained: bool = False,
        tool_timeout: float | None = DEFAULT_TOOL_TIMEOUT,
        on_step: Callable[[Step], None] | None = None,
        on_text: Callable[[str], None] | None = None,
        **generate_kwargs,
    ):
        if lang not in ("auto", "en", "zh"):
            raise ValueError(f"lang must be 'auto', 'en' or 'zh', not {lang!r}")
        if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
            raise ValueError(f"max_turns must be a whole number of at least 1, not {max_turns!r}")
        if tool_timeout is not None and not tool_timeout > 0:
            raise ValueError(f"tool_timeout must be a positive number of seconds or None, not {tool_timeout!r}")
        _check_generate_keywords(model, generate_kwargs)
        if constrained and importlib.util.find_spec("outlines_core") is None:
            raise ImportError("constrained decoding needs outlines: pip install 'tinyagent[constrained]'")
        self.model = model
        self.tools: dict[str, Tool] = {}
        for t in tools or []:
            self.add_tool(t)
        if llm_fallback:
            self.add_tool(LLMTool(model, lang=None if lang == "auto" else lang))
        self.lang = lang
        self.max_turns = max_turns
        self.system_prompt = system_prompt
        self.examples = examples
        self.max_observation_chars = max_observation_chars
        self.distill_observations = distill_observations
        self.distill_threshold = distill_threshold
        self.constrained = constrained
        self.tool_timeout = tool_timeout
        self.on_step = on_step
        self.on_text = on_text
        self.generate_kwargs = generate_kwargs
        self.history: list[tuple[str, str]] = []
        self._stop = threading.Event()

    def stop(self) -> None:
        """End the run in progress after its current step (thread-safe); it ends with stop_reason
        "stopped" and keeps its steps. The next run starts normally."""
        self._stop.set()

    def add_tool(self, t: Tool | Callable) -> None:
        t = t if isinstance(t, Tool) else make_tool(t)
        if t.name_for_model in self.tools:
            raise ValueError(f"two tools are named {t.name_for_model!r}: {self.tools[t.name_for_model]!r} and {t!r}")
        self.tools[t.name_for_model] = t

    # --- the TinyAgent vocabulary ---------------------------------------------------------

    def build_system_input(self, lang: str = "en") -> str:
        """The system prompt: tool descriptions and the ReAct format in `lang`."""
        if self.system_prompt is not None:
            return self.system_prompt
        examples = self.examples.get(lang) if isinstance(self.examples, dict) else self.examples
        return react.build_system_prompt(list(self.tools.values()), lang, examples)

    @staticmethod
    def parse_latest_plugin_call(text: str) -> tuple[str, str, str]:
        return react.parse_latest_plugin_call(text)

    def call_plugin(self, plugin_name: str, plugin_args: str) -> str:
        """Run a tool from the raw text a model wrote; always returns an observation."""
        step = Step(index=0, text="", action=plugin_name, action_input=plugin_args)
        return self._call_tool(step, "en", AgentResult(question="")).observation

    def text_completion(self, text: str, history: list | None = None) -> tuple[str, list]:
        """TinyAgent's entry point: answer `text` given (question, answer) history."""
        result = self.run(text, history=history)
        return result.answer, list(history or []) + [(text, result.answer)]

    # --- the loop -------------------------------------------------------------------------

    def chat(self, question: str) -> AgentResult:
        """Answer `question` with the earlier turns of this conversation in context."""
        result = self.run(question, history=self.history)
        self.history.append((question, result.answer))
        return result

    def reset(self) -> None:
        self.history = []

    def run(self, question: str, history: list | None = None) -> AgentResult:
        """Answer one question: step until a final answer or `max_turns`, then force one.

        A model that raises ends the run with the steps so far (stop_reason "model_error");
        KeyboardInterrupt still interrupts.
        """
        started = time.perf_counter()
        self._stop.clear()
        lang = self.lang if self.lang != "auto" else react.detect_lang(question)
        messages: list[Message] = [
            {"role": "system", "content": self.build_system_input(lang)},
            *history_to_messages(history),
            {"role": "user", "content": question},
        ]
        result = AgentResult(question=question, lang=lang)
        try:
            for index in range(self.max_turns):
                if self._stop.is_set():
                    result.stop_reason = "stopped"
                    break
                reply, usage, seconds, notes = self._generate(messages, result)
                step = self._step(index, reply, result, lang)
                step.prompt_tokens, step.completion_tokens, step.cached_tokens = (
                    usage["prompt_tokens"], usage["completion_tokens"], usage["cached_tokens"])
                step.model_seconds, step.notes = seconds, notes
                self._record(result, step)
                if step.final_answer is not None:
                    break
            else:
                self._force_final_answer(messages, result, lang)
        except context.ContextOverflow as e:
            self._end(result, Step(index=len(result.steps), text="", kind="context_overflow", error=str(e),
                                   notes=e.notes))
        except _ModelFailed as e:
            self._end(result, Step(index=len(result.steps), text="", kind="model_error", error=e.message))
        result.seconds = time.perf_counter() - started
        return result

    def _end(self, result: AgentResult, step: Step) -> None:
        """End a run that got no reply: record why, keep the steps so far."""
        self._record(result, step)
        result.answer, result.finished, result.stop_reason, result.error = "", False, step.kind, step.error

    def _call_model(self, messages: list[Message], **kwargs) -> str:
        try:
            return self.model.generate(messages, **kwargs)
        except Exception as e:  # a server's 400, out of memory: the run ends, its steps are kept
            log.info("the model failed", exc_info=True)
            lines = str(e).strip().splitlines()
            raise _ModelFailed(redact(f"{type(e).__name__}: {lines[0]}" if lines else type(e).__name__)) from e

    def _generate(self, messages: list[Message], result: AgentResult, suffix: str = ""):
        """One model call on the conversation plus the scratchpad (the run's steps, then `suffix`)."""
        kwargs = dict(self.generate_kwargs)
        notes = self._fit_context(messages, result, suffix, kwargs)
        if self.on_text is not None:
            kwargs["on_text"] = self.on_text
        if self.constrained:  # only replies in the ReAct format (react.next_step_format says which)
            kwargs["constraint"] = react.next_step_format(self.tools.values(), result.steps, forced=bool(suffix))
        prompt = context.prompt_messages(messages, result.steps, suffix)
        t0 = time.perf_counter()
        reply = self._call_model(prompt, stop=list(react.STOP_WORDS), **kwargs)
        seconds = time.perf_counter() - t0
        usage = usage_of(reply)
        result.add_usage(usage)
        return react.cut_at_observation(str(reply)), usage, seconds, notes

    def _fit_context(self, messages: list[Message], result: AgentResult, suffix: str, kwargs: dict) -> list[str]:
        """Shorten the prompt when it would not leave room for the reply in the model's window."""
        budget = self._prompt_budget(kwargs)
        if budget is None:
            return []
        notes = context.fit(messages, result.steps, suffix, self.model.count_tokens, budget, result.lang)
        for note in notes:
            log.info("context: %s", note)
        return notes

    def _prompt_budget(self, kwargs: dict) -> int | None:
        """Tokens a prompt may take: the model's window less the reply's room; None when unknown."""
        window = getattr(self.model, "context_window", None)
        if not window:
            return None
        max_new = (kwargs.get("max_new_tokens") or getattr(self.model, "generation_defaults", {}).get("max_new_tokens")
                   or 512)
        return window - max_new

    def _step(self, index: int, reply: str, result: AgentResult, lang: str) -> Step:
        """Read one reply and act on it: a final answer, a tool call, or an error observation."""
        reading = react.read_step(reply, self.tools.values(), lang)
        step = Step(index=index, text=reading.text, kind=reading.kind, thought=reading.thought,
                    action=reading.action, action_input=reading.action_input, arguments=reading.arguments)
        if reading.kind in ("final_answer", "no_action"):
            step.final_answer = reading.answer
            result.answer, result.finished, result.stop_reason = reading.answer, True, reading.kind
            return step
        if reading.kind == "action":
            return self._call_tool(step, lang, result)
        return self._format_error(step, reading.kind, reading.error, result)

    def _format_error(self, step: Step, kind: str, message: str, result: AgentResult) -> Step:
        """An error observation; the same mistake twice in a row also gets a complete worked step."""
        step.kind, step.error = kind, message
        step.observation = f"Error: {message}"
        last = result.steps[-1] if result.steps else None
        if last is not None and last.kind == kind and last.error == message and self.tools:
            tool = self.tools.get(step.action or "") or next(iter(self.tools.values()))
            step.observation += f"\nA complete step looks like this:\n{react.worked_step(tool)}"
        return step

    def _call_tool(self, step: Step, lang: str, result: AgentResult) -> Step:
        tool = self.tools.get(step.action or "")
        if tool is None:  # call_plugin with a name the model wrote
            found = react.read_step(f"Action: {step.action}\nAction Input: {step.action_input or ''}",
                                    self.tools.values())
            if found.kind not in ("action", "bad_input"):
                return self._format_error(step, found.kind, found.error, result)
            tool, step.action = self.tools[found.action], found.action
        try:
            if step.arguments is None:
                step.arguments = react.read_arguments(step.action_input or "", tool)
            step.arguments = tool.validate(step.arguments)
        except (react.ActionInputError, ToolError) as e:
            step.arguments = None
            return self._format_error(step, "bad_input", react.bad_input_message(tool, e), result)
        repeat = None if tool.repeatable else _same_call(step, result.steps)
        if repeat is not None:
            step.kind, step.error = "repeated_call", "repeated call"
            step.observation = (
                f"You already called {step.action} with these arguments in step {repeat.index + 1}; "
                f"its result is above. Do not repeat it: use that result, try other arguments or "
                f"another tool, or give the Final Answer.")
            return step
        t0 = time.perf_counter()
        step.kind = "action"
        try:
            raw = invoke(tool, step.arguments, self.tool_timeout)
        except ToolError as e:
            raw, step.error, step.kind = f"Error: {e}", redact(str(e)), "tool_error"
        except Exception as e:  # a tool bug must not end the run; the model can try something else
            log.warning("tool %s raised", step.action, exc_info=True)
            raw = f"Error: {step.action} failed: {type(e).__name__}: {e}"
            step.error, step.kind = redact(f"{type(e).__name__}: {e}"), "tool_error"
        step.tool_seconds = time.perf_counter() - t0
        raw = redact(raw)
        step.observation = self._observation_text(raw, lang, step.thought, result)
        if step.observation != raw:
            step.raw_observation = raw
        return step

    def _observation_text(self, raw: str, lang: str, thought: str, result: AgentResult) -> str:
        """Tool output as it enters the prompt: control tokens broken, maybe distilled, length capped."""
        text = react.neutralize_control_tokens(raw, getattr(self.model, "control_tokens", ()))
        if self.distill_observations and len(text) > self.distill_threshold:
            text = self._distill(text, lang, thought, result)
        limit = self.max_observation_chars
        if limit is not None and len(text) > limit:
            text = text[:limit] + TRUNCATION_MARKER[lang].format(n=len(text) - limit)
        return text

    def _distill(self, observation: str, lang: str, thought: str, result: AgentResult) -> str:
        """Ask the model to keep only the facts of a long tool result that the current thought needs.

        The result in the distill prompt is cut like any prompt: to DISTILL_MAX_CHARS, then halved
        until the prompt fits the model's window (when known)."""
        def prompt_for(text: str) -> list[Message]:
            return [{"role": "user", "content": react.DISTILL_PROMPT[lang].format(
                question=result.question, thought=thought or "-", observation=text)}]

        shown = observation
        if len(shown) > DISTILL_MAX_CHARS:
            shown = shown[:DISTILL_MAX_CHARS] + TRUNCATION_MARKER[lang].format(n=len(observation) - DISTILL_MAX_CHARS)
        budget = self._prompt_budget(self.generate_kwargs)
        while budget is not None and len(shown) > 200 and (self.model.count_tokens(prompt_for(shown)) or 0) > budget:
            keep = len(shown) // 2
            shown = shown[:keep] + TRUNCATION_MARKER[lang].format(n=len(observation) - keep)
        reply = self._call_model(prompt_for(shown), **self.generate_kwargs)
        result.add_usage(usage_of(reply))
        facts = str(reply).strip()
        if not facts:
            return observation
        return react.DISTILLED_LABEL[lang].format(n=len(observation)) + facts

    def _force_final_answer(self, messages: list[Message], result: AgentResult, lang: str) -> None:
        """At the turn cap, ask once more for the answer from what the scratchpad holds."""
        reply, usage, seconds, notes = self._generate(messages, result, suffix=react.FORCE_FINAL[lang])
        answer = react.read_forced_answer(reply)
        step = Step(index=len(result.steps), text=reply.rstrip(), final_answer=answer or None,
                    kind="forced_answer" if answer else "no_forced_answer",
                    prompt_tokens=usage["prompt_tokens"], completion_tokens=usage["completion_tokens"],
                    cached_tokens=usage["cached_tokens"], model_seconds=seconds, notes=notes,
                    error=None if answer else "no final answer at the turn cap")
        self._record(result, step)
        result.answer, result.finished = answer, bool(answer)
        result.stop_reason = "max_turns" if answer else "no_forced_answer"

    def _record(self, result: AgentResult, step: Step) -> None:
        result.steps.append(step)
        if self.on_step is not None:
            self.on_step(step)


class _ModelFailed(Exception):
    """The model raised; `message` is its redacted first line."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


def _check_generate_keywords(model: BaseModel, kwargs: dict) -> None:
    """Refuse generation keywords the model does not take (a typo such as `max_turn=3`), naming the
    Agent's own arguments (from its signature) and the model's generation options."""
    options = getattr(model, "generation_options", None)
    if options is None:
        return
    unknown = sorted(set(kwargs) - set(options) - BaseModel.AGENT_OPTIONS)
    if unknown:
        agent_args = [p.name for p in inspect.signature(Agent.__init__).parameters.values()
                      if p.kind is p.POSITIONAL_OR_KEYWORD and p.name not in ("self", "model", "tools")]
        raise TypeError(f"unknown keyword argument(s) {', '.join(unknown)}: Agent takes {', '.join(agent_args)}, "
                        f"and {type(model).__name__} generation options {', '.join(sorted(options))}")


def _same_call(step: Step, previous: list[Step]) -> Step | None:
    """An earlier step that ran the same tool with the same arguments and got a result (a call that
    failed, e.g. timed out, may be tried again)."""
    key = json.dumps(step.arguments, sort_keys=True, ensure_ascii=False)
    for earlier in previous:
        if (earlier.action == step.action and earlier.arguments is not None and earlier.kind == "action"
                and json.dumps(earlier.arguments, sort_keys=True, ensure_ascii=False) == key):
            return earlier
    return None
