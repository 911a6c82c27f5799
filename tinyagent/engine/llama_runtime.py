"""A GGUF file run by llama.cpp (llama-cpp-python's low-level API, the optional `llamacpp` extra).

llama.cpp reads the quantised weights as they are (92 MB for SmolLM2-135M Q4_1, where transformers
de-quantises them to a 542 MB float32 copy) with its own CPU kernels. `LlamaRuntime` owns one model
and one context; the context's KV cache holds up to `sequences` conversations as llama.cpp
sequences (`sequences.py` decides which one a prompt continues). Tokens are fed in chunks of at
most `PREFILL_CHUNK`; every fed token and every one-token pass is counted here, next to llama.cpp's
own counters (`perf`). Errors a user can cause (no file, a file llama.cpp cannot read, a prompt
past the context window) are one-line `ValueError`s / `FileNotFoundError`s.
"""
from __future__ import annotations

import ctypes
import importlib.util
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

INSTALL_HINT = ("the llama.cpp backend needs llama-cpp-python: pip install 'tinyagent[llamacpp]' (its first "
                "install builds llama.cpp from source: about 10 minutes on 2 cores)")
MAX_CONTEXT = 32768   # the context window when the file's own is longer (KV cells cost memory up front)
KV_CELLS_PER_WINDOW = 2  # kept conversations share this many context windows of KV cells (at most MAX_CONTEXT)
PREFILL_CHUNK = 512   # prompt tokens per llama_decode call (cancel is checked between chunks)

_backend_lock = threading.Lock()
_backend_ready = False


def llamacpp_available() -> bool:
    """True when llama-cpp-python is installed (it is imported only when a model is loaded)."""
    return importlib.util.find_spec("llama_cpp") is not None


def require_llamacpp() -> None:
    if not llamacpp_available():
        raise ImportError(INSTALL_HINT)


def _library():
    """The llama_cpp module, with its backend initialised once and its C log lines silenced."""
    global _backend_ready
    require_llamacpp()
    # llama.cpp's own log lines, even its errors ("failed to find a memory slot" when the cache is full, which
    # make_room then handles): what goes wrong is raised here as an exception with a one-line message
    logging.getLogger("llama-cpp-python").setLevel(logging.CRITICAL + 1)
    import llama_cpp

    with _backend_lock:
        if not _backend_ready:
            llama_cpp.llama_backend_init()
            _backend_ready = True
    return llama_cpp


def default_threads() -> int:
    """Half the CPUs this process may run on, at least one (llama-cpp-python's default: about the physical
    cores). More threads than cores that are free is far worse than fewer: llama.cpp's threads wait for
    each other at every operation, so one descheduled thread stalls them all (README, "Models")."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cpus // 2)


@dataclass
class Counters:
    """What went through the model: tokens fed (prompt chunks and one-token steps) and their time."""

    calls: int = 0              # llama_decode calls (forward passes)
    prompt_tokens: int = 0      # tokens fed in passes of more than one token
    single_passes: int = 0      # passes of one token (each decoded token fed back, or a one-token prompt rest)
    single_seconds: float = 0.0
    seconds: float = 0.0        # all llama_decode time

    @property
    def fed(self) -> int:
        return self.prompt_tokens + self.single_passes


def chunks(tokens: list[int]) -> list[tuple[int, list[int]]]:
    """(offset, chunk) pieces of at most PREFILL_CHUNK tokens, none of one token unless `tokens` is one:
    llama.cpp computes a lone token with other kernels than a row of a longer batch (logits differ by
    up to ~0.5 here), and a prompt's rows should come out as a full prefill gives them."""
    cuts = list(range(0, len(tokens), PREFILL_CHUNK))
    if len(cuts) > 1 and len(tokens) - cuts[-1] == 1:
        cuts[-1] -= 1
    return [(at, tokens[at:end]) for at, end in zip(cuts, [*cuts[1:], len(tokens)])]


class LlamaRuntime:
    """One GGUF file on llama.cpp: its vocabulary, its chat template, and a KV cache of `sequences`
    conversations of up to `context_window` tokens each, sharing `kv_cells` cells (default: one window for
    one sequence, else KV_CELLS_PER_WINDOW windows, at most MAX_CONTEXT unless the window is longer)."""

    def __init__(self, path: str | os.PathLike, context_window: int | None = None, sequences: int = 1,
                 threads: int | None = None, kv_cells: int | None = None):
        self.path = Path(path).expanduser()
        if not self.path.is_file():
            raise FileNotFoundError(f"no such GGUF file: {self.path}")
        lib = self.lib = _library()
        params = lib.llama_model_default_params()
        self.model = lib.llama_model_load_from_file(str(self.path).encode(), params)
        if not self.model:
            raise ValueError(f"{self.path}: not a GGUF model llama.cpp can load (truncated or corrupt, or an "
                             "architecture this llama.cpp does not know)")
        self.vocab = lib.llama_model_get_vocab(self.model)
        self.n_vocab = lib.llama_vocab_n_tokens(self.vocab)
        trained = lib.llama_model_n_ctx_train(self.model)
        self.context_window = int(context_window or min(trained, MAX_CONTEXT))
        self.threads = threads or default_threads()
        ctx_params = lib.llama_context_default_params()
        self.kv_cells = int(kv_cells or (self.context_window if sequences <= 1 else
                                         max(self.context_window, min(KV_CELLS_PER_WINDOW * self.context_window,
                                                                      MAX_CONTEXT))))
        ctx_params.n_ctx = self.kv_cells
        ctx_params.n_batch = ctx_params.n_ubatch = PREFILL_CHUNK
        ctx_params.n_seq_max = max(1, sequences)
        ctx_params.kv_unified = True  # one pool of cells: a shared start (the system prompt) is held once
        # Without flash attention a row's logits do not depend on how the prompt was cut into chunks
        # (with it they do), so a reused prefix gives what a full prefill gives; it also prefills faster here.
        ctx_params.flash_attn_type = lib.LLAMA_FLASH_ATTN_TYPE_DISABLED
        ctx_params.n_threads = ctx_params.n_threads_batch = self.threads
        ctx_params.no_perf = False  # keep llama.cpp's own timings (`perf`)
        self.ctx = lib.llama_init_from_model(self.model, ctx_params)
        if not self.ctx:
            lib.llama_model_free(self.model)
            raise ValueError(f"{self.path}: llama.cpp could not make a KV cache of {self.kv_cells} cells "
                             "(out of memory? set a smaller context_window or kv_cells)")
        self.sequences = ctx_params.n_seq_max
        self.memory = lib.llama_get_memory(self.ctx)
        self._batch = lib.llama_batch_init(PREFILL_CHUNK, 0, 1)
        self.counters = Counters()
        self._pieces: dict[int, bytes] = {}

    def close(self) -> None:
        """Free the context and the model (the object is unusable afterwards)."""
        if getattr(self, "ctx", None):
            self.lib.llama_batch_free(self._batch)
            self.lib.llama_free(self.ctx)
            self.lib.llama_model_free(self.model)
            self.ctx = self.model = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001  (interpreter shutdown: the library may be gone)
            pass

    # --- the vocabulary ------------------------------------------------------------------------

    def tokenize(self, text: str) -> list[int]:
        """Token ids of `text`, special tokens parsed, nothing added (a chat template writes its own BOS)."""
        data = text.encode("utf-8")
        size = len(data) + 8
        buffer = (self.lib.llama_token * size)()
        n = self.lib.llama_tokenize(self.vocab, data, len(data), buffer, size, False, True)
        if n < 0:
            size = -n
            buffer = (self.lib.llama_token * size)()
            n = self.lib.llama_tokenize(self.vocab, data, len(data), buffer, size, False, True)
        return list(buffer[:n])

    def piece(self, token: int) -> bytes:
        """The bytes `token` writes (nothing for a control token), cached."""
        piece = self._pieces.get(token)
        if piece is None:
            piece = self._pieces[token] = self._piece(token, special=False)
        return piece

    def token_text(self, token: int) -> str:
        """A token's own text, special tokens included (`<|im_end|>`)."""
        return self._piece(token, special=True).decode("utf-8", errors="replace")

    def _piece(self, token: int, special: bool) -> bytes:
        buffer = ctypes.create_string_buffer(64)
        n = self.lib.llama_token_to_piece(self.vocab, token, buffer, 64, 0, special)
        if n < 0:
            buffer = ctypes.create_string_buffer(-n)
            n = self.lib.llama_token_to_piece(self.vocab, token, buffer, -n, 0, special)
        return buffer.raw[:n]

    def is_control(self, token: int) -> bool:
        return bool(self.lib.llama_vocab_get_attr(self.vocab, token) & self.lib.LLAMA_TOKEN_ATTR_CONTROL)

    def control_tokens(self) -> list[int]:
        return [t for t in range(self.n_vocab) if self.is_control(t)]

    def end_tokens(self) -> list[int]:
        """The ids that end generation (llama.cpp's end-of-generation set: eos, eot, ...)."""
        return [t for t in range(self.n_vocab) if self.lib.llama_vocab_is_eog(self.vocab, t)]

    def ordinary_pieces(self) -> tuple[dict[int, bytes], int | None]:
        """(the bytes of every token that writes text, the eos id): the vocabulary the automaton compiles."""
        pieces = {t: self.piece(t) for t in range(self.n_vocab) if not self.is_control(t)}
        eos = self.lib.llama_vocab_eos(self.vocab)
        return {t: p for t, p in pieces.items() if p}, (eos if eos >= 0 else None)

    def chat_template(self) -> str | None:
        template = self.lib.llama_model_chat_template(self.model, None)
        return template.decode("utf-8") if template else None

    def special_token_texts(self) -> dict[str, str]:
        """bos_token / eos_token as a chat template names them."""
        named = {"bos_token": self.lib.llama_vocab_bos(self.vocab), "eos_token": self.lib.llama_vocab_eos(self.vocab)}
        return {name: self.token_text(t) for name, t in named.items() if t >= 0}

    def weight_bytes(self) -> int:
        """Bytes of the weights as stored (what one decode step reads, besides one embedding row)."""
        return int(self.lib.llama_model_size(self.model))

    # --- feeding tokens --------------------------------------------------------------------------

    def remove(self, seq: int, start: int = 0) -> None:
        """Drop the sequence's cells from position `start` on."""
        self.lib.llama_memory_seq_rm(self.memory, seq, start, -1)

    def copy(self, source: int, target: int, tokens: int) -> None:
        """Make `target` hold the first `tokens` positions of `source` (cells are shared, not copied)."""
        self.lib.llama_memory_seq_rm(self.memory, target, 0, -1)
        self.lib.llama_memory_seq_cp(self.memory, source, target, 0, tokens)

    def feed(self, seq: int, tokens: list[int], start: int, make_room=None, cancel=None):
        """Feed `tokens` at positions `start`... of sequence `seq`; the logits after the last (a numpy row),
        or None when `cancel` was set between chunks. `make_room()` frees cells of other sequences when
        the cache is full (False: nothing left to free)."""
        import numpy as np

        lib, batch = self.lib, self._batch
        for at, chunk in chunks(tokens):
            if cancel is not None and cancel.is_set():
                return None
            batch.n_tokens = len(chunk)
            for i, token in enumerate(chunk):
                batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, start + at + i, 1
                batch.seq_id[i][0], batch.logits[i] = seq, False
            batch.logits[len(chunk) - 1] = True
            started = time.perf_counter()
            code = lib.llama_decode(self.ctx, batch)
            while code == 1 and make_room is not None and make_room():
                code = lib.llama_decode(self.ctx, batch)
            seconds = time.perf_counter() - started
            if code != 0:
                raise RuntimeError("llama.cpp's KV cache is full (more kv_cells hold more)" if code == 1
                                   else f"llama_decode failed (code {code})")
            self.counters.seconds += seconds
            self.counters.calls += 1
            if len(chunk) == 1:
                self.counters.single_passes += 1
                self.counters.single_seconds += seconds
            else:
                self.counters.prompt_tokens += len(chunk)
        row = lib.llama_get_logits_ith(self.ctx, -1)
        return np.ctypeslib.as_array(row, shape=(self.n_vocab,)).copy()

    def perf(self) -> dict:
        """llama.cpp's own counters: tokens of multi-token passes and one-token passes, and their milliseconds.
        llama.cpp reports a count of 0 as 1 (it divides by them), so a count is 0 until this runtime made such
        a pass."""
        data = self.lib.llama_perf_context(self.ctx)
        return {"prompt_tokens": data.n_p_eval if self.counters.prompt_tokens else 0,
                "eval_tokens": data.n_eval if self.counters.single_passes else 0,
                "prompt_ms": data.t_p_eval_ms, "eval_ms": data.t_eval_ms}

