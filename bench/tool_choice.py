"""Does a small model pick the right search tool when google_search and a local corpus are both offered?

Questions of two kinds, in English and Chinese: six that the walkthrough folder (examples/docs) answers, six that
need the web. google_search goes to a Serper-format server on 127.0.0.1 (it answers every query with one made-up
result), local_search searches examples/docs. The agent is built from the config as `tinyagent ask` builds it;
the figure is the first search tool each run called, with the tools' descriptions as shipped (`new`) and as
they were before folder corpora (`old`: google "A search engine ...", local "short encyclopedia articles").

    python bench/tool_choice.py --model $(/work/shared/tools/real-model)          # Qwen2.5-Coder-0.5B, llama.cpp
    python bench/tool_choice.py --model $(/work/shared/tools/real-model-1.5b) --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tinyagent import config
from tinyagent.tools.google_search import GoogleSearch
from tinyagent.tools.local_search import SHIPPED_DESCRIPTION

ROOT = Path(__file__).resolve().parent.parent
QUESTIONS = [  # (kind, question): "docs" is answered by examples/docs, "web" needs the web
    ("docs", "What does error E2 on my Aurora K2 kettle mean?"),
    ("docs", "How long is the warranty of the Aurora K2 kettle?"),
    ("docs", "How do I pair the Aurora kettle with my phone?"),
    ("docs", "When can I reach Aurora support by phone?"),
    ("docs", "Aurora K2 水壶的保修期多长？"),
    ("docs", "Aurora 水壶多久需要除一次水垢？"),
    ("web", "Who won the 2022 FIFA World Cup?"),
    ("web", "What is the current population of Canada?"),
    ("web", "Who is the CEO of Microsoft?"),
    ("web", "When did the James Webb Space Telescope launch?"),
    ("web", "2022年世界杯的冠军是哪个国家？"),
    ("web", "现任联合国秘书长是谁？"),
]
OLD = {
    "google_search": {
        "en": "A search engine. Use it to look up facts about people, places, events and anything "
        "current. Returns the top results with their snippets.",
        "zh": "一个搜索引擎。用于查询人物、地点、事件及最新信息等事实，返回最相关结果的摘要。",
    },
    "local_search": SHIPPED_DESCRIPTION,
}
CROSS = {
    "en": " Questions about your own documents ({}) go to local_search, not here.",
    "zh": "关于你自己的文档（{}）的问题请用 local_search，不要用它。",
}
KEY = "bench-serper-key-0000"


def serper_stub() -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            query = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0)))).get("q", "")
            body = json.dumps(
                {
                    "organic": [
                        {
                            "title": f"Result for {query}",
                            "link": "https://example.com/r",
                            "snippet": "No useful snippet: this server only stands in for Serper.",
                        }
                    ]
                }
            )
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def first_search(result) -> str | None:
    return next((s.action for s in result.steps if s.action in ("google_search", "local_search")), None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="a .gguf file (llama.cpp)")
    parser.add_argument("--descriptions", default="new,old")
    parser.add_argument("--max-turns", type=int, default=2)
    parser.add_argument(
        "--working-first",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="the model first works the question out alone (off: the tool choice itself is asked)",
    )
    parser.add_argument("--max-new-tokens", type=int, default=160)
    parser.add_argument(
        "--constrained",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="decode only valid ReAct steps (outlines); default: as the config says",
    )
    parser.add_argument("--only", type=int, help="the first N questions of each kind")
    parser.add_argument("--local-first", action="store_true", help="offer local_search before google_search")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--verbose", action="store_true", help="print each run's replies")
    args = parser.parse_args()
    server = serper_stub()
    os.environ.update({"SERPER_API_KEY": KEY, "SERPER_ENDPOINT": f"http://127.0.0.1:{server.server_port}/search"})
    cfg = config.load_config(
        None,
        {
            "model.backend": "llamacpp",
            "model.path": args.model,
            "agent.corpus": str(ROOT / "examples" / "docs"),
            "agent.max_turns": args.max_turns,
            "agent.working_first": args.working_first,
            "agent.constrained": args.constrained,
            "generation.max_new_tokens": args.max_new_tokens,
        },
    )
    questions = [
        q
        for q in QUESTIONS
        if args.only is None or [k for k, _ in QUESTIONS].index(q[0]) + args.only > QUESTIONS.index(q)
    ]
    model = config.build_model(cfg)
    rows = []
    for variant in args.descriptions.split(","):
        tools = config.build_tools(cfg)
        assert isinstance(tools[0], GoogleSearch) and [t.name_for_model for t in tools][-1] == "local_search"
        if args.local_first:
            tools.sort(key=lambda t: t.name_for_model != "local_search")
        if variant == "cross":  # google_search's description also names what goes to local_search
            local = next(t for t in tools if t.name_for_model == "local_search")
            for t in tools:
                if t.name_for_model == "google_search":
                    t.description_for_model = {
                        lang: t.description(lang) + CROSS[lang].format(local.index.summary(lang))
                        for lang in ("en", "zh")
                    }
        if variant == "old":
            for t in tools:
                if t.name_for_model in OLD:
                    t.description_for_model = OLD[t.name_for_model]
        right = {"docs": 0, "web": 0}
        for kind, question in questions:
            started = time.perf_counter()
            agents = []  # the run stops at its first search call: that call is the figure

            def stop_at_search(step, agents=agents):
                if step.action in ("google_search", "local_search"):
                    agents[0].stop()

            agents.append(config.build_agent(cfg, model, tools=tools, on_step=stop_at_search))
            result = agents[0].run(question)
            picked = first_search(result)
            ok = picked == ("local_search" if kind == "docs" else "google_search")
            right[kind] += ok
            rows.append(
                {
                    "model": Path(args.model).name,
                    "descriptions": variant,
                    "local_first": args.local_first,
                    "kind": kind,
                    "question": question,
                    "picked": picked,
                    "right": ok,
                    "seconds": round(time.perf_counter() - started, 1),
                }
            )
            print(f"{variant:4} {kind:5} {'ok ' if ok else 'NO '} {picked!s:14} {question}", flush=True)
            if args.verbose:
                print("\n".join(f"    {s.text.strip()[:300]!r}" for s in result.steps), flush=True)
        asked = {k: sum(1 for kind, _ in questions if kind == k) for k in right}
        print(
            f"== {Path(args.model).name}, {variant} descriptions{', local_search first' if args.local_first else ''}: docs questions {right['docs']}/{asked['docs']} to "
            f"local_search, web questions {right['web']}/{asked['web']} to google_search",
            flush=True,
        )
    server.shutdown()
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
