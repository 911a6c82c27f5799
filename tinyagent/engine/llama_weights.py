"""GGUF weights in a type llama.cpp has fast CPU kernels for, converted once and cached.

llama.cpp's CPU backend has tiled matrix kernels for prompts (llamafile's sgemm: F32, F16, BF16 with
AVX512-BF16, Q8_0, Q4_0, Q5_0, IQ4_NL) and repacks some types at load for faster products (Q4_0, Q4_K,
IQ4_NL); a file in any other type (SmolLM2-135M ships as Q4_1) is multiplied row by row. The first load
of such a file converts it with llama.cpp's own `llama_model_quantize` (`allow_requantize`) to the type
`auto_type` picks for this CPU, writes it to `TINYAGENT_CACHE` (beside `gguf_cache`'s conversions) under
`llama/`, and every later start loads that file. `weight_type="file"` keeps the file's own weights.

An entry is keyed by the source's resolved path, size and modification time, the target type and
llama-cpp-python's version. It is written under a temporary name and renamed into place, with a small
JSON record beside it written last; an entry without its record, or whose size differs from the record,
or that llama.cpp cannot load, is converted again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import struct
import tempfile
import time
from pathlib import Path

from .gguf_cache import ENV_VAR, cache_root

log = logging.getLogger(__name__)

FORMAT = 1
#: llama_ftype numbers (llama.h) of the types this module names.
FTYPES = {
    "f32": 0,
    "f16": 1,
    "q4_0": 2,
    "q4_1": 3,
    "q8_0": 7,
    "q5_0": 8,
    "q5_1": 9,
    "q2_k": 10,
    "q3_k_s": 11,
    "q3_k_m": 12,
    "q3_k_l": 13,
    "q4_k_s": 14,
    "q4_k_m": 15,
    "q5_k_s": 16,
    "q5_k_m": 17,
    "q6_k": 18,
    "iq4_nl": 25,
    "bf16": 32,
}
NAMES = {number: name for name, number in FTYPES.items()}
#: The types `weight_type` may ask for: what llama.cpp's CPU kernels run fast (module docstring).
TARGETS = ("q8_0", "q4_0", "f16", "bf16")
#: File types converted by `auto`: no tiled prompt kernel and no repack on x86 (docs/engine.md, "Weights",
#: has the measured table this list and `auto_type` come from).
SLOW = ("q4_1", "q5_1")
WEIGHT_TYPES = ("auto", "file", *TARGETS)


def cpu_flags(lib) -> set[str]:
    """The CPU features llama.cpp's CPU backend was built for and found (`llama_print_system_info`)."""
    info = lib.llama_print_system_info().decode(errors="replace")
    return {
        part.split("=")[0].split(":")[-1].strip().lower() for part in info.split("|") if part.strip().endswith("= 1")
    }


def auto_type(source: str | None, flags: set[str]) -> str | None:
    """The type `auto` converts a `source` file to on a CPU with `flags`, or None to keep the file: BF16 where
    the CPU multiplies BF16 natively (AVX512-BF16), else Q8_0, which holds a 4- or 5-bit block's values."""
    if source not in SLOW:
        return None
    return "bf16" if "avx512_bf16" in flags else "q8_0"


def target_type(weight_type: str, source: str | None, flags: set[str]) -> str | None:
    """The type to convert to under the `weight_type` setting, or None to load the file as it is."""
    if weight_type not in WEIGHT_TYPES:
        raise ValueError(f"unknown weight_type {weight_type!r}: use {', '.join(WEIGHT_TYPES)}")
    if weight_type == "file":
        return None
    if weight_type == "auto":
        return auto_type(source, flags)
    return None if weight_type == source else weight_type


# --- the GGUF header: the file's type without loading it ------------------------------------------

_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


def file_type(path: Path) -> str | None:
    """The `general.file_type` a GGUF file's metadata names ("q4_1", ...), or None when it names none or
    the file is not GGUF (llama.cpp then says what is wrong when it loads it)."""
    try:
        with open(path, "rb") as f:
            if f.read(4) != b"GGUF":
                return None
            version, _, count = struct.unpack("<IQQ", f.read(20))
            if version < 2:
                return None
            for _ in range(min(count, 100_000)):
                key = f.read(struct.unpack("<Q", f.read(8))[0]).decode("utf-8", errors="replace")
                kind = struct.unpack("<I", f.read(4))[0]
                if key == "general.file_type" and kind in (4, 5):
                    number = struct.unpack("<I" if kind == 4 else "<i", f.read(4))[0]
                    return NAMES.get(number, f"ftype {number}")
                _skip(f, kind)
    except (OSError, struct.error, ValueError):
        return None
    return None


def _skip(f, kind: int) -> None:
    if kind in _SCALARS:
        f.seek(struct.calcsize("<" + _SCALARS[kind]), 1)
    elif kind == 8:
        f.seek(struct.unpack("<Q", f.read(8))[0], 1)
    elif kind == 9:
        item, n = struct.unpack("<IQ", f.read(12))
        if item in _SCALARS:
            f.seek(n * struct.calcsize("<" + _SCALARS[item]), 1)
        else:
            for _ in range(n):
                _skip(f, item)
    else:
        raise ValueError(f"GGUF value type {kind}")


# --- the cache ----------------------------------------------------------------------------------


def entry_path(source: Path, target: str, version: str) -> Path:
    """Where the conversion of `source` (as it is now) to `target` is cached."""
    stat = source.stat()
    key = f"{source.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{target}|{version}|{FORMAT}"
    return cache_root() / "llama" / f"{source.stem}-{hashlib.sha256(key.encode()).hexdigest()[:16]}.{target}.gguf"


def _record(entry: Path) -> Path:
    return entry.with_suffix(".json")


def cached(entry: Path) -> bool:
    """True when `entry` is complete: its record names its size."""
    try:
        record = json.loads(_record(entry).read_text())
        return entry.stat().st_size == record["size"]
    except (OSError, ValueError, KeyError, TypeError):
        return False


def forget(entry: Path) -> None:
    """Remove an entry llama.cpp could not load, so the next call converts again."""
    for path in (_record(entry), entry):
        try:
            path.unlink()
        except OSError:
            pass


def convert(lib, source: Path, target: str, threads: int) -> Path | None:
    """The cached conversion of `source` to `target`, made now when missing or incomplete; None when the
    cache cannot be written or llama.cpp cannot convert the file (the caller loads the file as it is)."""
    import llama_cpp

    entry = entry_path(source, target, getattr(llama_cpp, "__version__", "?"))
    if cached(entry):
        return entry
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        handle, scratch = tempfile.mkstemp(prefix=".partial-", suffix=".gguf", dir=entry.parent)
        os.close(handle)
    except OSError as e:
        log.warning(
            "cannot write the model cache in %s (%s): %s runs on its own %s weights",
            entry.parent,
            e.strerror or e,
            source.name,
            file_type(source),
        )
        return None
    params = lib.llama_model_quantize_default_params()
    params.nthread, params.ftype, params.allow_requantize = threads, FTYPES[target], True
    started = time.perf_counter()
    try:
        import ctypes

        code = lib.llama_model_quantize(str(source).encode(), scratch.encode(), ctypes.byref(params))
        if code != 0:
            log.warning(
                "llama.cpp could not convert %s to %s (code %s): it runs on its own weights", source.name, target, code
            )
            return None
        os.replace(scratch, entry)
        _record(entry).write_text(
            json.dumps({"source": str(source.resolve()), "type": target, "size": entry.stat().st_size})
        )
    except OSError as e:
        log.warning(
            "cannot write the model cache in %s (%s): %s runs on its own weights",
            entry.parent,
            e.strerror or e,
            source.name,
        )
        forget(entry)
        return None
    finally:
        if os.path.exists(scratch):
            os.unlink(scratch)
    _drop_older(source, entry)
    log.warning(
        "converted %s (%s) to %s once in %.1f s and cached it in %s (%.0f MB; set %s to move it, "
        "weight_type: file to keep the file's own weights)",
        source.name,
        file_type(source),
        target.upper(),
        time.perf_counter() - started,
        entry,
        entry.stat().st_size / 1e6,
        ENV_VAR,
    )
    return entry


def _drop_older(source: Path, keep: Path) -> None:
    """Remove earlier conversions of the same file to the same type (it changed since)."""
    name = str(source.resolve())
    for record in keep.parent.glob(f"{source.stem}-*.json"):
        try:
            entry = record.with_suffix(".gguf")
            data = json.loads(record.read_text())
            if entry != keep and data["source"] == name and data["type"] == keep.suffixes[-2].lstrip("."):
                forget(entry)
        except (OSError, ValueError, KeyError, IndexError):
            continue
