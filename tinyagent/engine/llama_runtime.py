"""A GGUF file run by llama.cpp (llama-cpp-python's low-level API, the optional `llamacpp` extra).

llama.cpp reads quantised weights as they are (where transformers de-quantises them to a float32 copy)
with its own CPU kernels; a file in a type without fast kernels here is converted once (`llama_weights`).
`LlamaRuntime` owns one model and one context; the context's KV cache holds up to `sequences`
conversations as llama.cpp sequences (`sequences.py` decides which one a prompt continues,
`llama_batching.py` steps several together). A pass carries at most `batch_size` tokens (PREFILL_CHUNK,
or the cache's size when smaller: llama.cpp aborts the process on a longer one); every pass is counted
here, next to llama.cpp's own counters (`perf`). Errors a user can cause (no file, a file llama.cpp
cannot read, settings that cannot work together, a prompt past the context window) are one-line
`ValueError`s / `FileNotFoundError`s.
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

from . import llama_weights
from .cpus import default_threads

INSTALL_HINT = (
    "the llama.cpp backend needs llama-cpp-python: pip install 'tinyagent[llamacpp]' (its first "
    "install builds llama.cpp from source: about 10 minutes on 2 cores)"
)
MAX_CONTEXT = 32768  # KV cells of all sequences together by default (they cost memory up front)
PREFILL_CHUNK = 512  # prompt tokens per llama_decode call (cancel is checked between chunks)
FLASH_ATTENTION = False  # see docs/engine.md, "llama.cpp": measured both ways

log = logging.getLogger(__name__)
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
    # llama.cpp's own log lines, even its errors: what goes wrong is raised here as an exception with a one-line
    # message
    logging.getLogger("llama-cpp-python").setLevel(logging.CRITICAL + 1)
    import llama_cpp

    with _backend_lock:
        if not _backend_ready:
            llama_cpp.llama_backend_init()
            _backend_ready = True
    return llama_cpp


@dataclass
class Counters:
    """What went through the model: tokens fed (prompt chunks and one-token steps) and their time."""

    calls: int = 0  # llama_decode calls (forward passes)
    prompt_tokens: int = 0  # tokens fed in passes of more than one token
    single_passes: int = 0  # passes of one token (each decoded token fed back, or a one-token prompt rest)
    single_seconds: float = 0.0
    seconds: float = 0.0  # all llama_decode time
    decode_passes: int = 0  # passes carrying at least one generating sequence's token
    decode_rows: int = 0  # generating sequences' tokens fed in them (one per sequence and pass)

    @property
    def fed(self) -> int:
        return self.prompt_tokens + self.single_passes


def chunks(tokens: list[int], size: int = PREFILL_CHUNK) -> list[tuple[int, list[int]]]:
    """(offset, chunk) pieces of at most `size` tokens, none of one token unless `tokens` is one:
    llama.cpp computes a lone token with other kernels than a row of a longer batch (logits differ by
    up to ~0.5 here), and a prompt's rows should come out as a full prefill gives them."""
    cuts = list(range(0, len(tokens), size))
    if len(cuts) > 1 and len(tokens) - cuts[-1] == 1:
        cuts[-1] -= 1
    return [(at, tokens[at:end]) for at, end in zip(cuts, [*cuts[1:], len(tokens)])]


class LlamaRuntime:
    """One GGUF file on llama.cpp: its vocabulary, its chat template, and a KV cache of `sequences`
    conversations, each in a stream of its own of `context_window` cells (`kv_cells` in all: by default
    MAX_CONTEXT split between the sequences, or the file's trained context each when that is less).

    A stream per sequence, not one pool of cells for all: in one pool every token attends over every
    sequence's cells (masked), so one agent's step slows with each conversation kept beside it, and a pass of
    several agents' tokens costs several times one (measured: docs/engine.md, "llama.cpp")."""

    def __init__(
        self,
        path: str | os.PathLike,
        context_window: int | None = None,
        sequences: int = 1,
        threads: int | None = None,
        kv_cells: int | None = None,
        weight_type: str = "auto",
    ):
        self.path = Path(path).expanduser()
        if not self.path.is_file():
            raise FileNotFoundError(f"no such GGUF file: {self.path}")
        for name, value in (("context_window", context_window), ("kv_cells", kv_cells), ("threads", threads)):
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be a positive whole number, not {value!r}")
        lib = self.lib = _library()
        self.threads = threads or default_threads()
        self.file_type = llama_weights.file_type(self.path)
        self.weight_type = llama_weights.target_type(weight_type, self.file_type, llama_weights.cpu_flags(lib))
        self.model = self._load(lib)
        self.vocab = lib.llama_model_get_vocab(self.model)
        self.n_vocab = lib.llama_vocab_n_tokens(self.vocab)
        trained = lib.llama_model_n_ctx_train(self.model)
        sequences = max(1, sequences)
        if kv_cells:
            window = context_window or max(1, kv_cells // sequences)
            if window * sequences > kv_cells:
                lib.llama_model_free(self.model)
                raise ValueError(
                    f"{sequences} conversations of context_window {window} need {window * sequences} "
                    f"kv_cells, more than {kv_cells}: set more kv_cells, a smaller context_window, or "
                    "a smaller max_batch"
                )
        else:
            window = context_window or min(trained, max(256, MAX_CONTEXT // sequences))
            kv_cells = window * sequences
        ctx_params = lib.llama_context_default_params()
        ctx_params.n_ctx = kv_cells
        ctx_params.n_batch = ctx_params.n_ubatch = PREFILL_CHUNK
        ctx_params.n_seq_max = sequences
        ctx_params.kv_unified = False  # a stream of cells per sequence (see the class docstring)
        ctx_params.flash_attn_type = (
            lib.LLAMA_FLASH_ATTN_TYPE_ENABLED if FLASH_ATTENTION else lib.LLAMA_FLASH_ATTN_TYPE_DISABLED
        )
        ctx_params.n_threads = ctx_params.n_threads_batch = self.threads
        ctx_params.no_perf = False  # keep llama.cpp's own timings (`perf`)
        self.ctx = lib.llama_init_from_model(self.model, ctx_params)
        if not self.ctx:
            lib.llama_model_free(self.model)
            raise ValueError(
                f"{self.path}: llama.cpp could not make a KV cache of {self.kv_cells} cells "
                "(out of memory? set a smaller context_window or kv_cells)"
            )
        self.sequences = sequences
        self.kv_cells = int(lib.llama_n_ctx(self.ctx))  # llama.cpp rounds a stream up to a multiple of 256
        self.context_window = int(min(window, lib.llama_n_ctx_seq(self.ctx)))
        # llama.cpp takes at most this many tokens per llama_decode: the batch size asked for, or fewer
        # when the cache is smaller (a longer batch aborts the process, so every batch is cut to it)
        self.batch_size = int(lib.llama_n_batch(self.ctx))
        self.memory = lib.llama_get_memory(self.ctx)
        self._batch = lib.llama_batch_init(self.batch_size, 0, 1)
        self.counters = Counters()
        self._pieces: dict[int, bytes] = {}

    def _load(self, lib):
        """The model: the file itself, or its conversion to `weight_type` (made once, cached; made again
        when the cached file will not load)."""
        params = lib.llama_model_default_params()
        if self.weight_type:
            for _ in range(2):
                converted = llama_weights.convert(lib, self.path, self.weight_type, self.threads)
                if converted is None:
                    break
                model = lib.llama_model_load_from_file(str(converted).encode(), params)
                if model:
                    self.weights_path = converted
                    return model
                log.warning("the cached %s could not be loaded: converting %s again", converted, self.path.name)
                llama_weights.forget(converted)
            self.weight_type = None
        self.weights_path = self.path
        model = lib.llama_model_load_from_file(str(self.path).encode(), params)
        if not model:
            raise ValueError(
                f"{self.path}: not a GGUF model llama.cpp can load (truncated or corrupt, or an "
                "architecture this llama.cpp does not know)"
            )
        return model

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
        """Make `target` hold the first `tokens` positions of `source`: llama.cpp copies a stream whole (at the
        next pass), then the rest is dropped."""
        self.lib.llama_memory_seq_rm(self.memory, target, 0, -1)
        self.lib.llama_memory_seq_cp(self.memory, source, target, -1, -1)
        self.lib.llama_memory_seq_rm(self.memory, target, tokens, -1)

    def decode(self, rows: list[tuple[int, int, int, bool]], decoding: int = 0) -> int:
        """One llama_decode of `rows` (token, position, sequence, whether its logits are wanted), at most
        `batch_size` of them; llama.cpp's code: 0 done, 1 no free cell (nothing was computed). `decoding` of
        the rows are generating sequences' tokens (counted as such)."""
        batch = self._batch
        batch.n_tokens = len(rows)
        for i, (token, position, seq, wanted) in enumerate(rows):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, position, 1
            batch.seq_id[i][0], batch.logits[i] = seq, wanted
        started = time.perf_counter()
        code = self.lib.llama_decode(self.ctx, batch)
        seconds = time.perf_counter() - started
        if code == 0:
            c = self.counters
            c.seconds += seconds
            c.calls += 1
            if len(rows) == 1:
                c.single_passes += 1
                c.single_seconds += seconds
            else:
                c.prompt_tokens += len(rows)
            if decoding:
                c.decode_passes += 1
                c.decode_rows += decoding
        return code

    def logits(self, index: int):
        """The logits row of the last pass's `index`-th row (a numpy copy; -1: the last)."""
        import numpy as np

        row = self.lib.llama_get_logits_ith(self.ctx, index)
        return np.ctypeslib.as_array(row, shape=(self.n_vocab,)).copy()

    def feed(self, seq: int, tokens: list[int], start: int, cancel=None):
        """Feed `tokens` at positions `start`... of sequence `seq` alone; the logits after the last (a numpy
        row), or None when `cancel` was set between chunks."""
        for at, chunk in chunks(tokens, self.batch_size):
            if cancel is not None and cancel.is_set():
                return None
            code = self.decode([(token, start + at + i, seq, i == len(chunk) - 1) for i, token in enumerate(chunk)])
            if code != 0:
                raise RuntimeError(
                    f"llama.cpp's KV cache is full (a conversation holds {self.context_window} cells)"
                    if code == 1
                    else f"llama_decode failed (code {code})"
                )
        return self.logits(-1)

    def perf(self) -> dict:
        """llama.cpp's own counters: tokens of multi-token passes and one-token passes, and their milliseconds.
        llama.cpp reports a count of 0 as 1 (it divides by them), so a count is 0 until this runtime made such
        a pass."""
        data = self.lib.llama_perf_context(self.ctx)
        return {
            "prompt_tokens": data.n_p_eval if self.counters.prompt_tokens else 0,
            "eval_tokens": data.n_eval if self.counters.single_passes else 0,
            "prompt_ms": data.t_p_eval_ms,
            "eval_ms": data.t_eval_ms,
        }
