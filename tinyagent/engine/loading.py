"""Loading a transformers model: where it runs and in which dtype, and from a hub id, a folder or a
GGUF file (a local one is converted once, `gguf_cache`)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from .gguf_cache import cached_folder


def require(modules: tuple[str, ...], purpose: str) -> None:
    """Raise ImportError with the pip command when a module needed for `purpose` is missing."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise ImportError(f"{purpose} needs {', '.join(missing)}: pip install {' '.join(missing)}")


def cpu_has_native_bf16() -> bool:
    """True on x86 CPUs with AVX512-BF16 (AMX ones have it too), where bf16 matmuls run natively."""
    import torch

    check = getattr(torch.cpu, "_is_avx512_bf16_supported", None)
    try:
        return bool(check and check())
    except RuntimeError:
        return False


def placement(device: str = "auto", dtype="auto"):
    """(device_map, torch dtype): bf16 (fp16 without bf16) and device_map="auto" on CUDA; on CPU bf16
    where the CPU computes it natively (faster there, docs/engine.md), float32 elsewhere."""
    import torch

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if dtype == "auto":
        if str(device).startswith("cuda"):
            dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        else:
            dtype = torch.bfloat16 if str(device) == "cpu" and cpu_has_native_bf16() else torch.float32
    elif isinstance(dtype, str):
        if not isinstance(getattr(torch, dtype, None), torch.dtype):
            raise ValueError(f"unknown dtype {dtype!r}: use 'auto', 'bfloat16', 'float16' or 'float32'")
        dtype = getattr(torch, dtype)
    if device == "cuda":
        require(("accelerate",), "device_map='auto'")
        return "auto", dtype
    return (None if device == "cpu" else {"": device}), dtype


def load_hf(
    model_id_or_path: str,
    device: str = "auto",
    dtype="auto",
    gguf_file: str | None = None,
    trust_remote_code: bool = False,
):
    """(model, tokenizer) from a hub id or a local folder, or a GGUF file in it (a local one is
    converted once and then loaded from the cache, see `gguf_cache`)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    extra = {}
    if gguf_file:
        require(("gguf", "accelerate"), "loading a GGUF file")
        local = Path(model_id_or_path) / gguf_file
        converted = cached_folder(local) if local.is_file() else None  # a hub file converts every time
        if converted is not None:
            model_id_or_path = str(converted)
        else:
            extra["gguf_file"] = gguf_file
    device_map, torch_dtype = placement(device, dtype)
    tokenizer = AutoTokenizer.from_pretrained(model_id_or_path, trust_remote_code=trust_remote_code, **extra)
    model = AutoModelForCausalLM.from_pretrained(
        model_id_or_path, dtype=torch_dtype, device_map=device_map, trust_remote_code=trust_remote_code, **extra
    )
    model.eval()
    return model, tokenizer
