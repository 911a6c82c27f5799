"""What one ReAct episode costs the model: the original TinyAgent loop vs stop strings vs TinyAgent.

Replay (the headline figures): recorded episodes (bench/episodes/*.jsonl) run through the real
`Agent` on a `ReplayModel`, which forces each recorded reply token by token through the model's own
`generate` (bench/replay.py), so every step costs what generating it costs, whatever the
weights would have chosen. Strategies, alternating per episode on the same weights:
  original   no stop strings, full prompt every step: the invented continuation is decoded, then cut
  stop       stop strings, full prompt every step
  tinyagent  stop strings and KV-cache reuse (the backend's own)
on one runtime (--backend hf: transformers; llamacpp: llama.cpp on the GGUF file itself), or both
side by side in one run (--compare), episode by episode.
Live (--live): the same questions answered freely by the model, reporting what it really did.

  python bench/episode_cost.py --quick                     # embedded SmolLM2-135M on CPU, 2 episodes
  python bench/episode_cost.py --quick --compare           # the same on transformers and on llama.cpp
  python bench/episode_cost.py --json out.json             # all episodes
  python bench/episode_cost.py --live                      # free generation
  python bench/episode_cost.py --device cuda --random-internlm2-1_8b
  python bench/episode_cost.py --quick --concurrency 8     # also: 8 agents at once vs one after another
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this repository's tinyagent, installed or not

from concurrency import concurrency_report, print_concurrency  # next to this file
from recorded import EPISODES, PROTOCOL, Episode, EpisodeError, episode_tools, load_episodes
from replay import ReplayModel
from runtimes import (
    BACKENDS,
    MODES,
    backend_of,
    copy_bandwidth,
    device_of,
    load_model,
    strategy_models,
    threads_of,
    weight_bytes,
)

from tinyagent import Agent, ReAct
from tinyagent.format.prompts import STOP_WORDS
from tinyagent.models.model import BaseModel

QUICK_EPISODES = ("en-speed-of-light", "zh-shopping-total")


# --- replay ------------------------------------------------------------------------------


def replay_episode(episode: Episode, mode: str, model, max_new_tokens: int) -> dict:
    """Run the agent on the recorded episode under one strategy; the row of what it cost."""
    if mode == "tinyagent":
        model.reset_cache()  # each episode is a fresh run: no reuse of the previous episode's prompt
    replay = ReplayModel(model, episode.replies(), use_stop=mode != "original", max_new_tokens=max_new_tokens)
    agent = Agent(replay, episode_tools(episode), PROTOCOL, lang=episode.lang, max_turns=len(episode.steps))
    started = time.perf_counter()
    result = agent.run(episode.question)
    wall = time.perf_counter() - started - replay.counts.overhead_seconds
    errors = [f"step {s.index + 1}: {s.error}" for s in result.steps if s.error]
    if errors or result.answer != episode.answer or len(result.steps) != len(episode.steps):
        found = "; ".join(errors) or (
            f"answer {result.answer!r} after {len(result.steps)} steps (is a "
            f"reply longer than max_new_tokens={max_new_tokens}?)"
        )
        raise EpisodeError(f"episode {episode.id} ({mode}) did not replay as recorded: {found}")
    c = replay.counts
    return {
        "episode": episode.id,
        "lang": episode.lang,
        "mode": mode,
        "steps": len(result.steps),
        "forward_passes": c.forward_passes,
        "prefilled_tokens": c.prefilled,
        "reused_tokens": c.reused,
        "decoded_tokens": c.decoded,
        "decoded_discarded": c.discarded,
        "tokens_processed": c.tokens_processed,
        "lower_bound_tokens": replay.last_prompt_tokens + replay.last_reply_tokens,
        "wall_seconds": round(wall, 3),
        "decode_passes": c.decode_passes,
        "decode_seconds": round(c.decode_seconds, 3),
    }


def run_replay(models: dict, episodes: list[Episode], max_new_tokens: int) -> list[dict]:
    """Every episode under every strategy on every backend (`models`: backend -> its strategies' models),
    after a warm-up call each (first kernels, stop-string tables); alternating, so machine noise hits
    every strategy and backend alike."""
    for strategies in models.values():
        strategies["tinyagent"].generate([{"role": "user", "content": "Hi"}], stop=STOP_WORDS, max_new_tokens=4)
    rows = []
    for episode in episodes:
        for backend, strategies in models.items():
            for mode in MODES:
                rows.append({**replay_episode(episode, mode, strategies[mode], max_new_tokens), "backend": backend})
                print(f"  {episode.id:20} {backend:8} {mode:10} {rows[-1]['wall_seconds']:7.2f} s", file=sys.stderr)
    return rows


SUMMED = (
    "forward_passes",
    "prefilled_tokens",
    "reused_tokens",
    "decoded_tokens",
    "decoded_discarded",
    "tokens_processed",
    "lower_bound_tokens",
    "wall_seconds",
    "decode_passes",
    "decode_seconds",
)


def summarize(rows: list[dict]) -> dict:
    """Sums per mode, and medians of per-episode ratios."""
    modes = {
        m: {k: round(sum(r[k] for r in rows if r["mode"] == m), 3) for k in SUMMED}
        for m in MODES
        if any(r["mode"] == m for r in rows)
    }
    by = {(r["episode"], r["mode"]): r for r in rows}
    ids = list(dict.fromkeys(r["episode"] for r in rows))

    def median_ratio(a: str, b: str, key: str) -> float:
        return round(statistics.median(by[i, a][key] / by[i, b][key] for i in ids), 3)

    medians = {
        "wall_original_over_tinyagent": median_ratio("original", "tinyagent", "wall_seconds"),
        "wall_stop_over_tinyagent": median_ratio("stop", "tinyagent", "wall_seconds"),
        "tinyagent_processed_over_lower_bound": round(
            modes["tinyagent"]["tokens_processed"] / modes["tinyagent"]["lower_bound_tokens"], 3
        ),
    }
    return {"modes": modes, "medians": medians}


def print_replay(report: dict) -> None:
    """The per-episode table, the totals, the three targets and the decode speed."""
    head = (
        f"{'episode':20} {'mode':10} {'passes':>6} {'prefill':>7} {'reused':>6} {'decoded':>7} {'discard':>7} "
        f"{'processed':>9} {'bound':>6} {'x bound':>7} {'wall s':>7}"
    )
    print(head + "\n" + "-" * len(head))
    for r in report["episodes"] + [{"episode": "TOTAL", "mode": m, **s} for m, s in report["modes"].items()]:
        print(
            f"{r['episode']:20} {r['mode']:10} {r['forward_passes']:6} {r['prefilled_tokens']:7} {r['reused_tokens']:6} "
            f"{r['decoded_tokens']:7} {r['decoded_discarded']:7} {r['tokens_processed']:9} "
            f"{r['lower_bound_tokens']:6} {r['tokens_processed'] / r['lower_bound_tokens']:7.2f} "
            f"{r['wall_seconds']:7.2f}"
        )
    m, d = report["medians"], report["decode"]
    for label, value, target, met in (
        (
            "tinyagent tokens processed / lower bound",
            m["tinyagent_processed_over_lower_bound"],
            "<= 1.05",
            m["tinyagent_processed_over_lower_bound"] <= 1.05,
        ),
        (
            "median wall original / tinyagent",
            m["wall_original_over_tinyagent"],
            ">= 2",
            m["wall_original_over_tinyagent"] >= 2,
        ),
        ("median wall stop / tinyagent", m["wall_stop_over_tinyagent"], "> 1", m["wall_stop_over_tinyagent"] > 1),
    ):
        print(f"{label}: {value:.3f} (target {target}: {'met' if met else 'NOT met'})")
    print(
        f"tinyagent decode: {d['decode_tokens_per_s']} tokens/s; bandwidth bound {d['bound_tokens_per_s']} tokens/s "
        f"({d['weight_bytes_per_token'] / 1e9:.3f} GB of weights per token at {d['bandwidth_gb_s']} GB/s, "
        f"{d['bandwidth_source']})"
    )


# --- live ---------------------------------------------------------------------------------


class WithoutStop(BaseModel):
    """The original TinyAgent loop's model call: the agent's stop strings are dropped."""

    def __init__(self, model):
        self.model, self.control_tokens = model, model.control_tokens

    def generate(self, messages, stop=None, **kwargs):
        return self.model.generate(messages, stop=None, **kwargs)


def run_live(model, episodes: list[Episode], max_new_tokens: int, constrained: bool) -> list[dict]:
    """The episodes' questions answered freely: what the model really did under each strategy."""
    variants = {"tinyagent": ({}, "tinyagent"), "original": ({}, "original")}
    if constrained:
        variants["constrained"] = ({"protocol": ReAct(working_first=False, constrained=True)}, "tinyagent")
    models = strategy_models(model)
    rows = []
    for episode in episodes:
        for variant, (extra, mode) in variants.items():
            models[mode].reset_cache()
            llm = WithoutStop(models[mode]) if variant == "original" else models[mode]
            agent = Agent(
                llm,
                episode_tools(episode),
                **{"protocol": PROTOCOL, **extra},
                lang=episode.lang,
                max_new_tokens=max_new_tokens,
            )
            result = agent.run(episode.question)
            kinds = [s.kind for s in result.steps]
            rows.append(
                {
                    "episode": episode.id,
                    "variant": variant,
                    "steps": len(result.steps),
                    "kinds": kinds,
                    "tool_calls": sum(k in ("action", "tool_error") for k in kinds),
                    "format_errors": sum(k.format_error for k in kinds),
                    "stop_reason": result.stop_reason,
                    "answer": result.answer,
                    "prompt_tokens": result.prompt_tokens,
                    "completion_tokens": result.completion_tokens,
                    "seconds": round(result.seconds, 2),
                }
            )
            print(f"  live {episode.id:20} {variant:11} {result.seconds:7.2f} s", file=sys.stderr)
    return rows


def print_live(rows: list[dict]) -> None:
    head = (
        f"{'episode':20} {'variant':11} {'steps':>5} {'tools':>5} {'format errors':>13} {'stop reason':12} "
        f"{'prompt':>7} {'decoded':>7} {'seconds':>7}  answer"
    )
    print("\nLive\n" + head + "\n" + "-" * len(head))
    for r in rows:
        answer = " ".join(r["answer"].split())
        print(
            f"{r['episode']:20} {r['variant']:11} {r['steps']:5} {r['tool_calls']:5} {r['format_errors']:13} "
            f"{r['stop_reason']:12} {r['prompt_tokens'] or 0:7} {r['completion_tokens'] or 0:7} "
            f"{r['seconds']:7.2f}  {answer[:50]!r}"
        )


# --- model and device ----------------------------------------------------------------------


def decode_report(model, rows: list[dict], spec_gbs: float | None) -> dict:
    """The tinyagent mode's decode tokens/s next to the memory-bandwidth bound (weight bytes read per token)."""
    weights = weight_bytes(model)
    bandwidth = spec_gbs * 1e9 if spec_gbs else copy_bandwidth(device_of(model))
    tiny = [r for r in rows if r["mode"] == "tinyagent"]
    seconds = sum(r["decode_seconds"] for r in tiny)
    return {
        "device": device_of(model),
        "weight_bytes_per_token": weights,
        "bandwidth_gb_s": round(bandwidth / 1e9, 1),
        "bandwidth_source": "spec" if spec_gbs else "measured copy",
        "bound_tokens_per_s": round(bandwidth / weights, 1),
        "decode_tokens_per_s": round(sum(r["decode_passes"] for r in tiny) / seconds, 1) if seconds else None,
    }


def compare(rows: list[dict]) -> dict:
    """llama.cpp against transformers, per episode in the same run: medians of wall ratios per mode."""
    by = {(r["episode"], r["backend"], r["mode"]): r for r in rows}
    ids = list(dict.fromkeys(r["episode"] for r in rows))
    return {
        f"{mode}_hf_over_llamacpp": round(
            statistics.median(by[i, "hf", mode]["wall_seconds"] / by[i, "llamacpp", mode]["wall_seconds"] for i in ids),
            3,
        )
        for mode in MODES
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", nargs="+", type=Path, default=sorted(EPISODES.glob("*.jsonl")))
    parser.add_argument("--only", action="append", help="episode id to run (repeatable)")
    parser.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK_EPISODES)}")
    parser.add_argument(
        "--model", help="a Hugging Face chat model folder or hub id, or a .gguf file (default: embedded SmolLM2)"
    )
    parser.add_argument(
        "--backend",
        choices=("auto", *BACKENDS),
        default="auto",
        help="hf: transformers; llamacpp: llama.cpp on the GGUF file (auto: llama.cpp for a .gguf where installed)",
    )
    parser.add_argument("--compare", action="store_true", help="replay on both backends in one run, side by side")
    parser.add_argument("--gguf-file")
    shapes = parser.add_mutually_exclusive_group()
    shapes.add_argument(
        "--random-internlm2-1_8b",
        dest="random_internlm2",
        action="store_const",
        const="1_8b",
        help="a random checkpoint with internlm2-chat-1_8b's shapes, loaded by InternLM2Chat",
    )
    shapes.add_argument(
        "--random-internlm2-tiny",
        dest="random_internlm2",
        action="store_const",
        const="tiny",
        help="the same layout scaled down, for CPU checks",
    )
    parser.add_argument("--checkpoint-dir", help="keep the random checkpoint here (default: a temporary folder)")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--threads", type=int, help="CPU threads (torch's, and llama.cpp's)")
    parser.add_argument(
        "--weight-type",
        default="auto",
        help="llama.cpp: auto (converted where the file's type has "
        "no fast kernels), file (its own), q8_0, q4_0, f16, bf16",
    )
    parser.add_argument("--max-new-tokens", type=int, default=512)
    parser.add_argument("--live", action="store_true", help="also answer the questions freely")
    parser.add_argument("--constrained", action="store_true", help="live: add ReAct(constrained=True)")
    parser.add_argument("--no-replay", action="store_true", help="live only")
    parser.add_argument("--bandwidth-gbs", type=float, help="the device's memory bandwidth (default: measured copy)")
    parser.add_argument(
        "--concurrency",
        type=int,
        metavar="N",
        help="also replay the episodes as N agents at once vs one after another (bench/concurrency.py)",
    )
    parser.add_argument("--json", type=Path, help="write the figures to this file")
    args = parser.parse_args(argv)

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    episodes = load_episodes(args.episodes)
    chosen = set(args.only or (QUICK_EPISODES if args.quick else [e.id for e in episodes]))
    run = [e for e in episodes if e.id in chosen]
    if not run:
        raise SystemExit(f"no episode matches {sorted(chosen)}")
    started = time.perf_counter()
    backends = BACKENDS if args.compare else (backend_of(args),)
    with tempfile.TemporaryDirectory(prefix="episode-cost-") as workdir:
        loaded = {b: load_model(args, episodes, workdir, b) for b in backends}
        for model, description in loaded.values():
            print(
                f"{description} on {device_of(model)} ({threads_of(model)} CPU threads); "
                f"max_new_tokens {args.max_new_tokens}",
                file=sys.stderr,
            )
        report: dict = {
            "command": " ".join(["python", "bench/episode_cost.py", *(argv or sys.argv[1:])]),
            "max_new_tokens": args.max_new_tokens,
            "load_seconds": round(time.perf_counter() - started, 1),
            "backends": {
                b: {"model": d, "device": device_of(m), "cpu_threads": threads_of(m)} for b, (m, d) in loaded.items()
            },
        }
        if not args.no_replay:
            rows = run_replay({b: strategy_models(m) for b, (m, _) in loaded.items()}, run, args.max_new_tokens)
            report["episodes"] = rows
            for backend, (model, description) in loaded.items():
                part = report["backends"][backend]
                mine = [r for r in rows if r["backend"] == backend]
                part.update(summarize(mine), decode=decode_report(model, mine, args.bandwidth_gbs))
                print(f"\n{description}")
                print_replay({**part, "episodes": mine})
            if args.compare:
                report["compare"] = compare(rows)
                print(
                    "\nmedian wall transformers / llama.cpp: "
                    + ", ".join(f"{k.split('_')[0]} {v:.2f}x" for k, v in report["compare"].items())
                )
        for backend, (model, _) in loaded.items():
            part = report["backends"][backend]
            if args.concurrency:
                c = part["concurrency"] = concurrency_report(
                    model, episodes, episode_tools, args.concurrency, args.max_new_tokens
                )
                if part.get("decode") and c["mean_batch"]:  # a pass reads the weights once, whatever its batch
                    c["bound_decoded_per_s"] = round(part["decode"]["bound_tokens_per_s"] * c["mean_batch"], 1)
                print(f"\n{backend}:", end="")
                print_concurrency(c)
            if args.live:
                part["live"] = run_live(model, run, args.max_new_tokens, args.constrained)
                print_live(part["live"])
    report["total_seconds"] = round(time.perf_counter() - started, 1)
    print(f"\ntotal {report['total_seconds']} s", file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps(report, ensure_ascii=False, indent=1))


if __name__ == "__main__":
    main()
