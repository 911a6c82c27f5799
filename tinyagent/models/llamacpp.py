"""LlamaCppModel: a GGUF chat model run by llama.cpp (the optional `llamacpp` extra), on its own quantised
weights and CPU kernels.

The same contract as `HFChatModel`: the chat template (here from the file's metadata, rendered as
transformers renders it), stop strings at a line start and never inside a think block, a stream
that holds back what may become a stop string, constrained decoding through the same automaton,
repetition rules within the reply, cancel, and usage counts with `cached_tokens`. The KV cache
keeps `kept_prefixes` conversations between calls (`engine.sequences`), so each step of an agent
feeds only its new tokens. Concurrent calls (agents in threads, the eval, the chat page) are stepped
together, one `llama_decode` per step carrying a token of each (`engine.llama_batching`), each with its
own rules. A file whose weight type has no fast kernels on this CPU is converted once and cached
(`engine.llama_weights`); threads default to the free physical cores (`engine.cpus`).
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from pathlib import Path

from ..engine.chat_template import template_renderer
from ..engine.llama_batching import LlamaBatcher, Request
from ..engine.llama_runtime import LlamaRuntime
from ..engine.sampling import ReplyChooser
from ..engine.sequences import SequencePool
from ..format.messages import Message
from ..format.tool_formats import detect_format, template_takes_tools
from ..text import StopHoldback, TextCallback, trim_at_stop
from .local import DEFAULT_GENERATION, END_OF_TURN_TOKENS, LocalChatModel
from .model import Reply

MAX_BATCH = 8  # calls generated together by default (the transformers batcher's too), each in a sequence of its own
COPY_MIN = 32  # tokens a new conversation must share with a kept one to copy its stream rather than compute them


class Vocabulary:
    """One GGUF file's vocabulary as the automaton compiles it: the key of its compiled patterns,
    shared by every model on the same file, so a pattern is compiled once per process."""

    _known: dict[tuple, Vocabulary] = {}
    _lock = threading.Lock()

    def __init__(self, runtime: LlamaRuntime):
        self._runtime = weakref.ref(runtime)

    @classmethod
    def of(cls, runtime: LlamaRuntime) -> Vocabulary:
        stat = runtime.path.stat()
        key = (str(runtime.path.resolve()), stat.st_size, stat.st_mtime_ns)
        with cls._lock:
            known = cls._known.get(key)
            if known is None or known._runtime() is None:
                known = cls._known[key] = cls(runtime)
            return known

    def pieces(self):
        return self._runtime().ordinary_pieces()


class LlamaCppModel(LocalChatModel):
    """`LlamaCppModel("model.gguf")`: any GGUF chat model llama.cpp runs (see the module docstring).

    `max_batch`: calls generated together (more wait for a place); each has a sequence of the KV cache, and
    those sequences (at least `kept_prefixes`) keep their conversations between calls. `context_window`:
    tokens of one conversation (default: `llama_runtime.MAX_CONTEXT` cells split between the sequences, at
    most the file's trained context); `kv_cells`: all sequences' cells together (see `LlamaRuntime`);
    `threads`: CPU threads (default: the free physical cores, `engine.cpus`); `weight_type`: "auto" (a file
    with no fast kernels here is converted once), "file" (its own weights), or a type ("q8_0", "q4_0",
    "f16", "bf16"); `seed`: of the sampler when `temperature` > 0.
    """

    provider = "llama.cpp"
    model_id = property(lambda self: self.runtime.path.name)

    def __init__(
        self,
        path: str | os.PathLike,
        context_window: int | None = None,
        threads: int | None = None,
        reuse_cache: bool = True,
        kept_prefixes: int | None = None,
        kv_cells: int | None = None,
        seed: int = 0,
        max_batch: int | None = None,
        weight_type: str = "auto",
        **generation_defaults,
    ):
        import numpy as np

        max_batch = MAX_BATCH if max_batch is None else max_batch
        if not isinstance(max_batch, int) or max_batch < 1:
            raise ValueError(f"max_batch must be a positive whole number, not {max_batch!r}")
        sequences = max(kept_prefixes or 0, max_batch) if reuse_cache else max_batch
        self.runtime = LlamaRuntime(path, context_window, sequences, threads, kv_cells, weight_type)
        template = self.runtime.chat_template()
        if not template:
            raise ValueError(f"{Path(path).name} has no chat template in its metadata: use a chat (instruct) model")
        self._template = template_renderer(template, **self.runtime.special_token_texts())
        self.tool_format, self.native_tools = detect_format(template), template_takes_tools(template)
        control = {t: self.runtime.token_text(t) for t in self.runtime.control_tokens()}
        self.control_tokens = tuple(sorted(set(control.values()) - {""}))
        ends = set(self.runtime.end_tokens()) | {t for t, text in control.items() if text in END_OF_TURN_TOKENS}
        self.end_token_ids = sorted(ends)
        self._end_ids = frozenset(ends)
        self.context_window = self.runtime.context_window
        self.generation_defaults = {**DEFAULT_GENERATION, **generation_defaults}
        self._reuse = reuse_cache
        self._pool = SequencePool(self.runtime.sequences, self.runtime.remove, self.runtime.copy, COPY_MIN)
        self._batcher = LlamaBatcher(self.runtime, self._pool, max_batch)
        self._vocab = Vocabulary.of(self.runtime)
        self._rng = np.random.default_rng(seed)  # drawn from by the batcher's one thread only

    # --- prompts --------------------------------------------------------------------------

    def _apply_template(
        self,
        messages: list[Message],
        add_generation_prompt: bool,
        continue_final_message: bool,
        tools: list[dict] | None = None,
    ) -> str:
        return self._template(messages, add_generation_prompt, continue_final_message, tools)

    def encode_prompt(self, text: str) -> list[int]:
        """Token ids of a rendered prompt (the template already holds any BOS token)."""
        return self.runtime.tokenize(text)

    def _vocabulary(self):
        return self._vocab, self._vocab.pieces

    # --- generation -----------------------------------------------------------------------

    def generate(
        self,
        messages: list[Message],
        stop: list[str] | None = None,
        *,
        max_new_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        repetition_penalty: float | None = None,
        no_repeat_ngram_size: int | None = None,
        max_line_tokens: int | None = None,
        on_text: TextCallback | None = None,
        logits_processor: list | None = None,
        constraint=None,
        cancel: threading.Event | None = None,
        tools: list[dict] | None = None,
        **ignored,
    ) -> Reply:
        """Continue `messages`; returns the new text (before the first stop string) with usage counts.

        The keywords are `HFChatModel.generate`'s; `logits_processor` holds functions
        `(token ids so far, numpy scores) -> scores`. The reply ends at an end-of-turn token, a stop
        string, `max_new_tokens`, the context window, or `cancel` being set. `tools` go to the chat
        template; the agent reads the calls from the reply's text.
        """
        self.check_generation_options(ignored)
        stop = [s for s in stop or () if s]
        options = self._options(
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            top_p=top_p,
            repetition_penalty=repetition_penalty,
            no_repeat_ngram_size=no_repeat_ngram_size,
            max_line_tokens=max_line_tokens,
        )
        ids = self.encode_prompt(self.render_prompt(messages, tools))
        room = self.context_window - len(ids)
        if room < 1:
            raise ValueError(
                f"the prompt has {len(ids)} tokens, more than the context window of {self.context_window} allows"
            )
        budget = min(options["max_new_tokens"], room)
        step, repetition = self._reply_rules(options, constraint, stop, budget)
        chooser = ReplyChooser(
            ids, list(logits_processor or []), step, repetition, options["temperature"], options["top_p"], self._rng
        )
        holdback = StopHoldback(on_text, stop) if on_text else None
        started = time.perf_counter()
        request = self._batcher.run(
            Request(ids, chooser, budget, stop, self._end_ids, self.runtime.piece, holdback, cancel, self._reuse)
        )
        seconds = time.perf_counter() - started
        new, whole = request.new, request.text
        text = trim_at_stop(whole, stop)
        if holdback:
            holdback.finish(text)
        capped = len(new) >= budget and text == whole and not (new and new[-1] in self._end_ids)
        return Reply(
            text,
            prompt_tokens=len(ids),
            completion_tokens=len(new),
            seconds=seconds,
            cached_tokens=request.reused,
            finish_reason="length" if capped else "stop",
        )

    @property
    def reuse_cache(self) -> bool:
        return self._reuse

    def reset_cache(self) -> None:
        """Forget the kept conversations (frees their cells; those of calls in flight when they end)."""
        self._batcher.clear()
