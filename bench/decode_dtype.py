"""Decode and prefill speed of the embedded SmolLM2 on CPU in float32 and bfloat16 (and on llama.cpp):
ms per decoded token (wall and CPU time), and prompt tokens per second.

    OMP_NUM_THREADS=1 python bench/decode_dtype.py --repeats 3 [--llamacpp]

Greedy, 64 new tokens (end tokens banned) after the same short prompt; then a prompt of `--prompt-tokens`
(1,000) tokens of the benchmark's kind with one token generated, its time all prefill. The dtypes
interleaved so a busy machine slows both alike. CPU time is the steadier figure on a shared machine.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

MESSAGES = [{"role": "user", "content": "Write a short story about a robot who learns to paint."}]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--prompt-tokens", type=int, default=1000)
    parser.add_argument("--llamacpp", action="store_true", help="also the same file on llama.cpp (one thread)")
    args = parser.parse_args()
    from tinyagent.engine.loading import load_hf
    from tinyagent.models import embedded
    from tinyagent.models.hf import HFChatModel

    path = embedded.embedded_gguf_path()
    models = {}
    for dtype in ("float32", "bfloat16"):
        model, tokenizer = load_hf(str(path.parent), device="cpu", dtype=dtype, gguf_file=path.name)
        models[dtype] = HFChatModel.from_model(model, tokenizer, reuse_cache=False)
    if args.llamacpp:
        from tinyagent.models.llamacpp import LlamaCppModel

        models["llama.cpp"] = LlamaCppModel(path, reuse_cache=False, threads=1)
    words = " ".join(f"observation {i} of the search page," for i in range(args.prompt_tokens))
    long_prompt = [{"role": "user", "content": words}]
    length = len(models["float32"].encode_prompt(models["float32"].render_prompt(long_prompt)))
    cut = args.prompt_tokens / length
    long_prompt = [{"role": "user", "content": words[: int(len(words) * cut)]}]

    def ban_end(input_ids, scores, ends=models["float32"].end_token_ids):
        scores[..., ends] = -float("inf")
        return scores

    for repeat in range(args.repeats):
        for dtype, model in models.items():
            cpu = time.process_time()
            out = model.generate(MESSAGES, max_new_tokens=args.tokens, logits_processor=[ban_end])
            cpu = time.process_time() - cpu
            prefill_cpu = time.process_time()
            long = model.generate(long_prompt, max_new_tokens=1)
            prefill_cpu = time.process_time() - prefill_cpu
            print(
                f"{dtype:9} run {repeat}: {1000 * out.seconds / out.completion_tokens:6.1f} ms/token wall, "
                f"{1000 * cpu / out.completion_tokens:6.1f} ms/token CPU; prefill {long.prompt_tokens} tokens at "
                f"{long.prompt_tokens / long.seconds:5.0f} tokens/s wall, {long.prompt_tokens / prefill_cpu:5.0f} "
                "tokens/CPU-s",
                flush=True,
            )


if __name__ == "__main__":
    main()
