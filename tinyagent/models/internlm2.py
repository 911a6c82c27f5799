"""InternLM2Chat: InternLM2 checkpoints run natively as transformers' Llama, with InternLM2's prompt.

InternLM2's own modeling code (`trust_remote_code=True`) no longer works with current transformers,
and running a checkpoint's code is a security risk; `engine/internlm2_loading.py` loads the weights
onto `LlamaForCausalLM` instead. The remote code stays available as an opt-in.
"""

from __future__ import annotations

import json

from ..engine.internlm2_loading import load_internlm2
from ..engine.loading import load_hf
from ..format.messages import Message
from .hf import MAX_BATCH, HFChatModel
from .local import KEPT_PREFIXES

DEFAULT_META_INSTRUCTION = (
    "You are an AI assistant whose name is InternLM (书生·浦语).\n"
    "- InternLM (书生·浦语) is a conversational language model that is developed by Shanghai AI Laboratory "
    "(上海人工智能实验室). It is designed to be helpful, honest, and harmless.\n"
    "- InternLM (书生·浦语) can understand and communicate fluently in the language chosen by the user such "
    "as English and 中文."
)


class InternLM2Chat(HFChatModel):
    """InternLM2 / InternLM2.5 chat models (e.g. internlm/internlm2-chat-1_8b), the TinyAgent model.

    Loads natively (no remote code) and builds InternLM2's own prompt; generation, stop strings,
    streaming and KV-cache reuse are `HFChatModel`'s. `trust_remote_code=True` loads the
    checkpoint's original code instead, for those who want it.
    """

    meta_instruction: str = DEFAULT_META_INSTRUCTION
    #: the tools protocol: InternLM2's plugin format, its tools in a `system name=<|plugin|>` message
    tool_format = "internlm2"
    native_tools = True

    def __init__(
        self,
        path: str,
        device: str = "auto",
        dtype="auto",
        trust_remote_code: bool = False,
        reuse_cache: bool = True,
        meta_instruction: str = DEFAULT_META_INSTRUCTION,
        max_batch: int = MAX_BATCH,
        kept_prefixes: int = KEPT_PREFIXES,
        **generation_defaults,
    ):
        if trust_remote_code:
            model, tokenizer = load_hf(path, device, dtype, trust_remote_code=True)
        else:
            model, tokenizer = load_internlm2(path, device, dtype)
        self.meta_instruction = meta_instruction
        self._attach(model, tokenizer, reuse_cache, generation_defaults, max_batch, kept_prefixes)

    def _attach(
        self,
        model,
        tokenizer,
        reuse_cache: bool,
        generation_defaults: dict,
        max_batch: int = MAX_BATCH,
        kept_prefixes: int = KEPT_PREFIXES,
    ) -> None:
        super()._attach(model, tokenizer, reuse_cache, generation_defaults, max_batch, kept_prefixes)
        bos = tokenizer.bos_token_id
        self.add_bos = bos is not None and tokenizer("", add_special_tokens=True)["input_ids"][:1] == [bos]

    def render_prompt(self, messages: list[Message], tools: list[dict] | None = None) -> str:
        """`<|im_start|>{role}\n{content}<|im_end|>\n` per message, InternLM's meta instruction as
        the system message when none is given; a trailing assistant message is left open. `tools` go in
        a `system name=<|plugin|>` message after the first system message, and tool results in
        `environment name=<|plugin|>` turns (InternLM2's plugin protocol, as lagent writes it)."""
        if not any(m["role"] == "system" for m in messages) and self.meta_instruction:
            messages = [{"role": "system", "content": self.meta_instruction}, *messages]
        if tools:
            plugins = {
                "role": "system",
                "name": "plugin",
                "content": json.dumps([t.get("function", t) for t in tools], ensure_ascii=False),
            }
            at = 1 if messages and messages[0]["role"] == "system" else 0
            messages = [*messages[:at], plugins, *messages[at:]]
        continuing = bool(messages) and messages[-1]["role"] == "assistant"
        parts = [f"<|im_start|>{_role(m)}\n{m['content']}<|im_end|>\n" for m in messages]
        if continuing:
            parts[-1] = parts[-1][: -len("<|im_end|>\n")]
        else:
            parts.append("<|im_start|>assistant\n")
        return "".join(parts)

    def encode_prompt(self, text: str) -> list[int]:
        """Token ids of the prompt, starting with the BOS token when the tokenizer's config adds one."""
        ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        return [self.tokenizer.bos_token_id, *ids] if self.add_bos else ids


def _role(message: Message) -> str:
    """A message's role line: a tool result is the plugin's environment turn; a named message says its name."""
    if message["role"] == "tool":
        return "environment name=<|plugin|>"
    return f"{message['role']} name=<|{message['name']}|>" if message.get("name") else message["role"]
