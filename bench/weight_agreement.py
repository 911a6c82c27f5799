"""Does converting a GGUF file's weights change what the model chooses? Next-token agreement of converted
weights against the file's own on the recorded episodes (bench/episodes).

The agent runs each recorded episode with its recorded replies (no model computes them), which gives every
step's prompt exactly as the agent writes it; then each weight type reads every step's prompt and recorded
reply (the kept part of the previous step is reused, as the backend reuses it), and at each reply position
its greedy choice (the argmax of llama.cpp's logits) is compared with the file's own weights' choice.
"agreement" is the share of positions where both choose the same token; "clear" counts only positions where
the file's own best token leads its second by more than one logit (a near tie may flip on rounding alone).

    python bench/weight_agreement.py                                   # embedded SmolLM2 Q4_1: q8_0, q4_0, f16
    python bench/weight_agreement.py --model $(../shared/tools/real-model) --types q8_0,q4_0
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this repository's tinyagent, installed or not

from recorded import EPISODES, episode_tools, load_episodes  # next to this file
from replay import reply_ids  # next to this file

from tinyagent import Agent
from tinyagent.engine.llama_runtime import LlamaRuntime
from tinyagent.engine.prefix_cache import common_prefix_length
from tinyagent.models.llamacpp import LlamaCppModel
from tinyagent.models.model import BaseModel, Reply


def transcripts(model: LlamaCppModel, episodes) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, recorded reply ids) of every step of every episode, as the agent sends them."""
    steps: list[tuple[list[int], list[int]]] = []

    class Recorded(BaseModel):
        def __init__(self, replies):
            self.replies, self.control_tokens = list(replies), model.control_tokens

        def generate(self, messages, stop=None, **ignored):
            text = self.replies.pop(0).text
            prompt = model.render_prompt(messages)
            ids = model.encode_prompt(prompt)
            steps.append((ids, reply_ids(model, prompt, ids, text)))
            return Reply(text)

    for episode in episodes:
        agent = Agent(
            Recorded(episode.replies()), episode_tools(episode), lang=episode.lang, max_turns=len(episode.steps)
        )
        result = agent.run(episode.question)
        if result.answer != episode.answer:
            raise SystemExit(f"episode {episode.id} did not replay as recorded: {result.answer!r}")
    return steps


def choices(runtime: LlamaRuntime, steps) -> list[tuple[int, float]]:
    """(greedy choice, its lead over the second best) at every reply position of every step."""
    import numpy as np

    held: list[int] = []
    out = []
    runtime.remove(0, 0)
    for prompt, reply in steps:
        ids = prompt + reply
        keep = min(common_prefix_length(held, ids), len(prompt) - 1)
        runtime.remove(0, keep)
        wanted = range(len(prompt) - 1, len(ids) - 1)  # the rows that choose each reply token
        for at in range(keep, len(ids), runtime.batch_size):
            chunk = ids[at : at + runtime.batch_size]
            rows = [(t, at + i, 0, at + i in wanted) for i, t in enumerate(chunk)]
            if runtime.decode(rows) != 0:
                raise SystemExit("llama_decode failed")
            for i, (_, _, _, want) in enumerate(rows):
                if want:
                    logits = runtime.logits(i)
                    first, second = np.sort(logits)[-2:][::-1]
                    out.append((int(np.argmax(logits)), float(first - second)))
        held = ids
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, help="a .gguf file (default: the embedded SmolLM2-135M Q4_1)")
    parser.add_argument("--types", default="q8_0,q4_0,f16", help="converted types to compare with the file's own")
    parser.add_argument("--episodes", nargs="+", type=Path, default=sorted(EPISODES.glob("*.jsonl")))
    parser.add_argument("--threads", type=int)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if args.model is None:
        from tinyagent.models.embedded import embedded_gguf_path

        args.model = embedded_gguf_path()
    started = time.perf_counter()
    model = LlamaCppModel(args.model, weight_type="file", threads=args.threads)
    steps = transcripts(model, load_episodes(args.episodes))
    window = max(len(p) + len(r) for p, r in steps) + 16
    own = choices(LlamaRuntime(args.model, window, threads=args.threads, weight_type="file"), steps)
    report = {
        "command": " ".join(["python", "bench/weight_agreement.py", *(argv or sys.argv[1:])]),
        "model": args.model.name,
        "steps": len(steps),
        "positions": len(own),
        "types": {},
    }
    print(f"{args.model.name}: {len(steps)} steps, {len(own)} reply positions", file=sys.stderr)
    for kind in args.types.split(","):
        theirs = choices(LlamaRuntime(args.model, window, threads=args.threads, weight_type=kind), steps)
        same = [a[0] == b[0] for a, b in zip(own, theirs)]
        clear = [s for s, (_, lead) in zip(same, own) if lead > 1.0]
        report["types"][kind] = {
            "agreement": round(sum(same) / len(same), 4),
            "differ": len(same) - sum(same),
            "clear_agreement": round(sum(clear) / len(clear), 4),
            "clear_positions": len(clear),
        }
        print(f"  {kind}: {report['types'][kind]}", file=sys.stderr)
    report["seconds"] = round(time.perf_counter() - started, 1)
    print(json.dumps(report, indent=1))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
