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
    python bench/llama_raw.py --types file,q8_0 --threads 2 --model-too        # raw beside LlamaCppModel
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
TEXT = ("The speed of light in vacuum is 299,792,458 metres per second. A calculator adds 12 and 30 to get 42, "
        "and 周杰伦 was born in 1979 in Taipei. Thought: I should check the arithmetic step by step. ")


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


def tokens_of(lib, vocab, n: int) -> list[int]:
    data = (TEXT * (4 * n // len(TEXT) + 2)).encode()
    buffer = (lib.llama_token * len(data))()
    count = lib.llama_tokenize(vocab, data, len(data), buffer, len(data), False, True)
    return list(buffer[:count])[:n]


class Raw:
    """One model and one context, as a llama.cpp example makes them."""

    def __init__(self, lib, path: Path, threads: int, cells: int, sequences: int, batch: int = 512):
        self.lib = lib
        self.model = lib.llama_model_load_from_file(str(path).encode(), lib.llama_model_default_params())
        params = lib.llama_context_default_params()
        params.n_ctx, params.n_batch, params.n_ubatch, params.n_seq_max = cells, batch, batch, sequences
        params.n_threads = params.n_threads_batch = threads
        params.flash_attn_type = lib.LLAMA_FLASH_ATTN_TYPE_DISABLED  # as TinyAgent runs it
        params.kv_unified = True
        self.ctx = lib.llama_init_from_model(self.model, params)
        self.vocab = lib.llama_model_get_vocab(self.model)
        self.n_vocab = lib.llama_vocab_n_tokens(self.vocab)
        self.batch = lib.llama_batch_init(batch, 0, 1)
        self.memory = lib.llama_get_memory(self.ctx)

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

    def argmax(self, i: int) -> int:
        import numpy as np

        row = self.lib.llama_get_logits_ith(self.ctx, i)
        return int(np.argmax(np.ctypeslib.as_array(row, shape=(self.n_vocab,))))

    def close(self) -> None:
        self.lib.llama_batch_free(self.batch)
        self.lib.llama_free(self.ctx)
        self.lib.llama_model_free(self.model)


def measure(lib, path: Path, threads: int, prompt_tokens: int, steps: int, sequences: int, repeats: int) -> dict:
    """Prompt tokens/s (one batch), decode tokens/s (one sequence), and tokens/s of `sequences` stepped together
    (each after its own copy of the prompt); medians over `repeats`."""
    cells = sequences * (prompt_tokens + steps + 8)
    raw = Raw(lib, path, threads, cells, sequences)
    prompt = tokens_of(lib, raw.vocab, prompt_tokens)
    prefill, decode, parallel = [], [], []
    raw.decode([(t, i, 0, False) for i, t in enumerate(prompt[:8])])  # warm-up (first-touch of the weights)
    for _ in range(repeats):
        lib.llama_memory_clear(raw.memory, True)
        prefill.append(len(prompt) / raw.decode([(t, i, 0, i == len(prompt) - 1) for i, t in enumerate(prompt)]))
        token, seconds = raw.argmax(-1), 0.0
        for k in range(steps):
            seconds += raw.decode([(token, len(prompt) + k, 0, True)])
            token = raw.argmax(0)
        decode.append(steps / seconds)
        lib.llama_memory_seq_rm(raw.memory, 0, len(prompt) - 1, -1)
        for s in range(1, sequences):  # each sequence holds the prompt (cells shared, as kept conversations are)
            lib.llama_memory_seq_rm(raw.memory, s, -1, -1)
            lib.llama_memory_seq_cp(raw.memory, 0, s, 0, len(prompt) - 1)
        raw.decode([(prompt[-1], len(prompt) - 1, s, True) for s in range(sequences)])
        last = [raw.argmax(s) for s in range(sequences)]
        seconds = 0.0
        for k in range(steps):
            seconds += raw.decode([(last[s], len(prompt) + k, s, True) for s in range(sequences)])
            last = [raw.argmax(s) for s in range(sequences)]
        parallel.append(sequences * steps / seconds)
    size = lib.llama_model_size(raw.model)
    raw.close()
    return {"prompt_tok_s": round(statistics.median(prefill), 1), "decode_tok_s": round(statistics.median(decode), 1),
            "parallel_tok_s": round(statistics.median(parallel), 1), "weight_mb": round(size / 1e6, 1)}


def measure_model(path: Path, threads: int, prompt_tokens: int, steps: int, repeats: int) -> dict:
    """The same prompt and steps through LlamaCppModel.generate: prompt tokens/s of a call that decodes one
    token, and decode tokens/s of a call forced to `steps` tokens (its prompt time taken out)."""
    from tinyagent.models.llamacpp import LlamaCppModel
    from tinyagent.models.replay import ForceTokens

    model = LlamaCppModel(path, threads=threads, reuse_cache=False, weight_type="file")
    lib = model.runtime.lib
    prompt = tokens_of(lib, model.runtime.vocab, prompt_tokens)
    text = model.runtime.detokenize(prompt) if hasattr(model.runtime, "detokenize") else None
    messages = [{"role": "user", "content": text or TEXT}]
    prefill, decode = [], []
    model.generate(messages, max_new_tokens=1)  # warm-up
    for _ in range(repeats):
        one = model.generate(messages, max_new_tokens=1)
        prefill.append(one.prompt_tokens / one.seconds)
        run_on = ForceTokens([], model.end_token_ids, run_on=True)
        many = model.generate(messages, max_new_tokens=steps + 1, logits_processor=[run_on])
        decode.append((many.completion_tokens - 1) / max(many.seconds - one.seconds, 1e-9))
    return {"model_prompt_tok_s": round(statistics.median(prefill), 1),
            "model_decode_tok_s": round(statistics.median(decode), 1), "model_prompt_tokens": one.prompt_tokens}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, help="a .gguf file (default: the embedded SmolLM2-135M Q4_1)")
    parser.add_argument("--types", default="file", help="comma-separated: file (as it is), " + ", ".join(FTYPES))
    parser.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    parser.add_argument("--prompt-tokens", type=int, default=480)
    parser.add_argument("--steps", type=int, default=32, help="one-token steps per measurement")
    parser.add_argument("--sequences", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workdir", type=Path, help="keep converted files here (default: a temporary folder)")
    parser.add_argument("--model-too", action="store_true", help="also LlamaCppModel on the same file and settings")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if args.model is None:
        from tinyagent.models.embedded import embedded_gguf_path

        args.model = embedded_gguf_path()
    lib = library()
    rows = []
    with tempfile.TemporaryDirectory(prefix="llama-raw-") as scratch:
        workdir = args.workdir or Path(scratch)
        workdir.mkdir(parents=True, exist_ok=True)
        for kind in args.types.split(","):
            path, convert_s = args.model, None
            if kind != "file":
                path = workdir / f"{args.model.stem}.{kind}.gguf"
                if not path.is_file():
                    convert_s = round(quantize(lib, args.model, path, kind, os.cpu_count() or 1), 1)
            for threads in (int(t) for t in args.threads.split(",")):
                row = {"weights": kind, "threads": threads, "convert_s": convert_s,
                       "load_1m": round(os.getloadavg()[0], 2),
                       **measure(lib, path, threads, args.prompt_tokens, args.steps, args.sequences, args.repeats)}
                if args.model_too:
                    row.update(measure_model(path, threads, args.prompt_tokens, args.steps, args.repeats))
                    row["prompt_overhead"] = round(row["prompt_tok_s"] / row["model_prompt_tok_s"] - 1, 3)
                    row["decode_overhead"] = round(row["decode_tok_s"] / row["model_decode_tok_s"] - 1, 3)
                rows.append(row)
                print(json.dumps(row), file=sys.stderr)
    head = f"{'weights':8} {'threads':>7} {'MB':>7} {'prompt tok/s':>12} {'decode tok/s':>12} {args.sequences} seqs tok/s"
    print(f"{args.model.name}, {args.prompt_tokens}-token prompt, {args.steps} steps, median of {args.repeats}\n{head}")
    for r in rows:
        extra = (f"   LlamaCppModel {r['model_prompt_tok_s']} / {r['model_decode_tok_s']} (overhead "
                 f"{r['prompt_overhead']:+.1%} / {r['decode_overhead']:+.1%})" if "model_decode_tok_s" in r else "")
        print(f"{r['weights']:8} {r['threads']:7} {r['weight_mb']:7} {r['prompt_tok_s']:12} {r['decode_tok_s']:12} "
              f"{r['parallel_tok_s']:>12}{extra}")
    if args.json:
        args.json.write_text(json.dumps({"command": " ".join(["python", "bench/llama_raw.py", *(argv or sys.argv[1:])]),
                                         "model": str(args.model), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
