"""llama.cpp itself on a GGUF file, without TinyAgent: prompt tokens/s, one-token steps/s and N sequences
stepped together, per weight type and thread count; and, with --model-too, TinyAgent's LlamaCppModel on the
same file, threads and prompt, so the backend's per-token overhead is a number.

Raw means llama-cpp-python's low-level API only (the calls llama.cpp's own examples make): one context,
a prompt fed in one batch, then greedy one-token steps (argmax of the logits row in numpy, as TinyAgent
picks), then N sequences each holding its own copy of the prompt, stepped together, one token of each per
`llama_decode` (llama.cpp's `examples/parallel`). Weight types other than the file's own are converted
once with llama.cpp's `llama_model_quantize` (`allow_requantize`) into --workdir.

    python bench/llama_raw.py                                  # embedded SmolLM2, its Q4_1, 1 and 2 threads
    python bench/llama_raw.py --types file,q8_0,q4_0,f16,bf16 --threads 1,2 --json raw.json
    python bench/llama_raw.py --model $(../shared/tools/real-model) --types file,q8_0,q4_0
    python bench/llama_raw.py --types q8_0 --threads 1 --model-too --repeats 5  # raw beside LlamaCppModel
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this repository's tinyagent, installed or not

FTYPES = {"q8_0": 7, "q4_0": 2, "f16": 1, "bf16": 32, "iq4_nl": 25, "q4_1": 3, "q5_0": 8}
TEXT = (
    "The speed of light in vacuum is 299,792,458 metres per second. A calculator adds 12 and 30 to get 42, "
    "and 周杰伦 was born in 1979 in Taipei. Thought: I should check the arithmetic step by step. "
)


def library():
    import logging

    import llama_cpp

    logging.getLogger("llama-cpp-python").setLevel(logging.CRITICAL + 1)  # llama.cpp's log lines
    llama_cpp.llama_backend_init()
    return llama_cpp


def quantize(lib, source: Path, target: Path, ftype: str, threads: int) -> float:
    """Convert `source` to `ftype` with llama.cpp's own quantizer; seconds taken."""
    params = lib.llama_model_quantize_default_params()
    params.nthread, params.ftype, params.allow_requantize = threads, FTYPES[ftype], True
    started = time.perf_counter()
    code = lib.llama_model_quantize(str(source).encode(), str(target).encode(), ctypes.byref(params))
    if code != 0:
        raise SystemExit(f"llama_model_quantize {source.name} -> {ftype} failed ({code})")
    return time.perf_counter() - started


def tokens_of(lib, vocab, n: int, offset: int = 0) -> list[int]:
    """`n` tokens of TEXT repeated, starting `offset` sentences in (so sequences hold different texts)."""
    sentences = TEXT.split(". ")
    text = ". ".join(sentences[offset % len(sentences) :] + sentences[: offset % len(sentences)]) + f" {offset}. "
    data = (text * (4 * n // len(text) + 2)).encode()
    buffer = (lib.llama_token * len(data))()
    count = lib.llama_tokenize(vocab, data, len(data), buffer, len(data), False, True)
    return list(buffer[:count])[:n]


class Raw:
    """One model and one context, as a llama.cpp example makes them: `sequences` sequences of up to `window`
    cells each, in one unified cache (or one stream each), flash attention on or off."""

    def __init__(self, lib, path: Path, window: int, sequences: int, flash: bool, unified: bool, batch: int = 512):
        self.lib, self.sequences, self.window = lib, sequences, window
        self.model = lib.llama_model_load_from_file(str(path).encode(), lib.llama_model_default_params())
        params = lib.llama_context_default_params()
        params.n_ctx, params.n_batch, params.n_ubatch = sequences * window, batch, batch
        params.n_seq_max = sequences
        params.flash_attn_type = lib.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash else lib.LLAMA_FLASH_ATTN_TYPE_DISABLED
        params.kv_unified = unified
        self.ctx = lib.llama_init_from_model(self.model, params)
        self.vocab = lib.llama_model_get_vocab(self.model)
        self.n_vocab = lib.llama_vocab_n_tokens(self.vocab)
        self.batch_size = batch
        self.batch = lib.llama_batch_init(batch, 0, 1)
        self.memory = lib.llama_get_memory(self.ctx)

    def threads(self, n: int) -> None:
        self.lib.llama_set_n_threads(self.ctx, n, n)

    def decode(self, rows: list[tuple[int, int, int, bool]]) -> float:
        """rows of (token, position, sequence, logits wanted); seconds of llama_decode."""
        b = self.batch
        b.n_tokens = len(rows)
        for i, (token, pos, seq, out) in enumerate(rows):
            b.token[i], b.pos[i], b.n_seq_id[i], b.seq_id[i][0], b.logits[i] = token, pos, 1, seq, out
        started = time.perf_counter()
        code = self.lib.llama_decode(self.ctx, b)
        if code:
            raise SystemExit(f"llama_decode failed ({code})")
        return time.perf_counter() - started

    def feed(self, tokens: list[int], seq: int, start: int = 0) -> float:
        seconds = 0.0
        for at in range(0, len(tokens), self.batch_size):
            chunk = tokens[at : at + self.batch_size]
            seconds += self.decode([(t, start + at + i, seq, at + i == len(tokens) - 1) for i, t in enumerate(chunk)])
        return seconds

    def argmax(self, i: int) -> int:
        import numpy as np

        row = self.lib.llama_get_logits_ith(self.ctx, i)
        return int(np.argmax(np.ctypeslib.as_array(row, shape=(self.n_vocab,))))

    def close(self) -> None:
        self.lib.llama_batch_free(self.batch)
        self.lib.llama_free(self.ctx)
        self.lib.llama_model_free(self.model)


class Measured:
    """One file under one cache layout: its contexts are read once (sequence 1.. each holds its own text of
    `context` tokens, sequence 0 is the prompt's), then each round measures the prompt, one sequence's steps,
    and all sequences' steps together, for one thread count."""

    def __init__(
        self, lib, path: Path, prompt_tokens: int, context: int, steps: int, sequences: int, flash: bool, unified: bool
    ):
        self.raw = Raw(lib, path, max(prompt_tokens, context) + steps + 16, sequences + 1, flash, unified)
        self.prompt = tokens_of(lib, self.raw.vocab, prompt_tokens)
        self.contexts = [tokens_of(lib, self.raw.vocab, context, offset=s) for s in range(sequences)]
        self.steps, self.sequences = steps, sequences
        for s, tokens in enumerate(self.contexts, 1):
            self.raw.feed(tokens, s)

    def round(self, threads: int) -> tuple[float, float, float]:
        """(prompt tokens/s, decode tokens/s, tokens/s of all sequences stepped together)."""
        raw, lib = self.raw, self.raw.lib
        raw.threads(threads)
        lib.llama_memory_seq_rm(raw.memory, 0, -1, -1)
        prompt_rate = len(self.prompt) / raw.feed(self.prompt, 0)
        token, started = raw.argmax(-1), time.perf_counter()
        for k in range(self.steps):  # a step is a pass and the choice from its logits row, as any caller's
            raw.decode([(token, len(self.prompt) + k, 0, True)])
            token = raw.argmax(0)
        decode_rate = self.steps / (time.perf_counter() - started)
        lib.llama_memory_seq_rm(raw.memory, 0, -1, -1)
        last, seconds = [c[-1] for c in self.contexts], 0.0
        for k in range(self.steps):
            seconds += raw.decode([(last[s], len(c) + k, s + 1, True) for s, c in enumerate(self.contexts)])
            last = [raw.argmax(s) for s in range(self.sequences)]
        for s, c in enumerate(self.contexts, 1):  # back to the contexts alone for the next round
            lib.llama_memory_seq_rm(raw.memory, s, len(c), -1)
        return prompt_rate, decode_rate, self.sequences * self.steps / seconds


def measure(lib, configs: list[tuple[str, Path, bool, bool]], threads: list[int], args) -> list[dict]:
    """Every (weights, file, flash, unified) configuration at every thread count, round by round in turn (so
    the machine's load hits all alike); medians over the rounds."""
    made = {
        key: Measured(lib, path, args.prompt_tokens, args.context, args.steps, args.sequences, flash, unified)
        for key, path, flash, unified in configs
    }
    rates: dict = {(key, t): [] for key in made for t in threads}
    for _ in range(args.repeats):
        for key, m in made.items():
            for t in threads:
                rates[key, t].append(m.round(t))
                print(f"  {key} {t} threads: {rates[key, t][-1]}", file=sys.stderr)
    rows = []
    for (key, t), values in rates.items():
        raw = made[key].raw
        rows.append(
            {
                "weights": key[0],
                "flash_attn": key[1],
                "unified_kv": key[2],
                "threads": t,
                "prompt_tok_s": round(statistics.median(v[0] for v in values), 1),
                "decode_tok_s": round(statistics.median(v[1] for v in values), 1),
                "parallel_tok_s": round(statistics.median(v[2] for v in values), 1),
                "weight_mb": round(lib.llama_model_size(raw.model) / 1e6, 1),
            }
        )
    for m in made.values():
        m.raw.close()
    return rows


def overhead(lib, path: Path, threads: int, args) -> dict:
    """Raw llama.cpp and LlamaCppModel on the same file, threads and prompt (the model's chat prompt, fed raw as
    token ids), round by round in turn: prompt tokens/s and decode tokens/s of each, and the model's overhead.
    Both count a step as the pass and the choice of the next token."""
    from replay import ForceTokens  # next to this file

    from tinyagent.engine.llama_runtime import FLASH_ATTENTION
    from tinyagent.models.llamacpp import LlamaCppModel

    model = LlamaCppModel(path, threads=threads, reuse_cache=False, weight_type="file", max_batch=1)
    words = (TEXT * (args.prompt_tokens // 8)).split(" ")
    low, high = 1, len(words)  # the most words whose chat prompt fits prompt_tokens
    while low < high:
        middle = (low + high + 1) // 2
        fits = model.count_tokens([{"role": "user", "content": " ".join(words[:middle])}]) <= args.prompt_tokens
        low, high = (middle, high) if fits else (low, middle - 1)
    messages = [{"role": "user", "content": " ".join(words[:low])}]
    measured = Measured(lib, path, args.prompt_tokens, 8, args.steps, 1, FLASH_ATTENTION, False)  # as TinyAgent runs it
    measured.prompt = model.encode_prompt(model.render_prompt(messages))
    measured.raw.threads(threads)

    class Clock:
        """A logits processor noting when each token's logits reach TinyAgent's chooser."""

        def __init__(self):
            self.times: list[float] = []

        def __call__(self, ids, scores):
            self.times.append(time.perf_counter())
            return scores

    model.generate(messages, max_new_tokens=1)  # warm-up
    raw, mine = [], []
    for _ in range(args.repeats):
        prompt_rate, decode_rate, _ = measured.round(threads)
        raw.append((prompt_rate, decode_rate))
        clock, started = Clock(), time.perf_counter()
        done = model.generate(
            messages,
            max_new_tokens=args.steps + 1,
            logits_processor=[clock, ForceTokens([], model.end_token_ids, run_on=True)],
        )
        # the prompt: from the call to its first logits (rendering and tokenizing included); a step: from one
        # token's logits to the next's (the pass, the chooser, the stop check, the batcher's bookkeeping)
        mine.append(
            (
                done.prompt_tokens / (clock.times[0] - started),
                (len(clock.times) - 1) / (clock.times[-1] - clock.times[0]),
            )
        )
        print(f"  raw {raw[-1]}  LlamaCppModel {mine[-1]}", file=sys.stderr)
    measured.raw.close()
    row = {
        "prompt_tokens": len(measured.prompt),
        "raw_prompt_tok_s": round(statistics.median(r[0] for r in raw), 1),
        "raw_decode_tok_s": round(statistics.median(r[1] for r in raw), 1),
        "model_prompt_tok_s": round(statistics.median(m[0] for m in mine), 1),
        "model_decode_tok_s": round(statistics.median(m[1] for m in mine), 1),
        # per round, raw rate / model rate - 1: the model's extra time per token (rounds share the load)
        "prompt_overhead": round(statistics.median(r[0] / m[0] - 1 for r, m in zip(raw, mine)), 3),
        "decode_overhead": round(statistics.median(r[1] / m[1] - 1 for r, m in zip(raw, mine)), 3),
    }
    return row


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, help="a .gguf file (default: the embedded SmolLM2-135M Q4_1)")
    parser.add_argument("--types", default="file", help="comma-separated: file (as it is), " + ", ".join(FTYPES))
    parser.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    parser.add_argument("--prompt-tokens", type=int, default=480)
    parser.add_argument("--steps", type=int, default=32, help="one-token steps per measurement")
    parser.add_argument("--sequences", type=int, default=8)
    parser.add_argument("--context", type=int, default=480, help="tokens each of the sequences holds before stepping")
    parser.add_argument("--flash", default="0", help="flash attention: 0, 1 or 0,1 (TinyAgent runs 0)")
    parser.add_argument(
        "--unified", default="0", help="one KV cache for all sequences: 1, 0 (a stream each, as TinyAgent runs it), 1,0"
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workdir", type=Path, help="keep converted files here (default: a temporary folder)")
    parser.add_argument("--model-too", action="store_true", help="also LlamaCppModel on the same file and settings")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if args.model is None:
        from tinyagent.models.embedded import embedded_gguf_path

        args.model = embedded_gguf_path()
    lib = library()
    threads = [int(t) for t in args.threads.split(",")]
    with tempfile.TemporaryDirectory(prefix="llama-raw-") as scratch:
        workdir = args.workdir or Path(scratch)
        workdir.mkdir(parents=True, exist_ok=True)
        configs = []
        for kind in args.types.split(","):
            path = args.model
            if kind != "file":
                path = workdir / f"{args.model.stem}.{kind}.gguf"
                if not path.is_file():
                    print(
                        f"converting to {kind}: {quantize(lib, args.model, path, kind, os.cpu_count() or 1):.1f} s",
                        file=sys.stderr,
                    )
            for flash in (int(f) for f in args.flash.split(",")):
                for unified in (int(u) for u in args.unified.split(",")):
                    configs.append(((kind, bool(flash), bool(unified)), path, bool(flash), bool(unified)))
        load = os.getloadavg()[0]
        if args.model_too:
            rows = [
                {"weights": key[0], "threads": t, **overhead(lib, path, t, args)}
                for key, path, _, _ in configs
                for t in threads
            ]
            for r in rows:
                r["load_1m"] = [round(load, 2), round(os.getloadavg()[0], 2)]
                print(json.dumps(r))
            if args.json:
                args.json.write_text(
                    json.dumps(
                        {"command": " ".join(["python", "bench/llama_raw.py", *(argv or sys.argv[1:])]), "rows": rows}
                    )
                )
            return
        rows = measure(lib, configs, threads, args)
        for row in rows:
            row["load_1m"] = [round(load, 2), round(os.getloadavg()[0], 2)]
    head = (
        f"{'weights':8} {'flash':>5} {'unified':>7} {'threads':>7} {'MB':>7} {'prompt tok/s':>12} "
        f"{'decode tok/s':>12} {args.sequences} seqs tok/s"
    )
    print(
        f"{args.model.name}: a {args.prompt_tokens}-token prompt, {args.steps} steps; {args.sequences} sequences of "
        f"{args.context} tokens each stepped together; median of {args.repeats} rounds\n{head}"
    )
    for r in rows:
        print(
            f"{r['weights']:8} {r['flash_attn']:5d} {r['unified_kv']:7d} {r['threads']:7} {r['weight_mb']:7} "
            f"{r['prompt_tok_s']:12} {r['decode_tok_s']:12} {r['parallel_tok_s']:>12}"
        )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "command": " ".join(["python", "bench/llama_raw.py", *(argv or sys.argv[1:])]),
                    "model": str(args.model),
                    "rows": rows,
                },
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
