"""The two local runtimes as the benchmarks see them: loading a model on one, the three strategies' models
on the same weights, the bytes a decode step reads, and the counters each runtime keeps (transformers:
the batcher's; llama.cpp: its runtime's, beside llama.cpp's own `llama_perf_context`). A leaf of bench/
besides recorded.py and make_random_internlm2.py."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from make_random_internlm2 import write_checkpoint
from recorded import Episode, tokenizer_texts

from tinyagent.models.embedded import runtime_for
from tinyagent.models.llamacpp import LlamaCppModel

BACKENDS = ("hf", "llamacpp")
MODES = ("original", "stop", "tinyagent")


def backend_of(args) -> str:
    """The runtime the command line asks for: --backend, else the embedded model's default (llama.cpp where
    installed), else transformers for anything that is not a .gguf file."""
    if args.backend != "auto":
        return args.backend
    if args.random_internlm2 or (args.model and not str(args.model).endswith(".gguf")):
        return "hf"
    return runtime_for("auto", "cpu" if args.device == "auto" else args.device, args.dtype)


def load_model(args, episodes: list[Episode], workdir: str, backend: str):
    """(model, description) on `backend`; with --concurrency N on transformers, N requests decode together."""
    from tinyagent.models.hf import MAX_BATCH

    if backend == "llamacpp":
        path = args.model or _embedded_path()
        threads = {"threads": args.threads} if args.threads else {}
        batch = {"max_batch": args.concurrency} if args.concurrency else {}
        model = LlamaCppModel(path, weight_type=args.weight_type, **threads, **batch)
        r = model.runtime
        return model, f"{Path(path).name} on llama.cpp ({(r.weight_type or r.file_type or '?').upper()} weights)"
    batch = {"max_batch": max(MAX_BATCH, args.concurrency or 0)}
    if args.random_internlm2:
        from tinyagent.models.internlm2 import InternLM2Chat

        folder = Path(args.checkpoint_dir or workdir) / f"internlm2-{args.random_internlm2}"
        if not (folder / "config.json").is_file():
            print(f"writing a random InternLM2 checkpoint ({args.random_internlm2}) to {folder}", file=sys.stderr)
            write_checkpoint(folder, args.random_internlm2, tokenizer_texts(episodes))
        return InternLM2Chat(
            str(folder), device=args.device, dtype=args.dtype, **batch
        ), f"random InternLM2 {args.random_internlm2}"
    if args.model:
        from tinyagent.models.hf import HFChatModel

        folder, gguf = (
            (os.path.dirname(args.model), os.path.basename(args.model))
            if str(args.model).endswith(".gguf")
            else (args.model, args.gguf_file)
        )
        return HFChatModel(
            folder, device=args.device, dtype=args.dtype, gguf_file=gguf, **batch
        ), f"{args.model} on transformers"
    from tinyagent.models import default_model

    return (
        default_model(device=args.device, dtype=args.dtype, runtime="hf", **batch),
        "SmolLM2-135M-Instruct Q4_1 (embedded) on transformers",
    )


def _embedded_path() -> str:
    from tinyagent.models.embedded import embedded_gguf_path

    return str(embedded_gguf_path())


def strategy_models(model) -> dict:
    """One model per strategy on the same weights: only cache reuse differs (stop strings are the replay's)."""
    if isinstance(model, LlamaCppModel):  # the file is mapped once; each model has its own context
        r = model.runtime
        return {
            mode: model
            if mode == "tinyagent"
            else LlamaCppModel(
                r.path,
                context_window=r.context_window,
                threads=r.threads,
                reuse_cache=False,
                weight_type=r.weight_type or "file",
            )
            for mode in MODES
        }
    make = type(model).from_model
    return {mode: make(model.model, model.tokenizer, reuse_cache=mode == "tinyagent") for mode in MODES}


def device_of(model) -> str:
    return "cpu (llama.cpp)" if isinstance(model, LlamaCppModel) else str(model.model.device)


def threads_of(model) -> int:
    if isinstance(model, LlamaCppModel):
        return model.runtime.threads
    import torch

    return torch.get_num_threads()


def weight_bytes(model) -> int:
    """Bytes of weights one decode step reads: the file's tensors as stored (Q4 blocks are a quarter of bf16),
    or the torch parameters less the embedding table (one row of it is read) unless it is the output too."""
    if isinstance(model, LlamaCppModel):
        return model.runtime.weight_bytes()
    config = model.model.config
    return sum(
        p.numel() * p.element_size()
        for name, p in model.model.named_parameters()
        if "embed_tokens" not in name or config.tie_word_embeddings
    )


def copy_bandwidth(device: str = "cpu") -> float:
    """Bytes per second the device moves in a large copy (read + write), a practical bandwidth ceiling."""
    import torch

    device = torch.device("cpu" if "llama" in device else device)
    n = (256 if device.type == "cuda" else 64) * 2**20
    src, dst = torch.empty(n, dtype=torch.uint8, device=device), torch.empty(n, dtype=torch.uint8, device=device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for warm in (True, False):
        sync()
        started = time.perf_counter()
        for _ in range(1 if warm else 10):
            dst.copy_(src)
        sync()
    return 2 * n * 10 / (time.perf_counter() - started)


def fed_tokens(model) -> int:
    """Tokens through the model so far: llama.cpp's own count, or the transformers batcher's."""
    if isinstance(model, LlamaCppModel):
        perf = model.runtime.perf()
        return perf["prompt_tokens"] + perf["eval_tokens"]
    return model._batcher.fed_tokens


def shared_tokens(model) -> int:
    """Prompt tokens a conversation took from another's kept cache so far."""
    return model._pool.shared_tokens if isinstance(model, LlamaCppModel) else model._batcher.prefixes.shared_tokens


def decode_steps(model) -> tuple[int, int]:
    """(decode passes, decoding requests fed in them) so far."""
    if isinstance(model, LlamaCppModel):
        return model.runtime.counters.decode_passes, model.runtime.counters.decode_rows
    return model._batcher.passes, model._batcher.stepped


def batching(model) -> dict:
    """What batches concurrent calls: the batcher's sizes (transformers' or llama.cpp's)."""
    if isinstance(model, LlamaCppModel):
        return {
            "max_batch": model._batcher.max_batch,
            "kept_prefixes": model.runtime.sequences,
            "weights": model.runtime.weight_type or model.runtime.file_type,
            "threads": model.runtime.threads,
        }
    if model._batcher is None:
        raise SystemExit(
            "--concurrency: this model's cache cannot be batched (it has sliding-window or other "
            "layers that are not plain full attention); it runs one call at a time"
        )
    return {"max_batch": model._batcher.max_batch, "kept_prefixes": model._batcher.prefixes.size}
