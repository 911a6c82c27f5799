"""Decode speed of the embedded SmolLM2 on CPU in float32 and bfloat16: ms per token, wall and CPU time.

    OMP_NUM_THREADS=1 python bench/decode_dtype.py --repeats 3

Greedy, 64 new tokens (end tokens banned) after the same short prompt, the two dtypes interleaved so a
busy machine slows both alike. CPU time is the steadier figure on a shared machine.
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
    args = parser.parse_args()
    from tinyagent.engine.loading import load_hf
    from tinyagent.models import embedded
    from tinyagent.models.hf import HFChatModel

    path = embedded.embedded_gguf_path()
    models = {}
    for dtype in ("float32", "bfloat16"):
        model, tokenizer = load_hf(str(path.parent), device="cpu", dtype=dtype, gguf_file=path.name)
        models[dtype] = HFChatModel.from_model(model, tokenizer, reuse_cache=False)

    def ban_end(input_ids, scores, ends=models["float32"].end_token_ids):
        scores[:, ends] = -float("inf")
        return scores

    for repeat in range(args.repeats):
        for dtype, model in models.items():
            cpu = time.process_time()
            out = model.generate(MESSAGES, max_new_tokens=args.tokens, logits_processor=[ban_end])
            cpu = time.process_time() - cpu
            print(f"{dtype:9} run {repeat}: {1000 * out.seconds / out.completion_tokens:6.1f} ms/token wall, "
                  f"{1000 * cpu / out.completion_tokens:6.1f} ms/token CPU", flush=True)


if __name__ == "__main__":
    main()
