"""The model backends a user picks (layer 2): each turns chat messages into the next reply.

- model.py: `BaseModel` (one method, `generate`) and `Reply` (what it returns: text, calls, counts).
- hf.py: `HFChatModel`, any transformers chat model run locally on the engine (`tinyagent/engine/`).
- llamacpp.py: `LlamaCppModel`, a GGUF file run by llama.cpp (the `llamacpp` extra).
- local.py: what the two local backends share (settings, prompts, reply rules, `stream()`).
- internlm2.py: `InternLM2Chat`, InternLM2 checkpoints natively; embedded.py: `default_model()`.
- openai.py: `OpenAIChatModel`, any OpenAI-compatible server.

Heavy backends (torch, transformers, llama_cpp) are imported only when first used.
"""

from __future__ import annotations

import importlib

from .model import BaseModel, Reply

LAZY = {
    "HFChatModel": "hf",
    "InternLM2Chat": "internlm2",
    "LlamaCppModel": "llamacpp",
    "OpenAIChatModel": "openai",
    "default_model": "embedded",
}

__all__ = ["BaseModel", "Reply", *LAZY]


def __getattr__(name: str):
    if name in LAZY:
        return getattr(importlib.import_module(f".{LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
