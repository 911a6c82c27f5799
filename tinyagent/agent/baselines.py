"""The model alone: one plain prompt, one reply, no tools and no ReAct format (`format.direct`).

`DirectAnswer` has the shape of an `Agent` run (`run(question) -> AgentResult`, `on_step`, `stop`), so
`run_many` and the eval harness run and score it as they do the agent: it is the baseline an agent
must beat.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable

from ..format.direct import direct_messages, read_direct_answer
from ..format.kinds import StepKind
from ..models.model import BaseModel, Reply
from ..text import lang_for, one_line
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
        try:
            reply = Reply.of(self.model.generate(direct_messages(question, lang), **self.generate_kwargs))
        except Exception as e:
            log.info("the model failed", exc_info=True)
            result.error = one_line(e, limit=None)
            step = Step(index=0, text="", kind=StepKind.MODEL_ERROR, error=result.error)
            reason = StopReason.MODEL_ERROR
        else:
            result.add_usage(reply)
            text = reply.text.strip()
            answer = read_direct_answer(text)
            kind = StepKind.FINAL_ANSWER if answer else StepKind.NO_ACTION if text else StepKind.EMPTY
            step = Step(index=0, text=text, kind=kind, final_answer=answer or text,
                        error=None if answer else "no answer line" if text else "empty reply",
                        prompt_tokens=reply.prompt_tokens, completion_tokens=reply.completion_tokens,
                        cached_tokens=reply.cached_tokens, model_seconds=time.perf_counter() - started)
            result.answer = step.final_answer
            reason = StopReason.FINAL_ANSWER if answer else StopReason.NO_ACTION
        result.steps.append(step)
        result.stop_reason, result.finished = reason, reason.finished
        result.seconds = time.perf_counter() - started
        if self.on_step is not None:
            self.on_step(step)
        return result
