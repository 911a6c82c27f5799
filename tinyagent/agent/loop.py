"""The loop: ask the model for a step, run the tools it calls, append the results, repeat, until a final
answer or the turn cap; then one forced answer.

How the model is talked to is the protocol's (`react.ReAct`, ReAct text, or `tools_protocol.Tools`, the
model's own tool-call format): the loop asks it for the prompt of each call, what a reply says, and what to
do around a turn. Everything else is here, the same for both, and reads top to bottom: `run` -> `_steps`
(the turns) -> `_act` (one reply's calls) -> `_prepare_call` / `_run_tool` (one call, through the hooks).
"""

from __future__ import annotations

import inspect
import logging
import threading
import time
from collections.abc import Callable

from ..format.arguments import bad_input_message
from ..format.direct import short_answer
from ..format.kinds import StepKind
from ..format.reading import Reading
from ..format.step_format import require_outlines
from ..format.templates import Overrides, Prompts, prompts_for
from ..models.model import BaseModel
from ..text import lang_for
from ..tools.tool import Tool
from ..tools.tool import tool as make_tool
from . import context, shaping, tool_calls
from .answer_schema import AnswerError, AnswerSchema
from .approval import Approver, Ask, as_approver
from .hooks import HookFailed, Hooks, around
from .protocols import PROTOCOLS, BaseProtocol, ProtocolName
from .react import ReAct
from .results import AgentResult, Generation, Step, StopReason
from .run import ModelFailed, RunState
from .tool_calls import DEFAULT_TOOL_TIMEOUT
from .tools_protocol import Tools

STUCK_REPEATS = 2  # repeated calls in a row after which the turn cap's answer is asked at once

log = logging.getLogger(__package__)  # "tinyagent.agent", for the whole loop


class Agent:
    """An agent over any `BaseModel` and a list of tools (`Tool`s or plain functions, made tools by `@tool`).

    `protocol` is how the model calls tools: "react" (ReAct text, the default; `ReAct(...)` sets its
    options), "tools" (the model's own tool-call format, `Tools(...)`) or "auto" (`auto_protocol`).
    `lang` is "auto" (from each question), "en" or "zh"; `max_turns` caps the model's replies before a
    forced answer. `prompts` overrides any prompt text (`format.templates`: {"react.system": ...} or a
    YAML file). `observations` shapes tool output (`shaping.Observations`); `tool_timeout` bounds a call.
    `on_step(step)` is called after each step, `on_text(text)` with text as the model writes it.
    `approve` (a callable or an `Approver`) is asked before tool calls run (approval.py); `hooks` run
    around each run, model call and tool call (hooks.py), after the approver. Other keywords are the
    model's generation settings (max_new_tokens, temperature, ...).
    One `Agent` keeps one conversation (`chat`); use one instance per thread. With `memory` (any object with
    `load()`, `append(question, result)` and `forget()`, such as `tinyagent.store.SQLiteStore().conversation(
    "trip")`) that conversation survives a restart: its turns are the history at the start, each chat adds one.
    """

    def __init__(
        self,
        model: BaseModel,
        tools: list[Tool | Callable] | None = None,
        protocol: str | BaseProtocol = "react",
        *,
        lang: str = "auto",
        max_turns: int = 5,
        prompts: Overrides | str | Prompts | None = None,
        observations: shaping.Observations | None = None,
        tool_timeout: float | None = DEFAULT_TOOL_TIMEOUT,
        on_step: Callable[[Step], None] | None = None,
        on_text: Callable[[str], None] | None = None,
        approve: Approver | Ask | None = None,
        hooks: list[Hooks] | None = None,
        memory=None,
        **generate_kwargs,
    ):
        if lang not in ("auto", "en", "zh"):
            raise ValueError(f"lang must be 'auto', 'en' or 'zh', not {lang!r}")
        if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
            raise ValueError(f"max_turns must be a whole number of at least 1, not {max_turns!r}")
        if tool_timeout is not None and not tool_timeout > 0:
            raise ValueError(f"tool_timeout must be a positive number of seconds or None, not {tool_timeout!r}")
        _check_generate_keywords(model, generate_kwargs)
        self.model = model
        self.tools: dict[str, Tool] = {}
        for t in tools or []:
            self.add_tool(t)
        self.protocol = protocol_for(protocol, model).resolved(model, self.tools.values())
        if self.protocol.constrained:
            require_outlines()
        self.lang, self.max_turns, self.tool_timeout = lang, max_turns, tool_timeout
        self.prompts = prompts_for(prompts)
        self.observations = observations or shaping.Observations()
        self.on_step, self.on_text = on_step, on_text
        self.hooks: list[Hooks] = ([as_approver(approve)] if approve is not None else []) + list(hooks or [])
        self.generate_kwargs = generate_kwargs
        self.memory = memory
        self.history: list[tuple[str, str]] = list(memory.load()) if memory is not None else []
        self._stop = threading.Event()

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
        """The system prompt in `lang`: for ReAct, the tool descriptions and the format."""
        return self.protocol.system_prompt(list(self.tools.values()), lang, self.prompts)

    def chat(self, question: str) -> AgentResult:
        """Answer `question` with the earlier turns of this conversation in context (and keep the turn in
        `memory`, when there is one)."""
        result = self.run(question, history=self.history)
        self.history.append((question, result.answer))
        if self.memory is not None:
            self.memory.append(question, result)
        return result

    def reset(self) -> None:
        """Forget the conversation (in `memory` too)."""
        self.history = []
        if self.memory is not None:
            self.memory.forget()

    # --- the loop -------------------------------------------------------------------------

    def run(self, question: str, history: list | None = None, answer_schema=None) -> AgentResult:
        """Answer one question: step until a final answer or `max_turns`, then force one.

        With `answer_schema` (a JSON Schema as a dict, or a pydantic model class) the final answer is JSON that
        fits it, as `result.data` (`answer_schema.py`): the question says so, an answer that does not fit is
        sent back once with what is wrong, and constrained decoding decodes within it.
        A model that raises ends the run with the steps so far (stop_reason "model_error"), and so
        does a hook ("hook_error"); KeyboardInterrupt still interrupts.
        """
        started = time.perf_counter()
        lang = lang_for(self.lang, question)
        run = self._state(question, lang)
        result = run.result
        run.answer_schema = AnswerSchema.of(answer_schema)
        asked = (
            question
            if run.answer_schema is None
            else (question + "\n\n" + self.prompts.fill("common.answer_format", lang, schema=run.answer_schema.text))
        )
        run.asked, run.history = asked, list(history or [])
        run.messages = self.protocol.conversation(asked, history, lang, self.system_prompt_for(lang), self.prompts)
        try:
            with around(self.hooks, "run", run.view):
                _end(result, self._reason(run), started)
        except HookFailed as e:  # before_run or after_run
            _end(result, _no_reply(run, StepKind.HOOK_ERROR, e.message), started)
        finally:
            self._stop.clear()  # the stop, if any, ended this run
        return result

    def _reason(self, run: RunState) -> StopReason:
        """Why the run's steps ended; a failure that ended them is recorded as a last step without a reply."""
        try:
            return self._steps(run)
        except context.ContextOverflow as e:
            return _no_reply(run, StepKind.CONTEXT_OVERFLOW, str(e), e.notes)
        except ModelFailed as e:
            return _no_reply(run, StepKind.MODEL_ERROR, e.message)
        except HookFailed as e:  # recorded here, so that after_run hooks see how the run ended
            return _no_reply(run, StepKind.HOOK_ERROR, e.message)

    def _steps(self, run: RunState) -> StopReason:
        """The run's turns (one model reply each, one step per tool call) up to an answer, the turn cap's
        forced answer, or a stop request. The protocol may make a first call of its own (ReAct's working)."""
        protocol, result = self.protocol, run.result
        first = protocol.first(run)  # a reply to act on as the first turn, or None
        for turn in range(self.max_turns):
            if run.stopped:
                return StopReason.STOPPED
            generation = first or run.generate(lead=protocol.lead)
            first, readings = None, protocol.read(generation.reply, self.tools.values(), run.lang, self.prompts)
            generation, readings, asked = protocol.completed(run, generation, readings)
            for step in self._act(run, turn, generation, readings):
                if asked and step.final_answer is not None:
                    step.kind = StepKind.ANSWER_ASKED
                check = protocol.sent_back(run, step, turn, self.max_turns) if step.final_answer is not None else None
                if check is None and step.final_answer is not None and run.answer_schema is not None:
                    check = _fitted(run, step, turn + 1 < self.max_turns)
                if check is not None:
                    step.kind, step.final_answer, step.observation = StepKind.RECHECK, None, check
                run.record(step)
                if step.final_answer is not None:
                    result.answer = _answer_of(run, step.final_answer)
                    return StopReason.FINAL_ANSWER if step.kind == StepKind.ANSWER_ASKED else StopReason(step.kind)
            if [s.kind for s in result.steps[-STUCK_REPEATS:]] == [StepKind.REPEATED_CALL] * STUCK_REPEATS:
                break  # the model is stuck on one call: more turns would repeat it, so the answer is asked now
        if run.stopped:
            return StopReason.STOPPED
        generation = run.generate(suffix=protocol.forced_suffix(run.lang, self.prompts), purpose="forced_answer")
        answer = protocol.forced_answer(generation.text, run.lang, self.prompts)
        step = generation.into(
            Step(
                index=len(result.steps),
                text=generation.text.rstrip(),
                final_answer=answer or None,
                kind=StepKind.FORCED_ANSWER if answer else StepKind.NO_FORCED_ANSWER,
                error=None if answer else "no final answer at the turn cap",
            )
        )
        if answer and run.answer_schema is not None:
            _fitted(run, step, may_send_back=False)
        run.record(step)
        result.answer = _answer_of(run, answer)
        return StopReason.MAX_TURNS if answer else StopReason.NO_FORCED_ANSWER

    # --- one reply's calls ----------------------------------------------------------------------

    def _act(self, run: RunState, turn: int, generation: Generation, readings: list[Reading]) -> list[Step]:
        """Act on one reply, read (`readings`, the protocol's): one step per tool call (the first with the
        call's counts). Past the protocol's cap the calls are refused; several run together when the
        protocol allows it (`tool_calls.run_together`), unless an approver asks about each."""
        steps = [Step.of(len(run.result.steps) + i, r) for i, r in enumerate(readings)]
        calls, runs = [], self.protocol.calls_at_once(len(readings))
        for i, (step, reading) in enumerate(zip(steps, readings)):
            step.turn = turn if len(steps) > 1 else None
            if i >= runs and reading.kind == StepKind.ACTION:
                tool_calls.refuse_extra(step, runs, len(readings), run.lang, self.prompts)
                continue
            tool = self._fill(step, reading, run, steps[:i])
            if tool is not None:
                calls.append((step, tool))
        together = self.protocol.together() and not any(isinstance(h, Approver) for h in self.hooks)
        tool_calls.run_together(calls, run.call_tool, together=together)
        generation.into(steps[0])
        return steps

    def act(self, reading: Reading, lang: str = "en") -> Step:
        """The step of one reading acted on outside a run (the tutorial's `call_plugin`): its call run through
        the hooks, or its answer or error observation."""
        step = Step.of(0, reading)
        tool = self._fill(step, reading, None)
        return step if tool is None else self._state("", lang).call_tool(step, tool)

    def _state(self, question: str, lang: str) -> RunState:
        """A run's state: its question and language, and what it needs of this agent."""
        return RunState(
            question,
            lang,
            AgentResult(question=question, lang=lang, protocol=str(self.protocol.name)),
            self.model,
            self.tools,
            self.protocol,
            self.prompts,
            self.hooks,
            self.generate_kwargs,
            self.observations,
            self.tool_timeout,
            self._stop,
            self.on_step,
            self.on_text,
        )

    def _fill(self, step: Step, reading: Reading, run: RunState | None, earlier: list[Step] = ()) -> Tool | None:
        """Fill in the step of a reading: a final answer, an error observation, or a call ready to run
        (its tool is returned; `run` is None outside a run)."""
        if reading.kind in (StepKind.FINAL_ANSWER, StepKind.NO_ACTION):
            step.final_answer = reading.answer
            return None
        if reading.kind == StepKind.ACTION:
            return self._prepare_call(step, run, earlier)
        self._format_error(step, reading.kind, reading.error, run)
        return None

    def _format_error(self, step: Step, kind: StepKind, message: str, run: RunState | None) -> Step:
        """An error observation; the same mistake twice in a row also gets a complete worked step."""
        step.kind, step.error = kind, message
        last = run.result.steps[-1] if run is not None and run.result.steps else None
        repeated = last is not None and last.kind == kind and last.error == message and self.tools
        worked = (self.tools.get(step.action or "") or next(iter(self.tools.values()))) if repeated else None
        step.observation = self.protocol.error_observation(message, worked, self.prompts)
        return step

    def _prepare_call(self, step: Step, run: RunState | None, earlier: list[Step] = ()) -> Tool | None:
        """Resolve, validate and guard the step's call: its tool when it is to run, else None (the step
        then holds the error observation). `earlier`: the steps before it of the same reply."""
        tool = tool_calls.resolve(step, self.tools)
        try:
            step.arguments = tool_calls.validate(tool, step)
        except tool_calls.BAD_ARGUMENTS as e:
            step.arguments = None
            self._format_error(step, StepKind.BAD_INPUT, bad_input_message(tool, e), run)
            return None
        same = None if tool.repeatable or run is None else tool_calls.earlier_call(step, [*run.result.steps, *earlier])
        if same is not None:
            step.kind, step.error = StepKind.REPEATED_CALL, "repeated call"
            step.observation = self.protocol.repeated_call(step, same, run.lang, self.prompts)
            return None
        return tool


def protocol_for(spec: str | BaseProtocol, model: BaseModel) -> BaseProtocol:
    """The protocol `spec` names ("react", "tools", "auto": `auto_protocol`), or `spec` itself; unresolved."""
    if isinstance(spec, BaseProtocol):
        return spec
    if spec not in PROTOCOLS:
        raise ValueError(f"protocol must be one of {', '.join(PROTOCOLS)} (or a ReAct(...) / Tools(...)), not {spec!r}")
    return Tools() if (auto_protocol(model) if spec == "auto" else spec) == ProtocolName.TOOLS else ReAct()


def auto_protocol(model: BaseModel) -> str:
    """What "auto" picks, by what was measured (docs/tools-protocol.md#measured): ReAct for a local model, even
    one whose template takes tools (Qwen2.5-Coder-0.5B-Instruct: ReAct answered more questions, with fewer
    steps, than its own format); the model's own format behind a server that parses calls itself
    (`tool_call_turns`: vLLM, LMDeploy, llama.cpp, Ollama, `transformers serve`), which was not measured here."""
    return ProtocolName.TOOLS if getattr(model, "tool_call_turns", False) else ProtocolName.REACT


def _answer_of(run: RunState, final_answer: str) -> str:
    """The run's answer: the final answer itself where the model wrote it inside a sentence (`short_answer`: a
    lead-in dropped, the one year a year question asks for); the step keeps the sentence. JSON for an answer
    schema is kept whole."""
    return (
        final_answer if run.answer_schema is not None or not final_answer else short_answer(final_answer, run.question)
    )


def _fitted(run: RunState, step: Step, may_send_back: bool) -> str | None:
    """A final answer read into the run's answer schema (`result.data`); the observation that sends it back
    once when it does not fit (and a turn is left), else None (the error then noted on the step)."""
    try:
        run.result.data = run.answer_schema.read(step.final_answer)
        return None
    except AnswerError as e:
        if may_send_back and not run.memo.get("schema_sent_back"):
            run.memo["schema_sent_back"] = True
            return run.prompts.fill("common.answer_schema", run.lang, schema=run.answer_schema.text, error=str(e))
        step.error = f"the answer does not fit the answer schema: {e}"
        return None


def _end(result: AgentResult, reason: StopReason, started: float) -> None:
    result.stop_reason, result.finished = reason, reason.finished
    result.seconds = time.perf_counter() - started


def _no_reply(run: RunState, kind: StepKind, error: str, notes: list | None = None) -> StopReason:
    """Record why a run got no reply (its steps so far are kept): the step, and the run's error."""
    result = run.result
    try:
        run.record(Step(index=len(result.steps), text="", kind=kind, error=error, notes=notes or []))
    except HookFailed as e:  # the hook that failed may fail again on this step: the first error stands
        log.info("a hook failed on the step that ends the run: %s", e.message)
    result.answer, result.error = "", error
    return StopReason(kind)


def _check_generate_keywords(model: BaseModel, kwargs: dict) -> None:
    """Refuse generation keywords the model does not take (a typo such as `max_turn=3`), naming the
    Agent's own arguments (from its signature) and the model's generation options."""
    unknown_of = getattr(model, "unknown_options", None)
    unknown = unknown_of(kwargs) if unknown_of is not None else []  # a model that does not say what it takes
    if unknown:
        agent_args = [
            p.name
            for p in inspect.signature(Agent.__init__).parameters.values()
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in ("self", "model", "tools")
        ]
        raise TypeError(
            f"unknown keyword argument(s) {', '.join(unknown)}: Agent takes {', '.join(agent_args)}, "
            f"and {type(model).__name__} generation options {', '.join(sorted(model.generation_options))}"
        )
