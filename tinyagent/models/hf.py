"""HFChatModel: any Hugging Face causal chat model, run locally with transformers.

Greedy by default. Within one agent run the prompt only grows, so the KV cache of the last call
is kept and only the tokens after the longest common prefix (compared on token ids) are fed
(`prefix_cache`: exact for every attention type). A local GGUF file is converted once and cached
(`gguf_cache`).
"""

from __future__ import annotations

import logging
import threading
import time

from ..engine import batching, packed
from ..engine.loading import load_hf
from ..engine.prefix_cache import PrefixCache
from ..engine.streaming import CancelCriterion, ReplyText, TextStop, make_streamer
from ..format.messages import Message
from ..format.tool_formats import MARKERS, detect_format, template_takes_tools
from ..text import StopHoldback, TextCallback, trim_at_stop
from .local import DEFAULT_GENERATION, END_OF_TURN_TOKENS, KEPT_PREFIXES, REPLY_OPTIONS, LocalChatModel
from .model import Reply

log = logging.getLogger(__name__)

MAX_BATCH = 8  # concurrent generate calls decoded together (1: one at a time, behind a lock)
_DECODE_CONTEXT = 4  # prompt tokens decoded along with new ones, so a leading space survives decoding


class HFChatModel(LocalChatModel):
    """A transformers chat model: chat template, stop strings, streaming, KV-cache reuse.

    `HFChatModel("HuggingFaceTB/SmolLM2-360M-Instruct")`, a local folder, or `gguf_file=` a GGUF file
    in that folder. `generation_defaults` (the `generation_options`, or any other transformers
    `GenerationConfig` field) apply to every call; `generate` can override the `generation_options`.
    """

    provider = "transformers"
    model_id = property(lambda self: getattr(self.model, "name_or_path", None) or type(self).__name__)

    def __init__(
        self,
        model_id_or_path: str,
        device: str = "auto",
        dtype="auto",
        gguf_file: str | None = None,
        trust_remote_code: bool = False,
        reuse_cache: bool = True,
        max_batch: int = MAX_BATCH,
        kept_prefixes: int = KEPT_PREFIXES,
        **generation_defaults,
    ):
        model, tokenizer = load_hf(model_id_or_path, device, dtype, gguf_file, trust_remote_code)
        self._attach(model, tokenizer, reuse_cache, generation_defaults, max_batch, kept_prefixes)

    @classmethod
    def from_model(
        cls,
        model,
        tokenizer,
        reuse_cache: bool = True,
        max_batch: int = MAX_BATCH,
        kept_prefixes: int = KEPT_PREFIXES,
        **generation_defaults,
    ) -> HFChatModel:
        """Wrap a model and tokenizer that are already loaded."""
        self = cls.__new__(cls)
        self._attach(model, tokenizer, reuse_cache, generation_defaults, max_batch, kept_prefixes)
        return self

    def _attach(
        self,
        model,
        tokenizer,
        reuse_cache: bool,
        generation_defaults: dict,
        max_batch: int = MAX_BATCH,
        kept_prefixes: int = KEPT_PREFIXES,
    ) -> None:
        if type(self).render_prompt is HFChatModel.render_prompt and not getattr(tokenizer, "chat_template", None):
            raise ValueError(
                "this tokenizer has no chat template: use a chat (instruct) model, or set tokenizer.chat_template"
            )
        self.model, self.tokenizer = model, tokenizer
        self.generation_defaults = {**DEFAULT_GENERATION, **generation_defaults}
        self.control_tokens = declared_control_tokens(tokenizer)
        special = {
            *tokenizer.all_special_tokens,
            *(t.content for t in getattr(tokenizer, "added_tokens_decoder", {}).values() if t.special),
        }
        vocab = tokenizer.get_vocab()
        self._special_ids = frozenset(vocab[t] for t in special if t in vocab)
        self._marker_ids = frozenset(vocab[t] for t in MARKERS if t in vocab)  # kept when decoding a tool call
        template = tokenizer.chat_template if isinstance(tokenizer.chat_template, str) else None
        if type(self).render_prompt is HFChatModel.render_prompt:
            self.tool_format, self.native_tools = detect_format(template), template_takes_tools(template)
        self.context_window = getattr(model.config.get_text_config(), "max_position_embeddings", None)
        self.end_token_ids = self._end_token_ids()
        self._prefix = PrefixCache(model, reuse_cache)
        self._lock = threading.Lock()
        # batching: concurrent calls decode together, each conversation's cache kept (engine/batching.py)
        packed.install(model)  # transformers' sdpa, but one-token steps read grouped keys once (engine/packed.py)
        self._batcher = (
            batching.Batcher(model, max_batch, kept_prefixes if reuse_cache else 0)
            if max_batch > 1 and batching.supports(model)
            else None
        )

    def _end_token_ids(self) -> list[int]:
        """eos ids of the generation config and the tokenizer, plus any end-of-turn token it has."""
        eos = self.model.generation_config.eos_token_id
        ids = list(eos) if isinstance(eos, (list, tuple)) else [eos]
        ids.append(self.tokenizer.eos_token_id)
        vocab = self.tokenizer.get_vocab()
        ids += [vocab[t] for t in END_OF_TURN_TOKENS if t in vocab and t in self.control_tokens]
        return sorted({i for i in ids if i is not None})

    # --- prompts --------------------------------------------------------------------------

    def _apply_template(
        self,
        messages: list[Message],
        add_generation_prompt: bool,
        continue_final_message: bool,
        tools: list[dict] | None = None,
    ) -> str:
        return self.tokenizer.apply_chat_template(
            messages,
            **({"tools": tools} if tools else {}),
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
            continue_final_message=continue_final_message,
        )

    def encode_prompt(self, text: str) -> list[int]:
        """Token ids of a rendered prompt (the template already holds any BOS token)."""
        return self.encode_text(text)

    def encode_text(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _vocabulary(self) -> tuple[object, None]:
        return self.tokenizer, None

    def decode_new(self, prompt_ids: list[int], new_ids: list[int], markers: bool = False) -> str:
        """Text of `new_ids` as it continues the prompt (a leading space stays, special tokens go; with
        `markers`, those that write a tool call, such as `[TOOL_CALLS]`, stay)."""
        context, decode = prompt_ids[-_DECODE_CONTEXT:], self._decoder(markers)
        before = decode(context)
        full = decode(context + list(new_ids))
        return full[len(before) :] if full.startswith(before) else decode(new_ids)

    def _decoder(self, markers: bool = False):
        """ids -> text, special tokens skipped; with `markers`, those that write a tool call kept."""
        if markers and self._marker_ids:
            return lambda ids: self.tokenizer.decode(
                [i for i in ids if i in self._marker_ids or i not in self._special_ids], skip_special_tokens=False
            )
        return lambda ids: self.tokenizer.decode(ids, skip_special_tokens=True)

    def parsed_calls(self, prompt: str, reply: str, tools: list[dict]) -> list[dict] | None:
        """The calls in `reply` as transformers' response parsing reads them, when the tokenizer has a
        `response_template`: [{"name", "arguments"}]; None without one or when it cannot parse the reply."""
        template = getattr(self.tokenizer, "response_template", None)
        if not template:
            return None
        try:
            parsed = self.tokenizer.parse_response(reply, prefix=prompt, tools=tools)
        except (ValueError, KeyError, TypeError) as e:  # broken JSON in a call: the text reader reads it
            log.debug("response template could not parse the reply: %s", e)
            return None
        calls = [c.get("function", c) for c in parsed.get("tool_calls") or [] if isinstance(c, dict)]
        return [{"id": None, "name": c.get("name"), "arguments": c.get("arguments")} for c in calls]

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

        `constraint` (a `format.step_format.StepFormat`) keeps the reply in that format (needs outlines, see
        `engine.constrained`); the compiled automaton is cached, its per-call state is not.
        `max_line_tokens` replaces the format's line budget. `repetition_penalty` and
        `no_repeat_ngram_size` act within the reply only (`engine.repetition`). Setting `cancel` ends
        generation after the current token (what `stream` does when abandoned). `tools` (function schemas)
        go to the chat template; the reply then keeps its tool-call markers, and its calls come back as
        `Reply.tool_calls` where the tokenizer has a response template (`parsed_calls`).
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
        step, repetition = self._reply_rules(options, constraint, stop, options["max_new_tokens"])
        config = self._generation_config(options)
        # the format after the caller's; repetition after the format: it only picks among what is allowed
        processors = [*(logits_processor or []), *(p for p in (step, repetition) if p is not None)]
        markers = tools is not None
        with self._lock:
            prompt = self.render_prompt(messages, tools)
            ids = self.encode_prompt(prompt)
            holdback = StopHoldback(on_text, stop) if on_text else None
            started = time.perf_counter()
            reply = self._reply_text(ids, markers)  # one incremental decoder for the stop check and the stream
            stopping = [TextStop(reply, len(ids), stop)] if stop else []
            stopping += [CancelCriterion(cancel)] if cancel is not None else []
            if self._batcher is None:
                new_ids, reused = self._run(ids, config, holdback, processors, stopping, reply)
        if self._batcher is not None:  # outside the lock: the batcher runs this call with the others
            new_ids, reused = self._batch(ids, config, holdback, processors, stopping, reply)
        seconds = time.perf_counter() - started
        decoded = self.decode_new(ids, new_ids, markers)
        text = trim_at_stop(decoded, stop)
        if holdback:
            holdback.finish(text)
        capped = (
            len(new_ids) >= config.max_new_tokens
            and text == decoded
            and not (new_ids and new_ids[-1] in self.end_token_ids)
        )
        return Reply(
            text,
            prompt_tokens=len(ids),
            completion_tokens=len(new_ids),
            seconds=seconds,
            cached_tokens=reused,
            finish_reason="length" if capped else "stop",
            tool_calls=self.parsed_calls(prompt, text, tools) if tools else None,
        )

    @property
    def reuse_cache(self) -> bool:
        return self._prefix.enabled

    def reset_cache(self) -> None:
        """Forget the kept KV caches (frees their memory)."""
        with self._lock:
            self._prefix.clear()
            if self._batcher is not None:
                self._batcher.prefixes.clear()

    def _reply_text(self, prompt_ids: list[int], markers: bool = False) -> ReplyText:
        """The incremental text of a reply to `prompt_ids`, as `decode_new` gives it whole."""
        return ReplyText(self._decoder(markers), prompt_ids[-_DECODE_CONTEXT:])

    def _batch(
        self,
        ids: list[int],
        config,
        holdback: StopHoldback | None,
        logits_processor: list | None,
        stopping: list,
        reply: ReplyText,
    ) -> tuple[list[int], int]:
        """`_run` through the batcher: the same logits processors `generate` builds, the caller's after them."""
        from transformers import LogitsProcessorList

        processors = self.model._get_logits_processor(
            generation_config=config,
            input_ids_seq_length=len(ids),
            logits_processor=LogitsProcessorList(logits_processor or []),
            device=self.model.device,
        )
        on_token = (lambda new: holdback.update(reply(new))) if holdback else None
        return self._batcher.run(ids, config, processors, stopping, on_token)

    def _generation_config(self, options: dict | None = None):
        """A transformers `GenerationConfig` from `options` (the defaults when None), minus REPLY_OPTIONS."""
        from transformers import GenerationConfig

        options = {k: v for k, v in (options or self._options()).items() if k not in REPLY_OPTIONS}
        temperature, top_p = options.pop("temperature"), options.pop("top_p")
        if temperature and temperature > 0:
            options.update(do_sample=True, temperature=temperature, top_p=top_p)
        else:
            options.update(do_sample=False)
        pad = self.tokenizer.pad_token_id
        return GenerationConfig(
            eos_token_id=self.end_token_ids,
            pad_token_id=pad if pad is not None else self.end_token_ids[0],
            return_dict_in_generate=True,
            **options,
        )

    def _run(
        self,
        ids: list[int],
        config,
        holdback: StopHoldback | None,
        logits_processor: list | None,
        stopping: list = (),
        reply: ReplyText | None = None,
    ) -> tuple[list[int], int]:
        """Generate after `ids`, reusing what the kept cache holds of them; returns (new ids, tokens reused).

        Any failure, preparing the cache included, drops the kept cache, so one bad call never
        poisons the next.
        """
        import torch
        from transformers import LogitsProcessorList, StoppingCriteriaList

        device = self.model.device
        input_ids = torch.tensor([ids], device=device)
        streamer = make_streamer(reply or self._reply_text(ids), holdback) if holdback else None
        try:
            cache, reused = self._prefix.prepare(ids)
            with torch.inference_mode():
                out = self.model.generate(
                    input_ids,
                    attention_mask=torch.ones_like(input_ids),
                    cache=cache,
                    generation_config=config,
                    logits_processor=LogitsProcessorList(logits_processor or []),
                    streamer=streamer,
                    stopping_criteria=StoppingCriteriaList(stopping),
                )
        except BaseException:
            self._prefix.clear()
            raise
        sequence = out.sequences[0].tolist()
        self._prefix.keep(cache, sequence)
        return sequence[len(ids) :], reused


def declared_control_tokens(tokenizer) -> tuple[str, ...]:
    """The tokens a tokenizer matches whole in any text: its special tokens, and its added tokens that
    look like markup (Qwen2.5's `<tool_call>` is added but not marked special)."""
    added = [
        t
        for t in getattr(tokenizer, "added_tokens_decoder", {}).values()
        if t.special or any(ch in t.content for ch in "<>[]|｜")
    ]
    return tuple(sorted({t for t in (*tokenizer.all_special_tokens, *(t.content for t in added)) if t}))
