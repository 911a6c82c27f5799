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
from ..models.model import BaseModel, Reply
from ..text import lang_for, one_line
from ..tools.search_tool import query_argument
from ..tools.tool import Tool
from . import tool_calls
from .results import AgentResult, Step, StopReason
from .shaping import Observations, shaped
from .tool_calls import DEFAULT_TOOL_TIMEOUT

log = logging.getLogger(__name__)


class DirectAnswer:
    """Ask `model` a question once with the direct prompt; the reply's answer line is the answer.

    A reply without the line ("The answer is X." / "答案是 X。") is taken whole as the answer, as the
    agent takes a reply without labels, so both are scored by the same rules. `generate_kwargs` are the
    model's generation settings (max_new_tokens, temperature, ...).
    """

    def __init__(
        self, model: BaseModel, lang: str = "auto", on_step: Callable[[Step], None] | None = None, **generate_kwargs
    ):
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
            reply = Reply.of(self.model.generate(messages, **self.generate_kwargs))
        except Exception as e:
            log.info("the model failed", exc_info=True)
            result.error = one_line(e, limit=None)
            step = Step(index=index, text="", kind=StepKind.MODEL_ERROR, error=result.error)
            reason = StopReason.MODEL_ERROR
        else:
            result.add_usage(reply)
            text = reply.text.strip()
            answer = read_direct_answer(text)
            kind = StepKind.FINAL_ANSWER if answer else StepKind.NO_ACTION if text else StepKind.EMPTY
            step = Step(
                index=index,
                text=text,
                kind=kind,
                final_answer=answer or text,
                error=None if answer else "no answer line" if text else "empty reply",
                prompt_tokens=reply.prompt_tokens,
                completion_tokens=reply.completion_tokens,
                cached_tokens=reply.cached_tokens,
                model_seconds=time.perf_counter() - started,
            )
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


class RetrieveThenAnswer(DirectAnswer):
    """Retrieve-then-answer: the question itself sent to `search`, the results (control tokens broken, cut to
    `max_passage_chars`) put in the direct prompt, one model call; the answer read as `DirectAnswer` reads it.

    A run has two steps: the search (kind `action`, or `tool_error` when the tool failed; its `observation`
    is what the prompt shows) and the reply. A search that fails or finds nothing still gets an answer: the
    prompt then says the search found nothing, and why. The search runs without the agent's hooks (approval
    included): the baseline is a fixed pipeline, not a model's choice.
    """

    def __init__(
        self,
        model: BaseModel,
        search: Tool,
        lang: str = "auto",
        on_step: Callable[[Step], None] | None = None,
        max_passage_chars: int | None = Observations.max_chars,
        tool_timeout: float | None = DEFAULT_TOOL_TIMEOUT,
        **generate_kwargs,
    ):
        super().__init__(model, lang=lang, on_step=on_step, **generate_kwargs)
        self.search, self.argument = search, query_argument(search)
        self.max_passage_chars, self.tool_timeout = max_passage_chars, tool_timeout

    def messages(self, question: str, lang: str, result: AgentResult) -> list[dict]:
        arguments = {self.argument: question}
        output, kind, error, seconds = tool_calls.run(self.search, arguments, self.tool_timeout)
        control = tuple(getattr(self.model, "control_tokens", ()) or ())
        passages = shaped(output, lang, control, self.max_passage_chars) if error is None else no_passages(error, lang)
        self._add(
            result,
            Step(
                index=0,
                text="",
                kind=kind,
                action=self.search.name_for_model,
                action_input=json.dumps(arguments, ensure_ascii=False),
                arguments=arguments,
                observation=passages,
                raw_observation=output if output != passages else None,
                error=error,
                tool_seconds=seconds,
            ),
        )
        return retrieval_messages(question, passages, lang)
