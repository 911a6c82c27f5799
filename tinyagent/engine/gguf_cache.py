"""A cache of converted GGUF models, so only the first start pays for the conversion.

transformers loads a GGUF file by de-quantising every tensor and rebuilding the tokenizer from the
file's metadata: 15-35 s for SmolLM2-135M on a laptop CPU, every start. The first load writes the
result (float32 safetensors, the tokenizer, configs) to `TINYAGENT_CACHE` (default
`~/.cache/tinyagent`) under `gguf/`; later starts load that folder in a second or two.

An entry is keyed by the GGUF file's resolved path, size and modification time, and the
transformers version, so a changed file (or a transformers upgrade) gets a fresh conversion. It is
written to a temporary folder and renamed into place, so two processes converting at once never
leave a half-written entry: the first rename wins and the other copy is dropped.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path

log = logging.getLogger(__name__)

ENV_VAR = "TINYAGENT_CACHE"
FORMAT = 1  # bump when what an entry holds changes
STALE_SECONDS = 3600  # a partial folder this old was left by a conversion that was killed


class NotCacheable(Exception):
    """The converted model cannot be saved as a plain checkpoint."""


def cache_root() -> Path:
    """The cache folder: $TINYAGENT_CACHE, or ~/.cache/tinyagent."""
    return Path(os.environ.get(ENV_VAR) or Path.home() / ".cache" / "tinyagent").expanduser()


def entry_path(gguf_path: Path) -> Path:
    """Where the conversion of `gguf_path` (as it is now) is cached."""
    import transformers

    stat = gguf_path.stat()
    source = f"{gguf_path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{transformers.__version__}|{FORMAT}"
    key = hashlib.sha256(source.encode()).hexdigest()[:16]
    return cache_root() / "gguf" / f"{gguf_path.stem}-{key}"


def folder_size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def cached_folder(gguf_path: Path) -> Path | None:
    """A local model folder holding the converted `gguf_path`: the cached one, made now if missing.

    None when the cache cannot be written (the caller then loads the GGUF file directly).
    """
    target = entry_path(gguf_path)
    if (target / "config.json").is_file():
        return target
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=".partial-", dir=target.parent))
    except OSError as e:
        return _not_writable(target, gguf_path, e)
    try:
        _convert(gguf_path, scratch)
        os.rename(scratch, target)  # atomic; fails if another process got there first
    except NotCacheable as e:
        log.info("%s is not cached: %s", gguf_path.name, e)
        return None
    except OSError as e:  # another process won the rename, or the disk is full
        if not (target / "config.json").is_file():
            return _not_writable(target, gguf_path, e)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    _drop_older_entries(gguf_path, target)
    log.warning(
        "converted %s once and cached it in %s (%.0f MB; set %s to move it); later starts load from there",
        gguf_path.name,
        target,
        folder_size(target) / 1e6,
        ENV_VAR,
    )
    return target


def _not_writable(target: Path, gguf_path: Path, error: OSError) -> None:
    log.warning(
        "cannot write the model cache in %s (%s): converting %s at every start",
        target.parent,
        error.strerror or error,
        gguf_path.name,
    )


def _convert(gguf_path: Path, folder: Path) -> None:
    """De-quantise `gguf_path` on CPU in float32 (exact) and save model and tokenizer to `folder`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    options = {"gguf_file": gguf_path.name}
    tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, **options)
    model = AutoModelForCausalLM.from_pretrained(gguf_path.parent, dtype=torch.float32, **options)
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:
        if getattr(quantizer, "packed_modules", None):
            raise NotCacheable("its weights stay packed in GGUF blocks (GGUF kernels are installed)")
        quantizer.remove_quantization_config(model)  # every weight is de-quantised: a plain model now
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    (folder / "source.json").write_text(json.dumps({"gguf": str(gguf_path.resolve())}))


def _drop_older_entries(gguf_path: Path, keep: Path) -> None:
    """Remove earlier conversions of the same file (it changed since), and what killed conversions left
    (partial folders untouched for STALE_SECONDS: a live one is younger), so the cache does not grow."""
    for partial in keep.parent.glob(".partial-*"):
        try:
            if time.time() - partial.stat().st_mtime > STALE_SECONDS:
                shutil.rmtree(partial, ignore_errors=True)
        except OSError:
            continue
    source = str(gguf_path.resolve())
    for entry in keep.parent.glob(f"{gguf_path.stem}-*"):
        try:
            if entry != keep and json.loads((entry / "source.json").read_text())["gguf"] == source:
                shutil.rmtree(entry, ignore_errors=True)
        except (OSError, ValueError, KeyError):
            continue
