"""What `tinyagent serve` adds per request over a direct `Agent.run`, on the embedded model.

    python bench/serve_overhead.py --rounds 2 --questions 2    # the embedded model (about 20 minutes on 2 cores)
    python bench/serve_overhead.py --scripted --rounds 30     # an instant scripted model: the server's own cost
    python bench/serve_overhead.py --modes served --json out.json

One process, one model: the same questions are answered by a fresh Agent called directly (`direct`), by one
given no-op on_text / on_step callbacks as the server's agents are (`callbacks`: the model then streams), and
through the server's app (served by uvicorn on 127.0.0.1 in a thread) with the official `openai` client, plain
(`served`) and streamed (`streamed`). The modes run side by side,
question by question, their order turning each round, each run on a fresh KV cache (`reset_cache`), with
greedy decoding, so each mode does the same model work; the answers are checked to be the same. Printed: each
mode's median wall and CPU seconds per request (CPU: the whole process, all threads, the in-process client's
too; unlike wall time, not changed by other programs on the machine), and each mode's median ratios and
differences to the direct run of the same question in the same round. `--scripted` replaces the model by one
that answers at once (a calculator call, then the answer, each reply streamed in 4-character pieces): what is
left is the agent's and the server's own time.
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
MODES = ("direct", "callbacks", "served", "streamed")
SCRIPT = (
    'Thought: I should compute it with the calculator, step by step, to be sure of the result.\n'
    'Action: calculator\nAction Input: {"expression": "17 * 23"}',
    "Thought: The calculator gave the product, so I can answer now without another call.\nFinal Answer: 17 * 23 = 391",
)


def scripted_model():
    """A model that answers at once: a calculator call, then (after an observation) the answer, each streamed
    to on_text in 4-character pieces, as a local backend streams tokens."""
    from tinyagent.models.model import BaseModel

    class Instant(BaseModel):
        def generate(self, messages, stop=None, on_text=None, **kwargs):
            reply = SCRIPT[1] if "Observation" in str(messages[-1].get("content")) else SCRIPT[0]
            if on_text is not None:
                for i in range(0, len(reply), 4):
                    on_text(reply[i : i + 4])
            return reply

        def reset_cache(self) -> None:
            pass

    return Instant()


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
    parser.add_argument("--questions", type=int, default=len(QUESTIONS), help="the first N questions")
    parser.add_argument(
        "--modes", default=",".join(MODES), help=f"a comma-separated subset of {','.join(MODES)} (direct is always run)"
    )
    parser.add_argument("--scripted", action="store_true", help="an instant scripted model instead of the embedded one")
    parser.add_argument("--json", metavar="FILE", help="write the per-run seconds and the summary here")
    args = parser.parse_args()

    import openai

    from tinyagent import config as configuration
    from tinyagent.serve.openai_api import create_app

    # the defaults: the embedded model, as `tinyagent serve` runs it
    cfg = configuration.load_config(
        None,
        {"agent.tools": ["calculator"], "agent.constrained": False, "agent.working_first": False}
        if args.scripted
        else None,
    )
    tools = configuration.build_tools(cfg)
    model = scripted_model() if args.scripted else configuration.build_model(cfg)

    def factory(**callbacks):
        return configuration.build_agent(cfg, model, tools=tools, **callbacks)

    base_url, server = serve_in_thread(create_app(factory, "tinyagent"))
    api = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=600)

    def direct(question: str) -> str:
        return factory().run(question).answer

    def callbacks(question: str) -> str:
        return factory(on_text=lambda text: None, on_step=lambda step: None).run(question).answer

    def served(question: str) -> str:
        reply = api.chat.completions.create(model="tinyagent", messages=[{"role": "user", "content": question}])
        return reply.choices[0].message.content

    def streamed(question: str) -> str:
        stream = api.chat.completions.create(
            model="tinyagent", messages=[{"role": "user", "content": question}], stream=True
        )
        return "".join(c.choices[0].delta.content or "" for c in stream if c.choices)

    runs = {"direct": direct, "callbacks": callbacks, "served": served, "streamed": streamed}
    modes = ("direct", *(m for m in MODES[1:] if m in args.modes.split(",")))
    questions = QUESTIONS[: args.questions]
    seconds: dict[str, list[float]] = {m: [] for m in modes}
    cpu: dict[str, list[float]] = {m: [] for m in modes}
    answers: dict[tuple, str] = {}
    for mode in modes:  # warm-up: first calls pay one-time costs (imports, the first request's setup)
        model.reset_cache()
        runs[mode](QUESTIONS[0])
    for r in range(args.rounds):
        for q, question in enumerate(questions):
            order = modes if (r + q) % 2 == 0 else tuple(reversed(modes))
            for mode in order:
                model.reset_cache()
                started, used = time.perf_counter(), time.process_time()
                answers[(mode, r, q)] = runs[mode](question)
                seconds[mode].append(time.perf_counter() - started)
                cpu[mode].append(time.process_time() - used)
                if not args.scripted:
                    print(
                        f"round {r + 1} question {q + 1} {mode}: {seconds[mode][-1]:.2f} s, CPU {cpu[mode][-1]:.2f} s",
                        file=sys.stderr,
                        flush=True,
                    )
    server.should_exit = True
    configuration.close_tools(tools)

    from tinyagent.redaction import redact

    differing = sum(
        any(answers[(mode, r, q)] != redact(answers[("direct", r, q)]) for mode in modes)
        for r in range(args.rounds)
        for q in range(len(questions))
    )
    summary = {"runs_per_mode": len(seconds["direct"]), "answers_differing": differing, "modes": {}}
    for mode in modes:
        row = summary["modes"][mode] = {
            "wall_s": statistics.median(seconds[mode]),
            "cpu_s": statistics.median(cpu[mode]),
        }
        for name, values in (("wall", seconds), ("cpu", cpu)):
            pairs = list(zip(values[mode], values["direct"]))
            row[f"{name}_ratio"] = statistics.median(s / d for s, d in pairs)
            row[f"{name}_minus_direct_ms"] = statistics.median((s - d) * 1000 for s, d in pairs)
    model_name = "an instant scripted model" if args.scripted else "the embedded model"
    print(
        f"{len(questions)} questions x {args.rounds} rounds per mode, {model_name}, fresh cache per run; "
        "medians, and per pair with the direct run"
    )
    print(f"  {'mode':10s} {'wall s':>9s} {'/ direct':>9s} {'+ ms':>9s} {'CPU s':>9s} {'/ direct':>9s} {'+ ms':>9s}")
    for mode, row in summary["modes"].items():
        print(
            f"  {mode:10s} {row['wall_s']:9.4f} {row['wall_ratio']:9.3f} {row['wall_minus_direct_ms']:+9.1f} "
            f"{row['cpu_s']:9.4f} {row['cpu_ratio']:9.3f} {row['cpu_minus_direct_ms']:+9.1f}"
        )
    print(f"  answers differing from the direct run: {differing}")
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": summary, "wall": seconds, "cpu": cpu}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
