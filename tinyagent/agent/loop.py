"""The loop: ask the model for a step, run the tools it calls, append the results, repeat; in ReAct text or
the model's own tool-call format (`protocols.py`).

A little over 300 lines: the loop with its model and tool calls through the hooks reads best whole."""
from __future__ import annotations

import inspect
import logging
import threading
import time
from collections.abc import Callable

from ..format.kinds import StepKind
from ..format.messages import Message
from ..format.step_format import require_outlines
from ..models.base import BaseModel, usage_of
from ..text import lang_for, one_line
from ..tools.base import Tool
from ..tools.base import tool as make_tool
from ..tools.calculator import Calculator
from ..tools.llm_tool import LLMTool
from ..tutorial import TutorialAgent
from . import context
from .acting import Acting
from .approval import Approver, Ask, as_approver
from .hooks import HookFailed, Hooks, ModelCall, Run, around, guarded, notify
from .protocols import protocol_for
from .results import AgentResult, Generation, Step, StopReason

#: Answers sent back once to be checked: none; right after a failed call; also one repeating the last result.
RECHECKS = ("off", "failed", "results")
STUCK_REPEATS = 2  # repeated calls in a row after which the turn cap's answer is asked at once

log = logging.getLogger(__package__)  # "tinyagent.agent", for the whole loop

DEFAULT_MAX_OBSERVATION_CHARS = 4000
DEFAULT_DISTILL_THRESHOLD = 1500
DEFAULT_TOOL_TIMEOUT = 120.0


class Agent(Acting, TutorialAgent):
    """A ReAct agent over any `BaseModel` and a list of tools.

    One `Agent` keeps one conversation (`chat`); use one instance per thread.
    `on_step(step)` is called after each step, `on_text(text)` with text as the model writes it.
    `constrained=True` has the model decode only replies in the format for these tools
    (`format.step_format.next_step_format`); the model must support it (`HFChatModel` with outlines).
    `protocol` is how the model calls tools: "react" (ReAct text, the default), "tools" (the model's own
    tool-call format, `protocols.Tools`; several calls in one reply run together) or "auto"
    (`protocols.auto_protocol`); each result says which it used (`AgentResult.protocol`).
    `approve` (a callable or an `Approver`) is asked before tool calls run (approval.py); `hooks`
    run around each run, model call and tool call (hooks.py), after the approver.
    `working_first=True` (ReAct only) has the model first answer as it would alone (the direct prompt of
    `format.direct`, no tools), then offers it the tools to check that working, with the working's answer
    as the answer to give when it holds; None: on for ReAct decoded free (the config's default).
    `check_arithmetic=True` (with `working_first`) has the calculator check the working's written arithmetic
    and set its first wrong result right, the model going on from there (`tools.arithmetic`); None: on when
    the calculator is one of the tools.
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
        approve: Approver | Ask | None = None,
        hooks: list[Hooks] | None = None,
        protocol: str = "react",
        recheck: bool | str = True,
        thought_first: bool = False,
        ask_answer: bool = True,
        working_first: bool | None = False,
        check_arithmetic: bool | None = None,
        **generate_kwargs,
    ):
        if lang not in ("auto", "en", "zh"):
            raise ValueError(f"lang must be 'auto', 'en' or 'zh', not {lang!r}")
        if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
            raise ValueError(f"max_turns must be a whole number of at least 1, not {max_turns!r}")
        if tool_timeout is not None and not tool_timeout > 0:
            raise ValueError(f"tool_timeout must be a positive number of seconds or None, not {tool_timeout!r}")
        _check_generate_keywords(model, generate_kwargs)
        if constrained:
            require_outlines()
        self.model = model
        self.protocol = protocol_for(protocol, model)
        self.tools: dict[str, Tool] = {}
        for t in tools or []:
            self.add_tool(t)
        if llm_fallback:
            self.add_tool(LLMTool(model, lang=None if lang == "auto" else lang))
        self.lang, self.max_turns, self.system_prompt, self.examples = lang, max_turns, system_prompt, examples
        self.max_observation_chars = max_observation_chars
        self.distill_observations, self.distill_threshold = distill_observations, distill_threshold
        recheck = {True: "failed", False: "off"}.get(recheck, recheck) if isinstance(recheck, bool) else recheck
        if recheck not in RECHECKS:
            raise ValueError(f"recheck must be one of {', '.join(RECHECKS)} (or True / False), not {recheck!r}")
        self.constrained, self.tool_timeout, self.recheck = constrained, tool_timeout, recheck
        if working_first is None:
            working_first = default_working_first(self.protocol.react_text, constrained)
        self.thought_first, self.ask_answer, self.working_first = thought_first, ask_answer, working_first
        if working_first and not self.protocol.react_text:
            raise ValueError("working_first needs the ReAct protocol (protocol='react'), not "
                             f"{self.protocol.name!r}")
        if check_arithmetic and not working_first:
            raise ValueError("check_arithmetic checks the model's own working: it needs working_first")
        self.check_arithmetic = default_check_arithmetic(check_arithmetic, working_first,
                                                         has_calculator(self.tools.values()))
        self.on_step, self.on_text = on_step, on_text
        self.hooks: list[Hooks] = ([as_approver(approve)] if approve is not None else []) + list(hooks or [])
        self.generate_kwargs = generate_kwargs
        self.history: list[tuple[str, str]] = []
        self._stop = threading.Event()
        self._run: Run | None = None  # the run in progress, as hooks see it

    def stop(self) -> None:
        """End the run in progress after its current step (thread-safe); it ends with stop_reason
        "stopped" and keeps its steps. Asked between runs, it ends the next run before its first step:
        a stop is never lost. The run after a stopped one starts normally."""
        self._stop.set()

    def cancel_stop(self) -> None:
        """Withdraw a stop that has not ended a run yet (one asked just after the run it meant ended)."""
        self._stop.clear()

    def add_tool(self, t: Tool | Callable) -> None:
        t = t if isinstance(t, Tool) else make_tool(t)
        if t.name_for_model in self.tools:
            raise ValueError(f"two tools are named {t.name_for_model!r}: {self.tools[t.name_for_model]!r} and {t!r}")
        self.tools[t.name_for_model] = t

    def system_prompt_for(self, lang: str = "en") -> str:
        """The system prompt in `lang` (or `system_prompt`): for ReAct, tool descriptions and the format."""
        if self.system_prompt is not None:
            return self.system_prompt
        examples = self.examples.get(lang) if isinstance(self.examples, dict) else self.examples
        return self.protocol.system_prompt(list(self.tools.values()), lang, examples)

    def chat(self, question: str) -> AgentResult:
        """Answer `question` with the earlier turns of this conversation in context."""
        result = self.run(question, history=self.history)
        self.history.append((question, result.answer))
        return result

    def reset(self) -> None:
        self.history = []

    # --- the loop -------------------------------------------------------------------------

    def run(self, question: str, history: list | None = None) -> AgentResult:
        """Answer one question: step until a final answer or `max_turns`, then force one.

        A model that raises ends the run with the steps so far (stop_reason "model_error"), and so
        does a hook ("hook_error"); KeyboardInterrupt still interrupts.
        """
        started = time.perf_counter()
        lang = lang_for(self.lang, question)
        messages = self._conversation(question, history, lang)
        result = AgentResult(question=question, lang=lang, protocol=str(self.protocol.name))
        self._run = Run(question, lang, result, self.model, self.tools, self.stop)
        try:
            with around(self.hooks, "run", self._run):
                self._end(result, self._reason(messages, result, lang), started)
        except HookFailed as e:  # before_run or after_run
            self._end(result, self._no_reply(result, StepKind.HOOK_ERROR, e.message), started)
        finally:
            self._run = None
            self._stop.clear()  # the stop, if any, ended this run
        return result

    def _reason(self, messages: list[Message], result: AgentResult, lang: str) -> StopReason:
        """Why the run's steps ended; a failure that ended them is recorded as a last step without a reply."""
        try:
            return self._steps(messages, result, lang)
        except context.ContextOverflow as e:
            return self._no_reply(result, StepKind.CONTEXT_OVERFLOW, str(e), e.notes)
        except _ModelFailed as e:
            return self._no_reply(result, StepKind.MODEL_ERROR, e.message)
        except HookFailed as e:  # recorded here, so that after_run hooks see how the run ended
            return self._no_reply(result, StepKind.HOOK_ERROR, e.message)

    @staticmethod
    def _end(result: AgentResult, reason: StopReason, started: float) -> None:
        result.stop_reason, result.finished = reason, reason.finished
        result.seconds = time.perf_counter() - started

    def _steps(self, messages: list[Message], result: AgentResult, lang: str) -> StopReason:
        """The run's turns (one model reply each, one step per tool call) up to an answer, the turn cap's
        forced answer, or a stop request. With `working_first`, the model's own working comes first."""
        first = self._work(messages, result, lang) if self.working_first else None  # a step already, or None
        for turn in range(self.max_turns):
            if self._stop.is_set():
                return StopReason.STOPPED
            lead = self.protocol.lead if self.thought_first and not self.constrained else ""
            generation = first or self._generate(messages, result, lead=lead)
            first, readings = None, self.protocol.read(generation.reply, self.tools.values(), lang)
            asked = (self._answer_asked(messages, result, generation, lang) if self.ask_answer
                     and self.protocol.react_text and not self.constrained and len(readings) == 1
                     and readings[0].thought_only else None)
            if asked is not None:
                generation, readings = asked, self.protocol.read(asked.reply, self.tools.values(), lang)
            for step in self._turn(turn, generation, readings, result, lang):
                if asked is not None and step.final_answer is not None:
                    step.kind = StepKind.ANSWER_ASKED
                check = self._recheck_of(step, result, turn, lang) if step.final_answer is not None else None
                if check is not None:
                    step.kind, step.final_answer, step.observation = StepKind.RECHECK, None, check
                self._record(result, step)
                if step.final_answer is not None:
                    result.answer = step.final_answer
                    return StopReason.FINAL_ANSWER if step.kind == StepKind.ANSWER_ASKED else StopReason(step.kind)
            if [s.kind for s in result.steps[-STUCK_REPEATS:]] == [StepKind.REPEATED_CALL] * STUCK_REPEATS:
                break  # the model is stuck on one call: more turns would repeat it, so the answer is asked now
        if self._stop.is_set():
            return StopReason.STOPPED
        generation = self._generate(messages, result, suffix=self.protocol.forced_suffix(lang), purpose="forced_answer")
        answer = self.protocol.forced_answer(generation.reply, lang)
        self._record(result, generation.into(Step(
            index=len(result.steps), text=generation.reply.rstrip(), final_answer=answer or None,
            kind=StepKind.FORCED_ANSWER if answer else StepKind.NO_FORCED_ANSWER,
            error=None if answer else "no final answer at the turn cap")))
        result.answer = answer
        return StopReason.MAX_TURNS if answer else StopReason.NO_FORCED_ANSWER

    def _no_reply(self, result: AgentResult, kind: StepKind, error: str, notes: list | None = None) -> StopReason:
        """Record why a run got no reply (its steps so far are kept): the step, and the run's error."""
        try:
            self._record(result, Step(index=len(result.steps), text="", kind=kind, error=error, notes=notes or []))
        except HookFailed as e:  # the hook that failed may fail again on this step: the first error stands
            log.info("a hook failed on the step that ends the run: %s", e.message)
        result.answer, result.error = "", error
        return StopReason(kind)

    def _call_model(self, messages: list[Message], purpose: str, result: AgentResult | None, **kwargs
                    ) -> ModelCall:
        """One model call through the model hooks (which may change the prompt or answer it themselves)."""
        call = ModelCall(self._run, len(result.steps) if result is not None else 0, purpose, messages, kwargs)
        with around(self.hooks, "model", call, settled=lambda c: c.reply is not None):
            if call.reply is None:
                t0 = time.perf_counter()
                try:
                    call.reply = self.model.generate(call.messages, **call.options)
                except Exception as e:  # a server's 400, out of memory: the run ends, its steps are kept
                    log.info("the model failed", exc_info=True)
                    call.error = e
                    raise _ModelFailed(one_line(e, limit=None)) from e
                finally:
                    call.seconds = time.perf_counter() - t0
        return call

    def _generate(self, messages: list[Message], result: AgentResult, suffix: str = "", purpose: str = "step",
                  lead: str = "", free: bool = False) -> Generation:
        """One model call on the conversation plus the run's steps (then `suffix`), as the protocol writes
        them: its messages, stop strings, tools and, when constrained (and not `free`), the reply's format.
        `lead` begins the reply (in the prompt, and in the reply returned)."""
        kwargs, pad = dict(self.generate_kwargs), lead + suffix
        kwargs.update(self.protocol.options(list(self.tools.values()), result.steps, forced=bool(suffix),
                                            constrained=self.constrained and not free, lang=result.lang))
        notes = context.fit_prompt(messages, result.steps, pad, self.model, kwargs, result.lang,
                                   render=self.protocol.prompt)
        if self.on_text is not None:
            kwargs["on_text"] = self.on_text
            if lead:
                guarded(self.on_text, "on_text", lead)
        prompt = self.protocol.prompt(messages, result.steps, pad)
        notes += self.protocol.before_call(self.model, prompt, kwargs.get("tools"), result.steps)
        call = self._call_model(prompt, purpose, result, **kwargs)
        self.protocol.after_call(str(call.reply))
        usage = usage_of(call.reply)
        result.add_usage(usage)
        text = lead + call.reply if str(call.reply).strip() else call.reply  # an empty reply stays empty
        return Generation(self.protocol.reply(text), usage, call.seconds, notes)

    def _record(self, result: AgentResult, step: Step) -> Step:
        result.steps.append(step)
        if self.on_step is not None:
            guarded(self.on_step, "on_step", step)
        notify(self.hooks, "on_step", step)
        return step


def has_calculator(tools) -> bool:
    """Whether the shipped calculator is among `tools`: what `check_arithmetic=None` turns on for."""
    return any(isinstance(t, Calculator) for t in tools)


def default_check_arithmetic(setting: bool | None, working_first: bool, calculator: bool) -> bool:
    """What `check_arithmetic` means once `working_first` is resolved: never without the working first;
    None: on when the calculator is one of the tools."""
    return bool(working_first) and (calculator if setting is None else bool(setting))


def default_working_first(react_text: bool, constrained: bool) -> bool:
    """What `working_first=None` means: on where it was measured to help, ReAct text decoded free."""
    return react_text and not constrained


class _ModelFailed(Exception):
    """The model raised; `message` is its redacted first line."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


def _check_generate_keywords(model: BaseModel, kwargs: dict) -> None:
    """Refuse generation keywords the model does not take (a typo such as `max_turn=3`), naming the
    Agent's own arguments (from its signature) and the model's generation options."""
    unknown_of = getattr(model, "unknown_options", None)
    unknown = unknown_of(kwargs) if unknown_of is not None else []  # a model that does not say what it takes
    if unknown:
        agent_args = [p.name for p in inspect.signature(Agent.__init__).parameters.values()
                      if p.kind is p.POSITIONAL_OR_KEYWORD and p.name not in ("self", "model", "tools")]
        raise TypeError(f"unknown keyword argument(s) {', '.join(unknown)}: Agent takes {', '.join(agent_args)}, "
                        f"and {type(model).__name__} generation options {', '.join(sorted(model.generation_options))}")
