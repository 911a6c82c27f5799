"""`python -m tinyagent.eval` (and `tinyagent eval`): load the model once, run a suite with a fresh agent
per question and, beside it, the same model alone (`direct`) and retrieve-then-answer (`rag`: the question
searched with the run's search tool, the passages in that prompt; when the run has a search tool), the
default `--baseline direct,rag`; write each mode's records as they finish (results.jsonl, direct.jsonl,
rag.jsonl) and summary.json, print them side by side.
An --out folder that holds results is refused unless --resume or --overwrite (eval/out_folder.py).
`... compare DIR...` is `compare.main`."""

from __future__ import annotations

import argparse
import json
import logging
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path

from .. import config
from ..agent import DirectAnswer
from ..agent.baselines import RetrieveThenAnswer
from ..agent.protocols import PROTOCOLS
from ..agent.react import RECHECKS, SEARCHES
from ..runs import Runner
from ..tools.search_tool import SEARCH_TOOLS, find_search_tool
from . import compare, out_folder
from .harness import EvalInterrupted, disagreements, evaluate, summarize
from .progress import Progress
from .provenance import provenance
from .scoring import SuiteError, load_suite
from .table import AGENT, DIRECT, MODES, RAG, format_disagreements, side_by_side

PROG = "python -m tinyagent.eval"
FORMAT_VERSION = 2  # summary.json: 1 was the agent's totals at the top level; 2 has "agent", "direct", "rag", "run"
RESULT_FILES = compare.FILES
DEFAULT_BASELINE = "direct,rag"
#: --baseline words: the baselines run beside the agent; `only` (the model alone, no agent) and `none` (the
#: agent alone) are whole values.
BASELINE_WORDS = {"direct": DIRECT, "rag": RAG}
SHOWN_DISAGREEMENTS = 20  # questions listed under the printed table (all of them are in the HTML page)


def direct_factory(cfg, model) -> Callable[[], DirectAnswer]:
    """Fresh `DirectAnswer`s around `model` with the config's language and generation settings."""
    return lambda: DirectAnswer(model, lang=cfg.agent.lang, **cfg.generation_kwargs())


def rag_factory(cfg, model, search) -> Callable[[], RetrieveThenAnswer]:
    """Fresh `RetrieveThenAnswer`s around `model` and the `search` tool, with the config's language, generation
    settings and observation cap (the passages are cut as the agent's observations are)."""
    return lambda: RetrieveThenAnswer(
        model, search, lang=cfg.agent.lang, max_passage_chars=cfg.agent.max_observation_chars, **cfg.generation_kwargs()
    )


class BaselineError(ValueError):
    """A --baseline that cannot run as asked; the message is one line."""


def baseline_modes(spec: str | None, agent: bool, search_tools: list[str]) -> tuple[tuple[str, ...], str | None]:
    """The modes a run makes, in order, and a note when the default's `rag` was left out (no search tool).

    `spec` is --baseline (None: the default, direct,rag): comma-separated baselines run beside the agent
    (`direct`, `rag`), or `none` (the agent alone), or `only` (the model alone: `direct` without the agent);
    `agent` False (--no-agent) runs the baselines without the agent. `search_tools` are the run's tools that
    retrieve-then-answer can search with."""
    words = [w.strip() for w in (spec or DEFAULT_BASELINE).split(",") if w.strip()]
    if words in (["none"], ["only"]):
        if words == ["none"] and not agent:
            raise BaselineError("--baseline none runs only the agent; it cannot go with --no-agent")
        return ((AGENT,) if words == ["none"] else (DIRECT,)), None
    unknown = [w for w in words if w not in BASELINE_WORDS]
    if unknown or not words:
        raise BaselineError(
            f"--baseline: {', '.join(unknown) or 'nothing'} is not a baseline; give direct, rag or "
            "both (direct,rag), or none (the agent alone) or only (the model alone)"
        )
    chosen = [BASELINE_WORDS[w] for w in words]
    note = None
    if RAG in chosen and not search_tools:
        if spec is not None:
            raise BaselineError(
                "--baseline rag needs a search tool: add local_search or google_search to --tools "
                "(or name one with agent.search_tool)"
            )
        chosen.remove(RAG)
        note = "rag (retrieve-then-answer) left out: this run has no search tool"
    modes = tuple(m for m in MODES if m in chosen)
    return ((AGENT,) if agent else ()) + modes, note


def fresh_each(factory: Callable[[], Runner], model, on: bool) -> Callable[[], Runner]:
    """`factory`, the model's kept conversations forgotten (`reset_cache`) before each question when `on`
    (questions one at a time, a model that keeps them): each question then starts from the same cache state, so its result does not
    depend on the questions before it, and the model alone and an agent's first call (`working_first`)
    compute the same prompt the same way (llama.cpp's rounding depends on what its shared KV cache holds)."""
    if not on:
        return factory

    def fresh() -> Runner:
        model.reset_cache()
        return factory()

    return fresh


def default_concurrency(backend: str) -> int:
    """Questions run at once unless --concurrency says: a server takes 4; a local model 8, as many as
    `HFChatModel` decodes in one batch (its `max_batch`), each agent keeping its own cache."""
    return 4 if backend == "openai" else 8


def _parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description="Run a TinyAgent over a JSONL question suite and score "
        "the answers, beside the same model alone. `compare DIR...` compares result folders.",
    )
    p.add_argument("--suite", required=True, help='JSONL file of {"id", "question", "answer"} lines')
    p.add_argument("--config", help="YAML config (default: the embedded model with its defaults)")
    p.add_argument(
        "--model",
        help="override the model: embedded, a local folder, a .gguf file, a hub id, or the served name with --base-url",
    )
    p.add_argument("--base-url", help="OpenAI-compatible server URL, e.g. http://127.0.0.1:8000/v1")
    p.add_argument("--tools", help="comma-separated tools, e.g. calculator,local_search ('' for none)")
    p.add_argument("--max-turns", type=int)
    p.add_argument("--max-new-tokens", type=int)
    p.add_argument(
        "--baseline",
        metavar="direct,rag|direct|rag|none|only",
        help="the baselines beside the agent: direct, the model alone (no tools, no ReAct format); rag, "
        "retrieve-then-answer (the question sent to the run's search tool, its passages in that "
        "prompt); default direct,rag (rag only with a search tool); none: only the agent; only: "
        "only the model alone",
    )
    p.add_argument("--no-agent", dest="agent", action="store_false", help="run only the baselines, not the agent")
    p.add_argument("--protocol", choices=PROTOCOLS, help="react, tools or auto (default: the config's)")
    p.add_argument("--constrained", action=argparse.BooleanOptionalAction, help="decode only valid steps")
    p.add_argument(
        "--examples",
        action=argparse.BooleanOptionalAction,
        help="worked examples for the tools in the system prompt (default: the config's)",
    )
    p.add_argument(
        "--thought-first",
        action=argparse.BooleanOptionalAction,
        help="begin each ReAct reply with Thought: (default: the config's)",
    )
    p.add_argument(
        "--working-first",
        action=argparse.BooleanOptionalAction,
        help="the model's own working first (as alone), then the tools and format to check it (default: the config's)",
    )
    p.add_argument(
        "--check-arithmetic",
        action=argparse.BooleanOptionalAction,
        help="with --working-first: the calculator checks the working's written arithmetic and sets its "
        "first wrong result right, the model going on from there (default: the config's)",
    )
    p.add_argument(
        "--ask-answer",
        action=argparse.BooleanOptionalAction,
        help="ask a reply that only reasons for its Final Answer in the same step (default: the config's)",
    )
    p.add_argument(
        "--search",
        choices=SEARCHES,
        help="ReAct: first (the question searched before the model's first "
        "reply) or tool (only when the model calls it); default: the config's (first with a search tool)",
    )
    p.add_argument(
        "--recheck",
        choices=RECHECKS,
        help="answers sent back once to be checked: off, failed (right after a failed call), results "
        "(also one that only repeats the last tool result); default: the config's",
    )
    p.add_argument(
        "--concurrency",
        type=int,
        help="parallel questions (default 4 for the openai backend, 8 for "
        "local models, which decode them in one batch)",
    )
    p.add_argument(
        "--fresh-cache",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="with --concurrency 1, forget the model's kept KV cache before each question, so each "
        "result is the same whatever came before it (default: on; a local model only)",
    )
    p.add_argument("--limit", type=int, help="only the first N questions")
    p.add_argument("--out", help="output folder (default out/eval-<suite>-<time>)")
    p.add_argument(
        "--resume",
        action="store_true",
        help="finish the run in --out: keep its questions, run the rest (and those whose run crashed)",
    )
    p.add_argument("--overwrite", action="store_true", help="replace the results already in --out")
    p.add_argument("--json", action="store_true", help="print the summary as JSON (progress goes to stderr)")
    return p


def _load_config(args) -> config.Config:
    overrides: dict = {
        "agent.max_turns": args.max_turns,
        "generation.max_new_tokens": args.max_new_tokens,
        "agent.protocol": args.protocol,
        "agent.constrained": args.constrained,
        "agent.examples": args.examples,
        "agent.thought_first": args.thought_first,
        "agent.working_first": args.working_first,
        "agent.check_arithmetic": args.check_arithmetic,
        "agent.recheck": args.recheck,
        "agent.ask_answer": args.ask_answer,
        "agent.search": args.search,
    }
    if args.tools is not None:
        overrides["agent.tools"] = [t.strip() for t in args.tools.split(",") if t.strip()]
    if args.model or args.base_url:
        base = config.load_config(args.config)
        model = args.model or base.model.name or ""
        overrides.update(config.model_overrides(model, args.base_url, base.model.backend))
    return config.load_config(args.config, overrides)


def format_summary(summary: dict) -> str:
    """The summary (format 2) as a table, agent, direct and rag side by side, then where they disagree."""
    columns = [(mode, summary[mode]) for mode in MODES if summary.get(mode)]
    text = side_by_side(columns)
    if len(columns) >= 2:
        text += "\n" + format_disagreements(summary.get("disagreements", []), SHOWN_DISAGREEMENTS)
    return text


def _run_mode(
    mode: str, items, factory: Callable[[], Runner], concurrency: int, out: Path, stream, kept: list[dict]
) -> tuple[list[dict], dict]:
    """One mode over the suite's questions not in `kept` (an earlier run's, with --resume), each record
    written as it finishes (kept if the process dies), then all in suite order. Raises EvalInterrupted
    (its records written) on Ctrl-C."""
    name, ids = RESULT_FILES[mode], [item.id for item in items]
    done = {r["id"] for r in kept}
    todo = [item for item in items if item.id not in done]
    progress = Progress(len(items), mode, stream, kept=kept)
    resumed = {"resumed_with": len(kept)} if kept else {}
    try:
        with out_folder.Appender(out, kept, name) as partial:

            def on_result(record: dict) -> None:
                partial.append(record)
                progress.update(record)

            new, summary = evaluate(todo, factory, concurrency, on_result)
    except EvalInterrupted as stop:
        progress.close()
        stop.records = out_folder.in_suite_order(ids, [*kept, *stop.records])
        out_folder.write_records(out / name, stop.records)
        stop.summary = {
            **summarize(stop.records, stop.summary.get("wall_seconds")),
            "interrupted": True,
            "mode": mode,
            **resumed,
        }
        raise
    progress.close()
    records = out_folder.in_suite_order(ids, [*kept, *new])
    out_folder.write_records(out / name, records)  # suite order, whatever order they finished in
    return records, {**summarize(records, summary["wall_seconds"]), "mode": mode, **resumed}


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["compare"]:
        return compare.main(argv[1:], prog=f"{prog} compare")
    args = _parser(prog).parse_args(argv)
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
    search_name = cfg.agent.search_tool
    names = config.select_tools(cfg)[0]
    searchable = [search_name] if search_name else [n for n in SEARCH_TOOLS if n in names]
    try:
        modes, note = baseline_modes(args.baseline, args.agent, searchable)
    except BaselineError as e:
        return fail(str(e))
    concurrency = args.concurrency or default_concurrency(cfg.model.backend)
    out = Path(args.out or f"out/eval-{Path(args.suite).stem}-{time.strftime('%Y%m%d-%H%M%S')}")
    try:
        out.mkdir(parents=True, exist_ok=True)
        kept = out_folder.prepare(out, args.resume, args.overwrite, [RESULT_FILES[m] for m in modes])
    except OSError as e:
        return fail(f"cannot create the output folder {out}: {e.strerror or e}")
    except out_folder.ResultsError as e:
        return fail(str(e))
    summary: dict = {"format_version": FORMAT_VERSION, AGENT: None, DIRECT: None, RAG: None}
    tools: list = []
    records: dict[str, list[dict]] = {}
    code, tracing = 0, None
    try:
        try:
            tools = config.build_tools(cfg) if AGENT in modes or RAG in modes else []
            search = find_search_tool(tools, search_name) if RAG in modes else None
            if RAG in modes and search is None:
                raise config.ConfigError(
                    f"agent.search_tool: no tool named {search_name!r}; tools: "
                    f"{', '.join(t.name_for_model for t in tools) or 'none'}"
                )
            model = config.build_model(cfg)
            tracing = config.start_tracing(cfg)  # agent.otel: spans exported as OTEL_* say
        except config.ConfigError as e:
            return fail(str(e))
        except (OSError, ImportError, ValueError, RuntimeError) as e:
            return fail(f"cannot load the model: {type(e).__name__}: {' '.join(str(e).split())[:300]}", 1)
        try:
            probe = config.build_agent(cfg, model, tools=tools)  # the protocol as the run's agents resolve it
        except (config.ConfigError, ValueError, ImportError) as e:
            return fail(str(e))
        summary["run"] = provenance(
            cfg,
            probe,
            args.suite,
            f"{prog} {shlex.join(argv)}",
            args.baseline or DEFAULT_BASELINE,
            concurrency,
            list(modes),
            search.name_for_model if search is not None else None,
        )
        fresh = args.fresh_cache and concurrency == 1 and hasattr(model, "reset_cache")
        factories = {
            AGENT: fresh_each(lambda: config.build_agent(cfg, model, tools=tools), model, fresh),
            DIRECT: fresh_each(direct_factory(cfg, model), model, fresh),
        }
        if search is not None:
            factories[RAG] = fresh_each(rag_factory(cfg, model, search), model, fresh)
        summary["run"]["fresh_cache"] = fresh
        ids = {item.id for item in items}
        before = max(len(kept[RESULT_FILES[m]]) for m in modes)
        todo = max(len(items) - len(ids & {r["id"] for r in kept[RESULT_FILES[m]]}) for m in modes)
        say(
            f"evaluating {todo} questions from {args.suite} ({' and '.join(modes)}; backend "
            f"{cfg.model.backend}, concurrency {concurrency}) -> {out}"
            + (f" ({before} done before, kept)" if before else "")
        )
        if note:
            say(note)
        for mode in modes:
            try:
                records[mode], summary[mode] = _run_mode(
                    mode, items, factories[mode], concurrency, out, stream, kept[RESULT_FILES[mode]]
                )
            except EvalInterrupted as stop:
                records[mode], summary[mode], code = stop.records, stop.summary, 130
                break
    except KeyboardInterrupt:
        return 130
    finally:
        config.close_tools(tools)
        config.stop_tracing(tracing)  # the spans still queued, for a few seconds at most
    summary["interrupted"] = code == 130
    ran = [m for m in modes if summary[m]]
    if len(ran) >= 2:
        summary["disagreements"] = disagreements([(m, records[m]) for m in ran])
    out_folder.write_summary(out, summary)
    say(format_summary(summary))
    for mode in modes:
        if summary[mode]:
            say(f"{mode} results: {out / RESULT_FILES[mode]}")
    say(f"summary: {out / 'summary.json'}")
    if args.json:
        print(json.dumps(summary, ensure_ascii=False, indent=2))
    return code
