"""ReAct text, the tutorial's protocol: Thought / Action / Action Input, the scratchpad continued as one
assistant message (whose rendering `HFChatModel.render_prompt` checks, so the prompt only grows).

`ReAct(...)` holds every setting that only ReAct text means, and does the steps only ReAct takes around a
turn: the model's own working first (and the calculator setting its arithmetic right), an answer asked for
in the same step after a reply that only reasons, an answer sent back once to be checked.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import ClassVar

from ..format.direct import direct_messages, last_line, working_answer
from ..format.examples import EXAMPLES, examples_for
from ..format.kinds import FAILED_CALLS, StepKind
from ..format.messages import Message, history_to_messages, prompt_messages
from ..format.observations import error_observation, repeated_call_observation
from ..format.prompts import ANSWER_LEAD, STOP_WORDS, THOUGHT_LEAD, build_check_prompt, build_system_prompt
from ..format.reading import Reading, cut_at_observation, read_forced_answer, read_step
from ..format.retrieval import no_passages, retrieval_messages
from ..format.step_format import next_step_format
from ..format.templates import Prompts
from ..models.model import BaseModel, Reply
from ..tools import arithmetic
from ..tools.calculator import Calculator
from ..tools.search_tool import NOTHING_FOUND, find_search_tool, follow_up_query, query_argument, search_terms
from .protocols import BaseProtocol, ProtocolName
from .results import Generation, Step
from .run import RunState

#: Answers sent back once to be checked: none; right after a failed call; also one repeating the last result.
RECHECKS = ("off", "failed", "results")
#: When the agent searches: the question itself before the model's first reply, or only when the model calls it.
SEARCHES = ("first", "tool")
ASKED_NOTE = "the reply only reasoned: its Final Answer was asked for in the same step"
MAX_CORRECTIONS = 4  # wrong steps of one working the calculator sets right (`check_arithmetic`)


@dataclass(frozen=True)
class ReAct(BaseProtocol):
    """ReAct text and its settings. None means "decided for the model and tools" (`resolved`), the same rule
    whichever door (Python, a config, the command line) the agent is built through:

    - `working_first`: the model first answers as it would alone (the direct prompt, no tools), then is
      offered the tools to check that working, its answer the one to give when it holds. None: on when
      decoded free (measured: evals/README.md).
    - `check_arithmetic`: with the working first, the calculator checks the working's written arithmetic,
      sets its first wrong result right and has the model go on from there. None: on when the calculator
      is one of the tools.
    - `ask_answer`: a reply that only reasons is asked its Final Answer in the same step.
    - `recheck`: answers sent back once to be checked: "off", "failed" (right after a failed call),
      "results" (also one that only repeats the last tool result).
    - `thought_first`: each reply is begun with `Thought:` (off: measured, it halved the 0.5B model's right
      answers).
    - `examples`: worked examples in the system prompt: True for the shipped ones that fit the tools, or a
      list (or {lang: list}) of your own.
    - `constrained`: decode only replies in the format (the model must support it). None: as the model
      prefers (`BaseModel.prefers_constrained`: the embedded 135M model).
    - `search`: "first" has the agent search the question itself with the search tool before the model's first
      reply and put the results in front of the question (a `searched` step); "tool" leaves searching to the
      model. None: "first" when a search tool is among the tools (measured: evals/README.md).
    - `search_tool`: the name of the tool "first" searches with. None: the first of local_search, google_search
      and the docstore's search among the tools (`tools.search_tool`).
    """

    name: ClassVar[ProtocolName] = ProtocolName.REACT
    working_first: bool | None = None
    check_arithmetic: bool | None = None
    ask_answer: bool = True
    recheck: str = "failed"
    thought_first: bool = False
    examples: bool | list | dict | None = False
    constrained: bool | None = None
    search: str | None = None
    search_tool: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.recheck, bool):
            object.__setattr__(self, "recheck", "failed" if self.recheck else "off")
        if self.recheck not in RECHECKS:
            raise ValueError(f"recheck must be one of {', '.join(RECHECKS)} (or True / False), not {self.recheck!r}")
        if self.check_arithmetic and self.working_first is False:
            raise ValueError("check_arithmetic checks the model's own working: it needs working_first")
        if self.search is not None and self.search not in SEARCHES:
            raise ValueError(f"search must be one of {', '.join(SEARCHES)} or None, not {self.search!r}")

    def resolved(self, model: BaseModel, tools) -> ReAct:
        tools = list(tools)
        constrained = bool(
            getattr(model, "prefers_constrained", False) if self.constrained is None else self.constrained
        )
        working_first = (not constrained) if self.working_first is None else self.working_first
        calculator = any(isinstance(t, Calculator) for t in tools)
        check = working_first and (calculator if self.check_arithmetic is None else self.check_arithmetic)
        examples = self.examples
        if examples is True:  # the shipped worked examples that fit these tools, per language
            examples = {lang: examples_for([t.name_for_model for t in tools], lang) for lang in EXAMPLES}
        search = self.search or ("first" if find_search_tool(tools, self.search_tool) is not None else "tool")
        return dataclasses.replace(
            self,
            constrained=constrained,
            working_first=working_first,
            check_arithmetic=check,
            examples=examples or None,
            search=search,
        )

    def record(self) -> dict:
        record = super().record()
        record["examples"] = bool(self.examples)
        return record

    # --- the prompt and each call ----------------------------------------------------------------

    def system_prompt(self, tools, lang: str, prompts: Prompts) -> str:
        examples = self.examples.get(lang) if isinstance(self.examples, dict) else self.examples
        return build_system_prompt(tools, lang, examples, prompts)

    def conversation(
        self, question: str, history, lang: str, system: str, prompts: Prompts, passages: str | None = None
    ) -> list[Message]:
        """With the working first, the question as the model alone is asked it (`format.direct`), or with the
        `passages` its search found (`format.retrieval`, the retrieve-then-answer prompt); the tools come later,
        in the check turn. Without, the system prompt and the question (and its passages)."""
        if not self.working_first:
            if passages is not None:
                question = prompts.fill("react.searched", lang, question=question, passages=passages.strip())
            return super().conversation(question, history, lang, system, prompts)
        asked = (
            direct_messages(question, lang, prompts)
            if passages is None
            else retrieval_messages(question, passages, lang, prompts)
        )
        return [*history_to_messages(history), *asked]

    def prompt(self, messages: list[Message], steps, suffix: str = "") -> list[Message]:
        return prompt_messages(messages, steps, suffix)

    def options(
        self, tools, steps, forced: bool, constrained: bool, lang: str = "en", answer_schema: str | None = None
    ) -> dict:
        options: dict = {"stop": list(STOP_WORDS)}
        if constrained:
            options["constraint"] = next_step_format(tools, steps, forced=forced, answer_schema=answer_schema)
        return options

    def reply(self, reply: Reply) -> Reply:
        """The reply as the protocol keeps it: an observation the model invented is cut."""
        return dataclasses.replace(reply, text=cut_at_observation(reply.text))

    def read(self, reply: Reply, tools, lang: str, prompts: Prompts | None = None) -> list[Reading]:
        """The reply read (`format.reading.read_step`); a Final Answer that is one of the prompts' placeholders
        copied ("the tool's arguments as a JSON object") is a format error, never an answer."""
        reading = read_step(reply.text, tools, lang)
        if reading.kind == StepKind.FINAL_ANSWER and prompts is not None and prompts.is_placeholder(reading.answer):
            reading = Reading(
                StepKind.MALFORMED,
                reading.text,
                thought=reading.thought,
                error=f"the Final Answer {reading.answer!r} is the prompt's description of what to "
                "write, copied. Write the answer itself after Final Answer:",
            )
        return [reading]

    def forced_suffix(self, lang: str, prompts: Prompts) -> str:
        return prompts.text("react.force_final", lang)

    def forced_answer(self, text: str, lang: str, prompts: Prompts | None = None) -> str:
        answer = read_forced_answer(text)
        return "" if prompts is not None and prompts.is_placeholder(answer) else answer

    def error_observation(self, message: str, worked_tool, prompts: Prompts) -> str:
        return error_observation(message, worked_tool, prompts)

    def repeated_call(self, step: Step, earlier: Step, lang: str, prompts: Prompts) -> str:
        return repeated_call_observation(step.action, earlier.index + 1, prompts)

    # --- around a turn ------------------------------------------------------------------------------

    @property
    def lead(self) -> str:
        return THOUGHT_LEAD if self.thought_first and not self.constrained else ""

    def first(self, run: RunState) -> Generation | None:
        """With `working_first`: the model's working, decoded free, recorded as a `working` step whose
        observation (the next user turn) offers the tools to check it, with the working's own answer as the
        answer to give when it holds (its answer line; after a search first, else its last line, as
        retrieve-then-answer reads it). A working that is already a ReAct step (a call of one of the tools, or
        a Final Answer: a model that knows the format) is returned for the loop to act on as its first turn,
        so no call it makes is dropped. With `check_arithmetic`, its written arithmetic is set right first."""
        if self.search == "first":
            self._search_first(run)
        if not self.working_first:
            return None
        generation = run.generate(purpose="working", free=True)
        reading = self.read(generation.reply, run.tools.values(), run.lang, run.prompts)[0]
        if reading.kind in (StepKind.ACTION, StepKind.FINAL_ANSWER):
            return generation
        if self.check_arithmetic:
            generation = self._corrected(run, generation)
        answer = working_answer(generation.text)
        if answer is None and self.search == "first":  # grounded in the passages: an answer without its line
            answer = last_line(generation.text)
        answer = None if answer is None or run.prompts.is_placeholder(answer) else answer
        check = build_check_prompt(run.tools.values(), run.lang, answer, run.prompts)
        _record_working(run, generation, check)
        return None

    def _search_first(self, run: RunState) -> None:
        """The question itself sent to the search tool (through the hooks and approval, like any call) as a
        `searched` step, and its results put in front of the question in the run's conversation: the model's
        first reply is then grounded, and the prompt still only grows. A follow-up that points back ("his first
        album") is searched with the last question's naming words added. When it finds nothing, the question's
        naming words are searched once more (`search_terms`); when that fails too, is refused or finds nothing,
        the results' place says so."""
        tool = find_search_tool(run.tools.values(), self.search_tool)
        if tool is None:
            return
        first = follow_up_query(run.question, run.history)  # "his first album" with the last question's names
        for query in dict.fromkeys(q for q in (first, search_terms(first)) if q):
            arguments = {query_argument(tool): query}
            step = Step(
                index=len(run.result.steps),
                text="",
                action=tool.name_for_model,
                arguments=arguments,
                action_input=json.dumps(arguments, ensure_ascii=False),
            )
            run.call_tool(step, tool)
            found = _found(step)
            step.kind = StepKind.SEARCHED
            run.record(step)
            if found:
                break
        passages = step.observation if found else no_passages(step.error or "no results", run.lang, run.prompts)
        system = self.system_prompt(list(run.tools.values()), run.lang, run.prompts)
        run.messages = self.conversation(run.asked, run.history, run.lang, system, run.prompts, passages)

    def _corrected(self, run: RunState, generation: Generation) -> Generation:
        """The working with its written arithmetic set right (`tools.arithmetic`): cut at the first result the
        calculator finds wrong, that result replaced by the calculator's, and the rest written again by the
        model from there, so the steps after it use the right number; up to MAX_CORRECTIONS times, never the
        same cut twice. Each correction is a note of the step; the step's reply is the working as corrected."""
        starts: set[str] = set()
        for _ in range(MAX_CORRECTIONS):
            wrong = arithmetic.wrong_claims(generation.text)
            start = arithmetic.corrected(generation.text, wrong[0]) if wrong else None
            if start is None or start in starts or run.stopped:
                break  # nothing (more) to set right, the same cut again, or the run is asked to stop
            starts.add(start)
            note = run.prompts.fill(
                "check.correction", run.lang, claim=wrong[0], expression=wrong[0].expression, value=wrong[0].computed
            )
            shown = start[start.rstrip("\n").rfind("\n") + 1 :]  # the line set right, as it goes on
            run.show(f"\n[{note}]\n{shown}")
            try:
                more = run.generate(suffix=start, purpose="correction", free=True)
            except Exception:  # the model or a hook failed: the working so far is kept, then the run ends
                _record_working(run, generation)
                raise
            generation = generation.then(more, start + more.text, note)
        return generation

    def completed(
        self, run: RunState, generation: Generation, readings: list[Reading]
    ) -> tuple[Generation, list[Reading], bool]:
        """A reply that only reasoned (no Action, no Final Answer), continued with `Final Answer:` in the same
        step (with `ask_answer`, decoded free): its working is kept and its answer asked for, without an error
        turn (the loop marks the step `answer_asked`, a format error in scoring)."""
        if not (self.ask_answer and not self.constrained and len(readings) == 1 and readings[0].thought_only):
            return generation, readings, False
        asked = generation.text.rstrip() + ANSWER_LEAD
        run.show(ANSWER_LEAD)
        more = run.generate(suffix=asked, purpose="answer")
        answer = self.forced_answer(more.text, run.lang, run.prompts)
        if not answer:
            return generation, readings, False
        generation = generation.then(more, f"{asked} {answer}", ASKED_NOTE)
        return generation, self.read(generation.reply, run.tools.values(), run.lang, run.prompts), True

    def sent_back(self, run: RunState, step: Step, turn: int, max_turns: int) -> str | None:
        """The observation that sends an answer back once to be checked, or None to take it: an answer right
        after a failed call (which gave nothing to answer from); with `recheck="results"`, also one that only
        repeats the last tool result (which may answer one step, not the question). A turn must be left."""
        steps = run.result.steps
        if (
            self.recheck == "off"
            or turn + 1 >= max_turns
            or not steps
            or any(s.kind == StepKind.RECHECK for s in steps)
        ):
            return None
        last = steps[-1]
        if last.kind in FAILED_CALLS:
            return run.prompts.text("react.recheck", run.lang)
        shown = (last.observation or "").strip()
        if (
            self.recheck == "results"
            and last.kind == StepKind.ACTION
            and 0 < len(shown) <= 40
            and shown in step.final_answer
        ):
            return run.prompts.fill("react.recheck_result", run.lang, result=shown)
        return None


def _found(step: Step) -> bool:
    """Whether a search call ran and found something."""
    return (
        step.kind in (StepKind.ACTION, StepKind.EDITED)
        and bool((step.observation or "").strip())
        and not NOTHING_FOUND.match(step.observation)
    )


def _record_working(run: RunState, generation: Generation, check: str | None = None) -> None:
    """The working as the run's first reply; its observation the check turn (None: the run ends there)."""
    run.record(
        generation.into(
            Step(index=len(run.result.steps), text=generation.text, kind=StepKind.WORKING, observation=check)
        )
    )
