"""Offline evaluation: run an agent over a JSONL suite of questions and score its answers.

A suite line is {"id", "question", "answer"}; the answer is a string, a number, or a list of
accepted answers (`tinyagent.scoring` says how each is matched); other keys are copied into
the results. `evaluate` is the core and takes an agent factory; `main` is
`python -m tinyagent.eval`, which loads the model once and builds a fresh Agent per question
around it (agents hold conversation state, models are shared).
"""
from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from .agent import Agent, AgentResult
from .scoring import FORMAT_ERROR_KINDS, SuiteError, SuiteItem, load_suite, reply_kind, score, tool_error
from .trace import redact, to_jsonable

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
    kinds = [reply_kind(s, result) for s in steps]
    format_errors = [{"step": s.index, "kind": k, "error": s.error}
                     for s, k in zip(steps, kinds) if k in FORMAT_ERROR_KINDS]
    tool_errors = [{"step": s.index, "tool": s.action, "error": tool_error(s)} for s in steps if tool_error(s)]
    prediction = result.answer if result is not None else None
    record = {
        "id": item.id, "question": item.question, "answer": item.answer, "prediction": prediction,
        "success": error is None and bool(prediction) and score(prediction, item.answer),
        "format_valid": error is None and bool(steps) and not format_errors,
        "steps": len(steps), "valid_replies": len(steps) - len(format_errors),
        "format_errors": format_errors, "tool_errors": tool_errors,
        "repeated_calls": sum(1 for s in steps if s.kind == "repeated_call"),
        "stop_reason": result.stop_reason if result is not None else None,
        "prompt_tokens": result.prompt_tokens if result is not None else None,
        "completion_tokens": result.completion_tokens if result is not None else None,
        "seconds": round(result.seconds if result is not None else seconds, 3),
        "error": error, "trace": result,
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

    return {
        "n": n,
        "n_success": sum(r["success"] for r in records),
        "success_rate": rate(sum(r["success"] for r in records), n),
        "format_valid_rate": rate(sum(r["format_valid"] for r in records), n),
        "reply_format_valid_rate": rate(sum(r["valid_replies"] for r in records), replies),
        "tool_error_rate": rate(sum(bool(r["tool_errors"]) for r in records), n),
        "n_errors": n - len(ran),
        "mean_steps": round(sum(r["steps"] for r in ran) / len(ran), 3) if ran else None,
        "mean_seconds": round(sum(r["seconds"] for r in ran) / len(ran), 3) if ran else None,
        "prompt_tokens": total("prompt_tokens"),
        "completion_tokens": total("completion_tokens"),
        "wall_seconds": round(wall_seconds, 3) if wall_seconds is not None else None,
    }


def evaluate(
    suite_items: Sequence[SuiteItem],
    agent_factory: Callable[[], Agent],
    concurrency: int = 1,
    on_result: Callable[[dict], None] | None = None,
) -> tuple[list[dict], dict]:
    """Run a fresh agent from `agent_factory` on every item; return (records in suite order, summary).

    With `concurrency` > 1 the questions run in threads through `tinyagent.batch.run_many` (for
    models behind a server); otherwise one after another. `on_result(record)` is called as each
    question finishes. Ctrl-C raises EvalInterrupted holding the finished records.
    """
    from .batch import one_line_error, run_many

    started = time.perf_counter()
    done: dict[int, dict] = {}

    def finish(index: int, result: AgentResult | None, seconds: float, error: str | None) -> None:
        done[index] = score_run(suite_items[index], result, seconds, error)
        if on_result is not None:
            on_result(done[index])

    try:
        if concurrency > 1:
            batch = run_many(agent_factory, [it.question for it in suite_items], concurrency=concurrency,
                             on_done=lambda b: finish(b.index, b.result, b.seconds, b.error))
            for b in batch:  # run_many only logs a failing callback: score what it did not
                if b.index not in done:
                    finish(b.index, b.result, b.seconds, b.error)
        else:
            for index, item in enumerate(suite_items):
                t0 = time.perf_counter()
                try:
                    result = agent_factory().run(item.question)
                    error = result.error if result.stop_reason == "model_error" else None
                except Exception as e:  # a failed run is a failed question, not a failed evaluation
                    log.info("question %s failed", item.id, exc_info=True)
                    result, error = None, one_line_error(e)
                finish(index, result, time.perf_counter() - t0, error)
    except KeyboardInterrupt:
        records = [done[i] for i in sorted(done)]
        summary = summarize(records, time.perf_counter() - started)
        raise EvalInterrupted(records, {**summary, "interrupted": True}) from None
    records = [done[i] for i in sorted(done)]
    return records, summarize(records, time.perf_counter() - started)


# --- the command line ----------------------------------------------------------------------------

def agent_factory_from_config(cfg) -> Callable[[], Agent]:
    """Load the config's model and tools once; return a factory of fresh Agents that share them."""
    from .config import build_agent, build_model, build_tools

    tools = build_tools(cfg)  # first: a bad corpus fails before the slow model load
    model = build_model(cfg)
    return lambda: build_agent(cfg, model, tools=tools)


def default_concurrency(backend: str) -> int:
    """Questions run at once unless --concurrency says: a server takes 4; a local model 8, as many as
    `HFChatModel` decodes in one batch (its `max_batch`), each agent keeping its own cache."""
    return 4 if backend == "openai" else 8


def _parser():
    import argparse

    p = argparse.ArgumentParser(prog="python -m tinyagent.eval",
                                description="Run a TinyAgent over a JSONL question suite and score the answers.")
    p.add_argument("--suite", required=True, help='JSONL file of {"id", "question", "answer"} lines')
    p.add_argument("--config", help="YAML config (default: the embedded model with its defaults)")
    p.add_argument("--model", help="override the model: embedded, a local folder, a .gguf file, a hub id, "
                                   "or the served name with --base-url")
    p.add_argument("--base-url", help="OpenAI-compatible server URL, e.g. http://127.0.0.1:8000/v1")
    p.add_argument("--tools", help="comma-separated tools, e.g. calculator,local_search ('' for none)")
    p.add_argument("--max-turns", type=int)
    p.add_argument("--max-new-tokens", type=int)
    p.add_argument("--concurrency", type=int, help="parallel questions (default 4 for the openai backend, 8 for "
                                                   "local models, which decode them in one batch)")
    p.add_argument("--limit", type=int, help="only the first N questions")
    p.add_argument("--out", help="output folder (default out/eval-<suite>-<time>)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON (progress goes to stderr)")
    return p


def _load_config(args):
    from .config import load_config, model_overrides

    overrides: dict = {"agent.max_turns": args.max_turns, "generation.max_new_tokens": args.max_new_tokens}
    if args.tools is not None:
        overrides["agent.tools"] = [t.strip() for t in args.tools.split(",") if t.strip()]
    if args.model or args.base_url:
        base = load_config(args.config)
        model = args.model or base.model.name or ""
        overrides.update(model_overrides(model, args.base_url, base.model.backend))
    return load_config(args.config, overrides)


def _progress_line(record: dict, count: int, total: int) -> str:
    mark = "ok  " if record["success"] else "FAIL"
    notes = [] if record["format_valid"] else ["format-error"]
    if record["tool_errors"]:
        notes.append(f"tool-errors={len(record['tool_errors'])}")
    if record["error"]:
        notes.append(f"error: {record['error']}")
    return (f"[{count}/{total}] {mark} {record['id']}  steps={record['steps']}  {record['seconds']:.1f}s"
            + (f"  ({', '.join(notes)})" if notes else ""))


def format_summary(summary: dict) -> str:
    """The summary as an aligned two-column table."""
    def num(key: str, fmt: str, scale: float = 1) -> str:
        return "-" if summary.get(key) is None else format(summary[key] * scale, fmt)
    rows = [("questions", f"{summary['n']}{'  (interrupted)' if summary.get('interrupted') else ''}"),
            ("success", f"{num('success_rate', '.1f', 100)}%  ({summary['n_success']}/{summary['n']})"),
            ("format-valid questions", num("format_valid_rate", ".1f", 100) + "%"),
            ("format-valid replies", num("reply_format_valid_rate", ".1f", 100) + "%"),
            ("questions with tool errors", num("tool_error_rate", ".1f", 100) + "%"),
            ("runs that crashed", str(summary["n_errors"])),
            ("mean steps", num("mean_steps", ".2f")), ("mean seconds", num("mean_seconds", ".2f")),
            ("tokens prompt / completion", f"{num('prompt_tokens', 'd')} / {num('completion_tokens', 'd')}"),
            ("wall seconds", num("wall_seconds", ".1f"))]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def _write(out: Path, records: list[dict], summary: dict) -> None:
    with open(out / "results.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps(record, ensure_ascii=False) + "\n" for record in records)
    (out / "summary.json").write_text(json.dumps(redact(summary), ensure_ascii=False, indent=2) + "\n",
                                      encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    import sys

    from .config import ConfigError, select_tools

    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    stream = sys.stderr if args.json else sys.stdout

    def say(text: str) -> None:
        print(text, file=stream, flush=True)

    def fail(message: str, code: int = 2) -> int:
        print(f"error: {message}", file=sys.stderr)
        return code

    for name in ("limit", "concurrency", "max_turns", "max_new_tokens"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            return fail(f"--{name.replace('_', '-')} must be at least 1, not {getattr(args, name)}")
    try:
        items = load_suite(args.suite)[: args.limit]
        cfg = _load_config(args)
    except (SuiteError, ConfigError) as e:
        return fail(str(e))
    concurrency = args.concurrency or default_concurrency(cfg.model.backend)
    out = Path(args.out or f"out/eval-{Path(args.suite).stem}-{time.strftime('%Y%m%d-%H%M%S')}")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        return fail(f"cannot create the output folder {out}: {e.strerror or e}")
    run = {"suite": str(args.suite), "config": cfg.source, "backend": cfg.model.backend,
           "model": cfg.model.name or cfg.model.path, "tools": select_tools(cfg)[0], "concurrency": concurrency}
    try:
        try:
            factory = agent_factory_from_config(cfg)
        except ConfigError as e:
            return fail(str(e))
        except (OSError, ImportError, ValueError, RuntimeError) as e:
            return fail(f"cannot load the model: {type(e).__name__}: {' '.join(str(e).split())[:300]}", 1)
        say(f"evaluating {len(items)} questions from {args.suite} (backend {cfg.model.backend}, "
            f"concurrency {concurrency}) -> {out}")
        finished: list[dict] = []
        with open(out / "results.jsonl", "w", encoding="utf-8") as partial:  # kept if the process dies
            def on_result(record: dict) -> None:
                partial.write(json.dumps(record, ensure_ascii=False) + "\n")
                partial.flush()
                finished.append(record)
                say(_progress_line(record, len(finished), len(items)))
            records, summary = evaluate(items, factory, concurrency, on_result)
        code = 0
    except EvalInterrupted as stop:
        records, summary, code = stop.records, stop.summary, 130
    except KeyboardInterrupt:
        return 130
    summary = {**summary, "run": run}
    _write(out, records, summary)  # suite order, whatever order the questions finished in
    say(format_summary(summary))
    say(f"results: {out / 'results.jsonl'}\nsummary: {out / 'summary.json'}")
    if args.json:
        print(json.dumps(summary, ensure_ascii=False, indent=2))
    return code


if __name__ == "__main__":
    raise SystemExit(main())
