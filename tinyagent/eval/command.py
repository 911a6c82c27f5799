"""`python -m tinyagent.eval`: load the model once, run a suite with a fresh agent per question,
write results.jsonl (one record per question, as each finishes) and summary.json, print the table.
An --out folder that holds results is refused unless --resume or --overwrite (eval/results.py)."""
from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path

from .. import config
from ..agent import Agent
from ..agent.protocols import PROTOCOLS
from . import results
from .harness import EvalInterrupted, evaluate, summarize
from .scoring import SuiteError, load_suite


def agent_factory_from_config(cfg) -> Callable[[], Agent]:
    """Load the config's model and tools once; return a factory of fresh Agents that share them."""
    tools = config.build_tools(cfg)  # first: a bad corpus fails before the slow model load
    model = config.build_model(cfg)
    return lambda: config.build_agent(cfg, model, tools=tools)


def default_concurrency(backend: str) -> int:
    """Questions run at once unless --concurrency says: a server takes 4; a local model 8, as many as
    `HFChatModel` decodes in one batch (its `max_batch`), each agent keeping its own cache."""
    return 4 if backend == "openai" else 8


def _parser() -> argparse.ArgumentParser:
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
    p.add_argument("--protocol", choices=PROTOCOLS, help="react, tools or auto (default: the config's)")
    p.add_argument("--constrained", action=argparse.BooleanOptionalAction, help="decode only valid steps")
    p.add_argument("--concurrency", type=int, help="parallel questions (default 4 for the openai backend, 8 for "
                                                   "local models, which decode them in one batch)")
    p.add_argument("--limit", type=int, help="only the first N questions")
    p.add_argument("--out", help="output folder (default out/eval-<suite>-<time>)")
    p.add_argument("--resume", action="store_true", help="finish the run in --out: keep its questions, run the rest "
                                                         "(and those whose run crashed)")
    p.add_argument("--overwrite", action="store_true", help="replace the results already in --out")
    p.add_argument("--json", action="store_true", help="print the summary as JSON (progress goes to stderr)")
    return p


def _load_config(args) -> config.Config:
    overrides: dict = {"agent.max_turns": args.max_turns, "generation.max_new_tokens": args.max_new_tokens,
                       "agent.protocol": args.protocol, "agent.constrained": args.constrained}
    if args.tools is not None:
        overrides["agent.tools"] = [t.strip() for t in args.tools.split(",") if t.strip()]
    if args.model or args.base_url:
        base = config.load_config(args.config)
        model = args.model or base.model.name or ""
        overrides.update(config.model_overrides(model, args.base_url, base.model.backend))
    return config.load_config(args.config, overrides)


def _progress_line(record: dict, count: int, total: int) -> str:
    mark = "ok  " if record["success"] else "FAIL"
    notes = [] if record["format_valid"] else ["format-error"]
    if record["tool_errors"]:
        notes.append(f"tool-errors={len(record['tool_errors'])}")
    if record["refused_calls"] or record["edited_calls"]:
        notes.append(f"refused={record['refused_calls']} edited={record['edited_calls']}")
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
            ("tool calls refused / edited", f"{summary['refused_calls']} / {summary['edited_calls']}"),
            ("mean steps", num("mean_steps", ".2f")), ("mean seconds", num("mean_seconds", ".2f")),
            ("tokens prompt / completion", f"{num('prompt_tokens', 'd')} / {num('completion_tokens', 'd')}"),
            ("wall seconds", num("wall_seconds", ".1f"))]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def main(argv: list[str] | None = None) -> int:
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
    except (SuiteError, config.ConfigError) as e:
        return fail(str(e))
    concurrency = args.concurrency or default_concurrency(cfg.model.backend)
    out = Path(args.out or f"out/eval-{Path(args.suite).stem}-{time.strftime('%Y%m%d-%H%M%S')}")
    try:
        out.mkdir(parents=True, exist_ok=True)
        kept = results.prepare(out, args.resume, args.overwrite)
    except OSError as e:
        return fail(f"cannot create the output folder {out}: {e.strerror or e}")
    except results.ResultsError as e:
        return fail(str(e))
    done = {r["id"] for r in kept}
    todo = [item for item in items if item.id not in done]
    run = {"suite": str(args.suite), "config": cfg.source, "backend": cfg.model.backend,
           "model": cfg.model.name or cfg.model.path, "tools": config.select_tools(cfg)[0], "concurrency": concurrency}
    try:
        try:
            factory = agent_factory_from_config(cfg)
            config.start_tracing(cfg)  # agent.otel: spans exported as OTEL_* say (flushed at exit by the SDK)
        except config.ConfigError as e:
            return fail(str(e))
        except (OSError, ImportError, ValueError, RuntimeError) as e:
            return fail(f"cannot load the model: {type(e).__name__}: {' '.join(str(e).split())[:300]}", 1)
        say(f"evaluating {len(todo)} questions from {args.suite} (backend {cfg.model.backend}, "
            f"concurrency {concurrency}) -> {out}" + (f" ({len(kept)} done before, kept)" if kept else ""))
        finished: list[dict] = []
        with results.Appender(out, kept) as partial:  # each question kept as it finishes, if the process dies
            def on_result(record: dict) -> None:
                partial.append(record)
                finished.append(record)
                say(_progress_line(record, len(kept) + len(finished), len(items)))
            new, summary = evaluate(todo, factory, concurrency, on_result)
        code = 0
    except EvalInterrupted as stop:
        new, summary, code = stop.records, stop.summary, 130
    except KeyboardInterrupt:
        return 130
    records = results.in_suite_order([item.id for item in items], [*kept, *new])
    summary = {**summarize(records, summary["wall_seconds"]), **({"interrupted": True} if code else {}),
               **({"resumed_with": len(kept)} if kept else {}), "run": run}
    results.finish(out, records, summary)  # suite order, whatever order the questions finished in
    say(format_summary(summary))
    say(f"results: {out / 'results.jsonl'}\nsummary: {out / 'summary.json'}")
    if args.json:
        print(json.dumps(summary, ensure_ascii=False, indent=2))
    return code
