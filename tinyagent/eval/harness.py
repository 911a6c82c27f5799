"""Running a suite: a fresh agent per question, each run scored into one JSON-ready record, and the
totals over them. `evaluate` takes an agent factory (agents hold conversation state, models are
shared)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from ..agent import AgentResult, StepKind
from ..redaction import redact
from ..runs import Runner, run_many
from ..text import one_line
from ..traces import to_jsonable
from .scoring import SuiteItem, score, tool_error

log = logging.getLogger(__name__)


# --- one question, and the summary ---------------------------------------------------------------


class EvalInterrupted(KeyboardInterrupt):
    """Ctrl-C during `evaluate`: carries the records of the questions that finished."""

    def __init__(self, records: list[dict], summary: dict):
        super().__init__("evaluation interrupted")
        self.records, self.summary = records, summary


def score_run(item: SuiteItem, result: AgentResult | None, seconds: float, error: str | None = None) -> dict:
    """The results.jsonl record of one question (redacted, JSON-ready)."""
    steps = result.steps if result is not None else []
    format_errors = [{"step": s.index, "kind": s.kind, "error": s.error} for s in steps if s.kind.format_error]
    tool_errors = [{"step": s.index, "tool": s.action, "error": tool_error(s)} for s in steps if tool_error(s)]
    prediction = result.answer if result is not None else None
    record = {
        "id": item.id,
        "question": item.question,
        "answer": item.answer,
        "prediction": prediction,
        "success": error is None and bool(prediction) and score(prediction, item.answer),
        "format_valid": error is None and bool(steps) and not format_errors,
        "steps": len(steps),
        "valid_replies": len(steps) - len(format_errors),
        "format_errors": format_errors,
        "tool_errors": tool_errors,
        "repeated_calls": sum(1 for s in steps if s.kind == StepKind.REPEATED_CALL),
        "refused_calls": sum(1 for s in steps if s.kind == StepKind.REFUSED),
        "edited_calls": sum(1 for s in steps if s.edited_from is not None),
        "stop_reason": result.stop_reason if result is not None else None,
        "prompt_tokens": result.prompt_tokens if result is not None else None,
        "completion_tokens": result.completion_tokens if result is not None else None,
        "seconds": round(result.seconds if result is not None else seconds, 3),
        "error": error,
        "trace": result,
    }
    for key, value in item.extra.items():  # e.g. "source"; never over a field of the record
        record.setdefault(key, value)
    return redact(to_jsonable(record))


def summarize(records: Sequence[dict], wall_seconds: float | None = None) -> dict:
    """Totals over the records: rates are fractions of all questions (a run that crashed counts
    as a failure and as not format-valid); means are over the runs that produced a result."""
    n = len(records)
    ran = [r for r in records if r["error"] is None]
    replies = sum(r["steps"] for r in records)

    def rate(count: int, total: int) -> float | None:
        return round(count / total, 4) if total else None

    def total(key: str) -> int | None:
        values = [r[key] for r in records if r[key] is not None]
        return sum(values) if values else None

    def mean(key: str) -> float | None:
        values = [r[key] for r in ran if r[key] is not None]
        return round(sum(values) / len(values), 1) if values else None

    return {
        "n": n,
        "n_success": sum(r["success"] for r in records),
        "success_rate": rate(sum(r["success"] for r in records), n),
        "format_valid_rate": rate(sum(r["format_valid"] for r in records), n),
        "reply_format_valid_rate": rate(sum(r["valid_replies"] for r in records), replies),
        "tool_error_rate": rate(sum(bool(r["tool_errors"]) for r in records), n),
        "refused_calls": sum(r["refused_calls"] for r in records),
        "edited_calls": sum(r["edited_calls"] for r in records),
        "n_errors": n - len(ran),
        "mean_steps": round(sum(r["steps"] for r in ran) / len(ran), 3) if ran else None,
        "mean_seconds": round(sum(r["seconds"] for r in ran) / len(ran), 3) if ran else None,
        "prompt_tokens": total("prompt_tokens"),
        "completion_tokens": total("completion_tokens"),
        "mean_prompt_tokens": mean("prompt_tokens"),
        "mean_completion_tokens": mean("completion_tokens"),
        "wall_seconds": round(wall_seconds, 3) if wall_seconds is not None else None,
        "by_need": by_need(records),
    }


def by_need(records: Sequence[dict]) -> dict[str, dict]:
    """Success per value of the suite's optional "needs" key (what a question needs: "calculator",
    "search"), so a run without tools shows where it had no way to the answer; {} when no line has it."""
    groups: dict[str, list[dict]] = {}
    for r in records:
        if r.get("needs"):
            groups.setdefault(str(r["needs"]), []).append(r)
    return {need: {"n": len(rs), "n_success": sum(r["success"] for r in rs)} for need, rs in groups.items()}


def disagreements(columns: Sequence[tuple[str, Sequence[dict]]]) -> list[dict]:
    """The questions right in some columns (runs, or agent and direct) and wrong in others, in the first
    column's order: {"id", "question", "answers": [{"label", "success", "prediction"}, ...]}. Only
    questions present in every column count."""
    by_label = [(label, {r["id"]: r for r in records}) for label, records in columns]
    if not by_label:
        return []
    shared = [i for i in by_label[0][1] if all(i in found for _, found in by_label)]
    rows = []
    for qid in shared:
        answers = [
            {"label": label, "success": found[qid]["success"], "prediction": found[qid]["prediction"]}
            for label, found in by_label
        ]
        if len({a["success"] for a in answers}) > 1:
            rows.append({"id": qid, "question": by_label[0][1][qid]["question"], "answers": answers})
    return rows


def evaluate(
    suite_items: Sequence[SuiteItem],
    agent_factory: Callable[[], Runner],
    concurrency: int = 1,
    on_result: Callable[[dict], None] | None = None,
) -> tuple[list[dict], dict]:
    """Run a fresh agent (or `DirectAnswer`) from `agent_factory` on every item; return (records in suite
    order, summary).

    With `concurrency` > 1 the questions run in threads through `tinyagent.runs.run_many` (for
    models behind a server); otherwise one after another. `on_result(record)` is called as each
    question finishes. Ctrl-C raises EvalInterrupted holding the finished records.
    """
    started = time.perf_counter()
    done: dict[int, dict] = {}

    def finish(index: int, result: AgentResult | None, seconds: float, error: str | None) -> None:
        done[index] = score_run(suite_items[index], result, seconds, error)
        if on_result is not None:
            on_result(done[index])

    try:
        if concurrency > 1:
            batch = run_many(
                agent_factory,
                [it.question for it in suite_items],
                concurrency=concurrency,
                on_done=lambda b: finish(b.index, b.result, b.seconds, b.error),
            )
            for b in batch:  # run_many only logs a failing callback: score what it did not
                if b.index not in done:
                    finish(b.index, b.result, b.seconds, b.error)
        else:
            for index, item in enumerate(suite_items):
                t0 = time.perf_counter()
                try:
                    result = agent_factory().run(item.question)
                    error = result.error if result.stop_reason.failed else None
                except Exception as e:  # a failed run is a failed question, not a failed evaluation
                    log.info("question %s failed", item.id, exc_info=True)
                    result, error = None, one_line(e, whole=True)
                finish(index, result, time.perf_counter() - t0, error)
    except KeyboardInterrupt:
        records = [done[i] for i in sorted(done)]
        summary = summarize(records, time.perf_counter() - started)
        raise EvalInterrupted(records, {**summary, "interrupted": True}) from None
    records = [done[i] for i in sorted(done)]
    return records, summarize(records, time.perf_counter() - started)
