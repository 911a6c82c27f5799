"""The TinyAgent demo: a multi-turn chat about Jay Chou, in English and in Chinese.

    python run_demo.py                                            # embedded SmolLM2 on CPU, no download
    python run_demo.py --config configs/internlm2-chat-1_8b.yaml  # on a GPU, as in the original notebook
    python run_demo.py --model Qwen/Qwen2.5-1.5B-Instruct         # any chat model on the hub
    SERPER_API_KEY=... python run_demo.py                         # real Google search through Serper
    python run_demo.py --mcp "python -m mcp_server_time"          # plus the tools of an MCP server
    python run_demo.py --web [--share]                            # the same agent as a chat page (Colab: --share)

Each Thought / Action / Action Input streams as the model writes it, each Observation follows
when the tool returns, then the final answer and a line with steps, tokens and seconds. The
second question of each pair ("his first album") needs the first turn's history; `--web` serves
the chat page of `tinyagent web` instead, to ask your own questions. Without
SERPER_API_KEY the offline local_search tool stands in for Google, so the demo always completes.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

from tinyagent.cli import commands as cli
from tinyagent.cli import options, report
from tinyagent.config import build_agent, build_tools, close_tools
from tinyagent.models.embedded import NOTICE as EMBEDDED_NOTICE
from tinyagent.traces import TraceWriter

DEFAULT_CONFIG = Path(__file__).resolve().parent / "configs" / "default.yaml"
CONVERSATIONS = [
    ("English", ["Which year was Jay Chou born?", "What was his first album?"]),
    ("中文", ["周杰伦哪年出生？", "他的第一张专辑是什么？"]),
]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="The TinyAgent demo: two multi-turn conversations, English and Chinese."
    )
    options.add_model_options(parser)
    parser.add_argument("--no-stream", action="store_true", help="print each step when it ends")
    parser.add_argument("--trace", metavar="FILE", help="append one JSON line per step to FILE")
    parser.add_argument("--web", action="store_true", help="serve the chat page instead (needs tinyagent[web])")
    options.add_web_options(parser)
    args = parser.parse_args(argv)
    if args.config is None and not (args.model or args.base_url) and DEFAULT_CONFIG.is_file():
        args.config = str(DEFAULT_CONFIG)
    return args


def run(args: argparse.Namespace, model=None) -> int:
    """Both conversations, one agent; its history is cleared between them."""
    cfg = options.config_from_args(args)
    tools = build_tools(cfg)
    with contextlib.ExitStack() as stack:
        stack.callback(close_tools, tools)  # stops the MCP servers of --mcp / agent.mcp_servers
        trace = stack.enter_context(TraceWriter(args.trace)) if args.trace else None
        reporter = report.Reporter(stream=not args.no_stream, trace=trace)
        model = model if model is not None else cli.load_model(cfg)
        agent = build_agent(cfg, model, tools=tools, **reporter.callbacks())
        print(f"Model: {cli.model_label(cfg)}. Tools: {', '.join(agent.tools) or 'none'}.", flush=True)
        results = []
        for title, questions in CONVERSATIONS:
            agent.reset()
            print(f"\n=== Conversation: {title} ===\n", flush=True)
            for question in questions:
                results.append(report.answer(agent, reporter, question))
    steps = [s for r in results for s in r.steps]
    tokens = sum((r.prompt_tokens or 0) + (r.completion_tokens or 0) for r in results)
    formatted = sum(r.stop_reason == "final_answer" for r in results)
    print(
        f"=== Done: {len(results)} questions, {formatted} answered with a Final Answer line; {len(steps)} "
        f"steps ({sum(s.action is not None for s in steps)} tool calls), {tokens} tokens, "
        f"{sum(r.seconds for r in results):.1f} s ===",
        flush=True,
    )
    if cfg.model.backend == "embedded":
        print(f"({EMBEDDED_NOTICE})", flush=True)
    return 0


def main(argv: list[str] | None = None, model=None) -> int:
    """Run the demo; `model` replaces the configured one (tests pass a scripted model)."""
    args = parse_args(argv)
    cli.setup_logging(args.verbose)
    if args.web:
        return cli.guarded(lambda: cli.web_page(args, model), args.verbose)
    return cli.guarded(lambda: run(args, model), args.verbose)


if __name__ == "__main__":
    sys.exit(main())
