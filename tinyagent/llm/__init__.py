"""Model backends. Heavy ones (torch, transformers) are imported only when first used."""
from __future__ import annotations

import importlib

from .base import BaseModel, Completion, trim_at_stop, usage_of

_LAZY = {
    "HFChatModel": "hf",
    "InternLM2Chat": "internlm2",
    "OpenAIChatModel": "openai",
    "default_model": "embedded",
}

__all__ = ["BaseModel", "Completion", "trim_at_stop", "usage_of", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        module = importlib.import_module(f".{_LAZY[name]}", __name__)
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
