"""What `tinyagent serve` adds per request over a direct `Agent.run`, on the embedded model.

    python bench/serve_overhead.py                 # 3 rounds of 4 questions, plain and streamed
    python bench/serve_overhead.py --rounds 5 --json out.json

One process, one model: the same questions are answered by a fresh Agent called directly, and through the
server's app (served by uvicorn on 127.0.0.1 in a thread) with the official `openai` client, plain and
streamed. The modes run side by side, question by question, their order turning each round, each run on a
fresh KV cache (`reset_cache`), with greedy decoding, so each mode does the same model work; the answers
are checked to be the same. Printed: each mode's median seconds per request, and the server's median
ratio and median difference to the direct run of the same question in the same round.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

QUESTIONS = ["What is 17 * 23?", "Who wrote Hamlet?", "用计算器算 12 + 30 等于多少？", "What is the capital of France?"]
MODES = ("direct", "served", "streamed")


def serve_in_thread(app):
    """uvicorn serving `app` on a free port of 127.0.0.1 in a daemon thread; (base URL, server)."""
    import uvicorn

    from tinyagent.serve.command import listen

    sock = listen("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on"))
    threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True).start()
    while not server.started:
        time.sleep(0.01)
    return f"http://127.0.0.1:{sock.getsockname()[1]}/v1", server


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", metavar="FILE", help="write the per-run seconds and the summary here")
    args = parser.parse_args()

    import openai

    from tinyagent import config as configuration
    from tinyagent.serve.openai_api import create_app

    cfg = configuration.load_config(None)  # the defaults: the embedded model, as `tinyagent serve` runs it
    tools = configuration.build_tools(cfg)
    model = configuration.build_model(cfg)

    def factory(**callbacks):
        return configuration.build_agent(cfg, model, tools=tools, **callbacks)

    base_url, server = serve_in_thread(create_app(factory, "tinyagent"))
    api = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=600)

    def direct(question: str) -> str:
        return factory().run(question).answer

    def served(question: str) -> str:
        reply = api.chat.completions.create(model="tinyagent", messages=[{"role": "user", "content": question}])
        return reply.choices[0].message.content

    def streamed(question: str) -> str:
        stream = api.chat.completions.create(model="tinyagent", messages=[{"role": "user", "content": question}],
                                             stream=True)
        return "".join(c.choices[0].delta.content or "" for c in stream if c.choices)

    runs = {"direct": direct, "served": served, "streamed": streamed}
    seconds: dict[str, list[float]] = {m: [] for m in MODES}
    answers: dict[tuple, str] = {}
    for mode in MODES:  # warm-up: first calls pay one-time costs (imports, the first request's setup)
        model.reset_cache()
        runs[mode](QUESTIONS[0])
    for r in range(args.rounds):
        for q, question in enumerate(QUESTIONS):
            order = MODES if (r + q) % 2 == 0 else tuple(reversed(MODES))
            for mode in order:
                model.reset_cache()
                started = time.perf_counter()
                answers[(mode, r, q)] = runs[mode](question)
                seconds[mode].append(time.perf_counter() - started)
    server.should_exit = True
    configuration.close_tools(tools)

    from tinyagent.secrets import redact

    differing = sum(answers[("served", r, q)] != redact(answers[("direct", r, q)]) or
                    answers[("streamed", r, q)] != redact(answers[("direct", r, q)])
                    for r in range(args.rounds) for q in range(len(QUESTIONS)))
    summary = {"runs_per_mode": len(seconds["direct"]), "answers_differing": differing,
               "median_seconds": {m: statistics.median(v) for m, v in seconds.items()}}
    for mode in ("served", "streamed"):
        pairs = list(zip(seconds[mode], seconds["direct"]))
        summary[f"{mode}_over_direct_ratio"] = statistics.median(s / d for s, d in pairs)
        summary[f"{mode}_minus_direct_ms"] = statistics.median((s - d) * 1000 for s, d in pairs)
    print(f"{len(QUESTIONS)} questions x {args.rounds} rounds per mode, embedded model, fresh cache per run")
    for mode in MODES:
        print(f"  {mode:9s} median {summary['median_seconds'][mode]:.3f} s per request")
    for mode in ("served", "streamed"):
        print(f"  {mode:9s} / direct: median ratio {summary[f'{mode}_over_direct_ratio']:.3f}, "
              f"median difference {summary[f'{mode}_minus_direct_ms']:+.1f} ms")
    print(f"  answers differing from the direct run: {differing}")
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": summary, "seconds": seconds}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
