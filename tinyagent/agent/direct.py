"""The model alone: one plain prompt, one reply, no tools and no ReAct format (`format.direct`); and
retrieve-then-answer: the question itself searched once, the results in that prompt (`format.retrieval`).

`DirectAnswer` and `RetrieveThenAnswer` have the shape of an `Agent` run (`run(question) -> AgentResult`,
`on_step`, `stop`), so `run_many` and the eval harness run and score them as they do the agent: they are
the baselines an agent must beat.
"""
from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable

from ..format.direct import direct_messages, read_direct_answer
from ..format.kinds import StepKind
from ..format.retrieval import no_passages, retrieval_messages
from ..models.base import BaseModel, usage_of
from ..text import lang_for, one_line
from ..tools.base import Tool
from . import tool_calls
from .loop import DEFAULT_MAX_OBSERVATION_CHARS, DEFAULT_TOOL_TIMEOUT
from .observations import shaped
from .results import AgentResult, Step, StopReason

log = logging.getLogger(__name__)


class DirectAnswer:
    """Ask `model` a question once with the direct prompt; the reply's answer line is the answer.

    A reply without the line ("The answer is X." / "答案是 X。") is taken whole as the answer, as the
    agent takes a reply without labels, so both are scored by the same rules. `generate_kwargs` are the
    model's generation settings (max_new_tokens, temperature, ...).
    """

    def __init__(self, model: BaseModel, lang: str = "auto", on_step: Callable[[Step], None] | None = None,
                 **generate_kwargs):
        if lang not in ("auto", "en", "zh"):
            raise ValueError(f"lang must be 'auto', 'en' or 'zh', not {lang!r}")
        check = getattr(model, "check_generation_options", None)
        if check is not None:
            check(generate_kwargs, where="generate", agent_options=False)
        self.model, self.lang, self.on_step, self.generate_kwargs = model, lang, on_step, generate_kwargs

    def stop(self) -> None:
        """Nothing to stop between steps: a direct run is one model call."""

    def run(self, question: str) -> AgentResult:
        """One reply to the direct prompt, as a run of one step; a model that raises ends it with
        stop_reason "model_error" (KeyboardInterrupt still interrupts)."""
        started = time.perf_counter()
        lang = lang_for(self.lang, question)
        result = AgentResult(question=question, lang=lang)
        messages = self.messages(question, lang, result)
        index = len(result.steps)
        try:
            reply = self.model.generate(messages, **self.generate_kwargs)
        except Exception as e:
            log.info("the model failed", exc_info=True)
            result.error = one_line(e, limit=None)
            step = Step(index=index, text="", kind=StepKind.MODEL_ERROR, error=result.error)
            reason = StopReason.MODEL_ERROR
        else:
            usage = usage_of(reply)
            result.add_usage(usage)
            text = str(reply).strip()
            answer = read_direct_answer(text)
            kind = StepKind.FINAL_ANSWER if answer else StepKind.NO_ACTION if text else StepKind.EMPTY
            step = Step(index=index, text=text, kind=kind, final_answer=answer or text,
                        error=None if answer else "no answer line" if text else "empty reply",
                        prompt_tokens=usage["prompt_tokens"], completion_tokens=usage["completion_tokens"],
                        cached_tokens=usage["cached_tokens"], model_seconds=time.perf_counter() - started)
            result.answer = step.final_answer
            reason = StopReason.FINAL_ANSWER if answer else StopReason.NO_ACTION
        self._add(result, step)
        result.stop_reason, result.finished = reason, reason.finished
        result.seconds = time.perf_counter() - started
        return result

    def messages(self, question: str, lang: str, result: AgentResult) -> list[dict]:
        """The conversation the model answers (steps taken before it go into `result`)."""
        return direct_messages(question, lang)

    def _add(self, result: AgentResult, step: Step) -> None:
        result.steps.append(step)
        if self.on_step is not None:
            self.on_step(step)


#: The names of the search tools retrieve-then-answer looks for, in this order (`find_search_tool`).
SEARCH_TOOLS = ("local_search", "google_search", "search")


def find_search_tool(tools, name: str | None = None) -> Tool | None:
    """The tool to search with: the one called `name` when given (None if there is none), else the first of
    `SEARCH_TOOLS` among `tools` (local_search, google_search, the docstore's search), else None."""
    by_name = {t.name_for_model: t for t in tools}
    if name is not None:
        return by_name.get(name)
    return next((by_name[n] for n in SEARCH_TOOLS if n in by_name), None)


def query_argument(tool: Tool) -> str:
    """The parameter a search tool takes its query in: its first required string parameter (search_query,
    entity, an MCP tool's query), else its first parameter."""
    params = tool.parameters or []
    if not params:
        raise ValueError(f"the search tool {tool.name_for_model} takes no parameter to put the question in")
    for p in params:
        if p.get("required") and (p.get("schema") or {}).get("type", "string") == "string":
            return p["name"]
    return params[0]["name"]


class RetrieveThenAnswer(DirectAnswer):
    """Retrieve-then-answer: the question itself sent to `search`, the results (control tokens broken, cut to
    `max_passage_chars`) put in the direct prompt, one model call; the answer read as `DirectAnswer` reads it.

    A run has two steps: the search (kind `action`, or `tool_error` when the tool failed; its `observation`
    is what the prompt shows) and the reply. A search that fails or finds nothing still gets an answer: the
    prompt then says the search found nothing, and why. The search runs without the agent's hooks (approval
    included): the baseline is a fixed pipeline, not a model's choice.
    """

    def __init__(self, model: BaseModel, search: Tool, lang: str = "auto", on_step: Callable[[Step], None] | None = None,
                 max_passage_chars: int | None = DEFAULT_MAX_OBSERVATION_CHARS,
                 tool_timeout: float | None = DEFAULT_TOOL_TIMEOUT, **generate_kwargs):
        super().__init__(model, lang=lang, on_step=on_step, **generate_kwargs)
        self.search, self.argument = search, query_argument(search)
        self.max_passage_chars, self.tool_timeout = max_passage_chars, tool_timeout

    def messages(self, question: str, lang: str, result: AgentResult) -> list[dict]:
        arguments = {self.argument: question}
        output, kind, error, seconds = tool_calls.run(self.search, arguments, self.tool_timeout)
        control = tuple(getattr(self.model, "control_tokens", ()) or ())
        passages = shaped(output, lang, control, self.max_passage_chars) if error is None else no_passages(error, lang)
        self._add(result, Step(index=0, text="", kind=kind, action=self.search.name_for_model,
                               action_input=json.dumps(arguments, ensure_ascii=False), arguments=arguments,
                               observation=passages, raw_observation=output if output != passages else None,
                               error=error, tool_seconds=seconds))
        return retrieval_messages(question, passages, lang)
