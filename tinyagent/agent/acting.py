"""How the agent acts on one reply (a mixin of `Agent`, kept apart so loop.py reads as the loop): the
reply read by the protocol, one step per call, each call resolved, validated, guarded, run through
the hooks, and its output shaped into the observation the model reads next; format errors answered
with what to write instead.
"""
from __future__ import annotations

from ..format import prompts
from ..format.arguments import bad_input_message
from ..format.direct import CORRECTION_NOTE, direct_messages, working_answer
from ..format.kinds import FAILED_CALLS, StepKind
from ..format.messages import Message, history_to_messages
from ..format.reading import Reading
from ..models.base import usage_of
from ..tools import arithmetic
from ..tools.base import Tool
from . import context, observations, tool_calls
from .approval import Approver
from .hooks import ToolCall, guarded
from .results import AgentResult, Generation, Step

ASKED_NOTE = "the reply only reasoned: its Final Answer was asked for in the same step"
MAX_CORRECTIONS = 4  # wrong steps of one working the calculator sets right (`check_arithmetic`)


class Acting:
    """`Agent`'s steps from a reply, and the run's conversation and first working. Uses the Agent's tools,
    protocol, hooks and settings, and its `_call_model`, `_generate` and `_record`."""

    def _turn(self, turn: int, generation: Generation, readings: list[Reading], result: AgentResult, lang: str
              ) -> list[Step]:
        """Act on one reply, read (`readings`, the protocol's): one step per tool call (the first with the
        call's counts). Several calls run together (`tool_calls.run_together`), unless an approver asks about each."""
        steps = [Step.of(len(result.steps) + i, r) for i, r in enumerate(readings)]
        calls = []
        for i, (step, reading) in enumerate(zip(steps, readings)):
            step.turn = turn if len(steps) > 1 else None
            tool = self._act(step, reading, lang, result, steps[:i])
            if tool is not None:
                calls.append((step, tool))
        asks = any(isinstance(h, Approver) for h in self.hooks)
        tool_calls.run_together(calls, lambda step, tool: self._run_tool(step, tool, lang, result), together=not asks)
        generation.into(steps[0])
        return steps

    def _step_of(self, index: int, reading: Reading, lang: str, result: AgentResult | None) -> Step:
        """The step of one reading, acted on: its call run, or its answer or error observation."""
        step = Step.of(index, reading)
        tool = self._act(step, reading, lang, result)
        return step if tool is None else self._run_tool(step, tool, lang, result)

    def _act(self, step: Step, reading: Reading, lang: str, result: AgentResult | None,
             earlier: list[Step] = ()) -> Tool | None:
        """Fill in the step of a reading: a final answer, an error observation, or a call ready to run
        (its tool is returned; `result` is None outside a run)."""
        if reading.kind in (StepKind.FINAL_ANSWER, StepKind.NO_ACTION):
            step.final_answer = reading.answer
            return None
        if reading.kind == StepKind.ACTION:
            return self._prepare_call(step, result, earlier)
        self._format_error(step, reading.kind, reading.error, result)
        return None

    def _format_error(self, step: Step, kind: StepKind, message: str, result: AgentResult | None) -> Step:
        """An error observation; the same mistake twice in a row also gets a complete worked step."""
        step.kind, step.error = kind, message
        last = result.steps[-1] if result is not None and result.steps else None
        repeated = last is not None and last.kind == kind and last.error == message and self.tools
        worked = (self.tools.get(step.action or "") or next(iter(self.tools.values()))) if repeated else None
        step.observation = self.protocol.error_observation(message, worked)
        return step

    def _prepare_call(self, step: Step, result: AgentResult | None, earlier: list[Step] = ()) -> Tool | None:
        """Resolve, validate and guard the step's call: its tool when it is to run, else None (the step
        then holds the error observation). `earlier`: the steps before it of the same reply."""
        tool = tool_calls.resolve(step, self.tools)
        try:
            step.arguments = tool_calls.validate(tool, step)
        except tool_calls.BAD_ARGUMENTS as e:
            step.arguments = None
            self._format_error(step, StepKind.BAD_INPUT, bad_input_message(tool, e), result)
            return None
        same = None if tool.repeatable or result is None else tool_calls.earlier_call(step, [*result.steps, *earlier])
        if same is not None:
            step.kind, step.error = StepKind.REPEATED_CALL, "repeated call"
            step.observation = self.protocol.repeated_call(step, same, result.lang)
            return None
        return tool

    def _run_tool(self, step: Step, tool: Tool, lang: str, result: AgentResult | None) -> Step:
        """Invoke a prepared call through the tool hooks and shape its output into the step's observation."""
        raw = tool_calls.settle(step, tool_calls.call(ToolCall(self._run, step, tool, step.arguments), self.hooks,
                                                      self.tool_timeout), lang)
        if raw is not None:
            step.observation = self._observation_text(raw, lang, step.thought, result)
            step.raw_observation = raw if step.observation != raw else None
        return step

    def _observation_text(self, raw: str, lang: str, thought: str, result: AgentResult | None) -> str:
        """Tool output as it enters the prompt (`observations.shaped`), distilled when it is long and
        `distill_observations` is on."""
        def distill(text: str) -> str:
            if not self.distill_observations or len(text) <= self.distill_threshold:
                return text
            question = result.question if result is not None else ""
            budget = context.prompt_budget(self.model, self.generate_kwargs)
            return observations.distilled(text, lang, question, thought, lambda m: self._ask(m, result),
                                          self.model.count_tokens, budget)

        return observations.shaped(raw, lang, getattr(self.model, "control_tokens", ()), self.max_observation_chars,
                                   distill)

    def _ask(self, messages: list[Message], result: AgentResult | None) -> str:
        """A model call outside the scratchpad (distilling), counted in the run's usage."""
        reply = self._call_model(messages, "distill", result, **self.generate_kwargs).reply
        if result is not None:
            result.add_usage(usage_of(reply))
        return str(reply)

    # --- the conversation, and the model's own working first (`working_first`) ----------------------

    def _conversation(self, question: str, history: list | None, lang: str) -> list[Message]:
        """The run's messages before its steps: the system prompt, the earlier turns, the question; with
        `working_first`, the question as the model alone is asked it (`format.direct`), the tools later."""
        if not self.working_first:
            return [{"role": "system", "content": self.system_prompt_for(lang)}, *history_to_messages(history),
                    {"role": "user", "content": question}]
        system = [] if self.system_prompt is None else [{"role": "system", "content": self.system_prompt}]
        return [*system, *history_to_messages(history), *direct_messages(question, lang)]

    def _work(self, messages: list[Message], result: AgentResult, lang: str) -> Generation | None:
        """The model's working, decoded free, as a `working` step; its observation, the next user turn, offers
        the tools to check it, with the working's own answer as the answer to give when it holds. A working
        that is already a ReAct step (a call of one of the tools, or a Final Answer: a model that knows the
        format) is returned for the loop to act on as its first turn, so no call it makes is dropped.
        With `check_arithmetic`, the working's written arithmetic is set right first (`_corrected`)."""
        generation = self._generate(messages, result, purpose="working", free=True)
        reading = self.protocol.read(generation.reply, self.tools.values(), lang)[0]
        if reading.kind in (StepKind.ACTION, StepKind.FINAL_ANSWER):
            return generation
        if self.check_arithmetic:
            generation = self._corrected(messages, result, generation, lang)
        self._record_working(result, generation,
                             prompts.build_check_prompt(self.tools.values(), lang, working_answer(generation.reply)))
        return None

    def _record_working(self, result: AgentResult, generation: Generation, check: str | None = None) -> None:
        """The working as the run's first step; its observation the check turn (None: the run ends there)."""
        self._record(result, generation.into(Step(index=0, text=generation.reply, kind=StepKind.WORKING,
                                                  observation=check)))

    def _corrected(self, messages: list[Message], result: AgentResult, generation: Generation,
                   lang: str) -> Generation:
        """The working with its written arithmetic set right (`tools.arithmetic`): cut at the first result the
        calculator finds wrong, that result replaced by the calculator's, and the rest written again by the
        model from there, so the steps after it use the right number; up to MAX_CORRECTIONS times, never
        the same cut twice. Each correction is a note of the step; the step's reply is the working as corrected."""
        starts: set[str] = set()
        for _ in range(MAX_CORRECTIONS):
            wrong = arithmetic.wrong_claims(generation.reply)
            start = arithmetic.corrected(generation.reply, wrong[0]) if wrong else None
            if start is None or start in starts or self._stop.is_set():
                break  # nothing (more) to set right, the same cut again, or the run is asked to stop
            starts.add(start)
            note = CORRECTION_NOTE[lang].format(claim=wrong[0], expression=wrong[0].expression,
                                               value=wrong[0].computed)
            if self.on_text is not None:
                shown = start[start.rstrip("\n").rfind("\n") + 1:]  # the line set right, as it goes on
                guarded(self.on_text, "on_text", f"\n[{note}]\n{shown}")
            try:
                more = self._generate(messages, result, suffix=start, purpose="correction", free=True)
            except Exception:  # the model or a hook failed: the working so far is kept, then the run ends
                self._record_working(result, generation)
                raise
            generation = generation.then(more, start + more.reply, note)
        return generation

    # --- answers: asked for after a reply that only reasons, sent back once to be checked -----------

    def _answer_asked(self, messages: list[Message], result: AgentResult, generation: Generation,
                      lang: str) -> Generation | None:
        """A reply that only reasoned (no Action, no Final Answer), continued with `Final Answer:` in the same
        step: its working is kept and its answer asked for, without an error turn (the loop marks the step
        `answer_asked`, a format error in scoring). None when no answer came."""
        asked = generation.reply.rstrip() + prompts.ANSWER_LEAD
        if self.on_text is not None:
            guarded(self.on_text, "on_text", prompts.ANSWER_LEAD)
        more = self._generate(messages, result, suffix=asked, purpose="answer")
        answer = self.protocol.forced_answer(more.reply, lang)
        if not answer:
            return None
        return generation.then(more, f"{asked} {answer}", ASKED_NOTE)

    def _recheck_of(self, step: Step, result: AgentResult, turn: int, lang: str) -> str | None:
        """The observation that sends an answer back once to be checked, or None to take it: an answer right
        after a failed call (which gave nothing to answer from); with `recheck="results"`, also one that only
        repeats the last tool result (which may answer one step, not the question). ReAct only, a turn left."""
        if not (self.recheck != "off" and self.protocol.react_text and turn + 1 < self.max_turns and result.steps) or any(
                s.kind == StepKind.RECHECK for s in result.steps):
            return None
        last = result.steps[-1]
        if last.kind in FAILED_CALLS:
            return prompts.RECHECK[lang]
        shown = (last.observation or "").strip()
        if self.recheck == "results" and last.kind == StepKind.ACTION and 0 < len(shown) <= 40 \
                and shown in step.final_answer:
            return prompts.RECHECK_RESULT[lang].format(result=shown)
        return None
