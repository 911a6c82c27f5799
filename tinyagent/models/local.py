"""What the two local backends share (transformers: hf.py; llama.cpp: llamacpp.py): the generation
settings and their defaults, the prompt from a chat template, the reply's format and repetition rules,
token counting, and `stream()`."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from ..engine import constrained
from ..engine.chat_template import render_chat
from ..engine.repetition import ReplyRepetition
from ..engine.streaming import stream_in_thread
from ..format.messages import Message
from .model import BaseModel

#: Special tokens that close a turn in common chat formats; generation stops at any the vocabulary has.
END_OF_TURN_TOKENS = ("<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end|>", "<end_of_turn>", "<|endoftext|>")
#: Options the local backends apply themselves, within the reply (not transformers' whole-sequence versions).
REPLY_OPTIONS = ("repetition_penalty", "no_repeat_ngram_size", "max_line_tokens")
DEFAULT_GENERATION = {
    "max_new_tokens": 512,
    "temperature": 0.0,
    "top_p": 1.0,
    "repetition_penalty": 1.0,
    "no_repeat_ngram_size": 0,
    "max_line_tokens": None,
}
KEPT_PREFIXES = 16  # conversations whose KV cache is kept between calls


class LocalChatModel(BaseModel):
    """A chat model run in this process. Subclasses give `_apply_template`, `encode_prompt`, `generate`,
    `end_token_ids`, and `_vocabulary()` for constrained decoding."""

    generation_options = frozenset({"max_new_tokens", "temperature", "top_p", *REPLY_OPTIONS})
    end_token_ids: list[int] = []

    def _apply_template(
        self,
        messages: list[Message],
        add_generation_prompt: bool,
        continue_final_message: bool,
        tools: list[dict] | None = None,
    ) -> str:
        raise NotImplementedError

    def encode_prompt(self, text: str) -> list[int]:
        raise NotImplementedError

    def encode_text(self, text: str) -> list[int]:
        """Token ids of a piece of text on its own (no BOS)."""
        return self.encode_prompt(text)

    def _vocabulary(self) -> tuple[object, object]:
        """(the cache key of this vocabulary's compiled automata, a `Pieces` function or None for a tokenizer)."""
        raise NotImplementedError

    def render_prompt(self, messages: list[Message], tools: list[dict] | None = None) -> str:
        """The prompt text: the chat template (given `tools`, when there are), continuing a trailing
        assistant message unclosed."""
        return render_chat(
            lambda chat, opened, continued: self._apply_template(chat, opened, continued, tools), messages
        )

    def count_tokens(self, messages: list[Message], tools: list[dict] | None = None) -> int:
        return len(self.encode_prompt(self.render_prompt(messages, tools)))

    def stream(self, messages: list[Message], stop: list[str] | None = None, **kwargs) -> Iterator[str]:
        """`generate` as an iterator of text chunks, generated in a background thread.

        Closing or abandoning the iterator stops generation within a token or two and frees the
        model; whatever the generation raises is raised here (see `streaming.stream_in_thread`).
        """
        return stream_in_thread(
            lambda on_text, cancel: self.generate(messages, stop, on_text=on_text, cancel=cancel, **kwargs)
        )

    def _options(self, **overrides) -> dict:
        """The generation defaults with this call's overrides (those not None)."""
        return {**self.generation_defaults, **{k: v for k, v in overrides.items() if v is not None}}

    def _reply_rules(self, options: dict, constraint, stop: list[str], max_new_tokens: int):
        """(the step format's processor or None, the repetition processor or None) for one reply; the
        REPLY_OPTIONS are taken out of `options`."""
        penalty, ngram, line_budget = (options.pop(k) for k in REPLY_OPTIONS)
        step = None
        if constraint is not None:
            if line_budget:
                constraint = dataclasses.replace(constraint, max_line_tokens=line_budget)
            key, pieces = self._vocabulary()
            step = constrained.step_processor(
                key, constraint, end_ids=self.end_token_ids, max_new_tokens=max_new_tokens, stop=stop, pieces=pieces
            )
        repetition = ReplyRepetition(penalty, ngram) if penalty != 1.0 or ngram else None
        return step, repetition
