"""A GGUF file whose weight type has no fast kernels here is converted once with llama.cpp's own quantizer,
cached under TINYAGENT_CACHE, reused at every later start, kept as it is with weight_type "file", and
converted again when the cached file is incomplete or corrupt (the embedded SmolLM2 Q4_1 file)."""

from __future__ import annotations

import logging

import pytest

from tinyagent.engine import llama_weights
from tinyagent.engine.llama_weights import auto_type, file_type, target_type

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (make LLAMACPP=0, or its build failed)")
import llama_cpp  # noqa: E402

from tinyagent.engine.llama_runtime import LlamaRuntime  # noqa: E402
from tinyagent.models.embedded import embedded_gguf_path  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TINYAGENT_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "llama"


@pytest.fixture
def conversions(monkeypatch):
    """How many times llama.cpp's quantizer ran."""
    calls = []
    real = llama_cpp.llama_model_quantize

    def counted(*args):
        calls.append(args[1])
        return real(*args)

    monkeypatch.setattr(llama_cpp, "llama_model_quantize", counted)
    return calls


def loaded_type(runtime) -> int:
    return runtime.lib.llama_model_ftype(runtime.model)


def test_the_file_type_is_read_from_the_header(tmp_path):
    assert file_type(embedded_gguf_path()) == "q4_1"
    (tmp_path / "x.gguf").write_bytes(b"not a gguf file")
    assert file_type(tmp_path / "x.gguf") is None
    assert file_type(tmp_path / "missing.gguf") is None


def test_which_type_auto_picks():
    assert auto_type("q4_1", {"avx2", "fma"}) == "q8_0"  # Q8_0 keeps a 4-bit block's values
    assert auto_type("q4_1", {"avx2", "avx512_bf16"}) == "bf16"  # native BF16 products
    for fast in ("q4_0", "q8_0", "q4_k_m", "f16", "bf16", None):  # kernels (or a repack) exist: kept
        assert auto_type(fast, {"avx2"}) is None
    assert target_type("file", "q4_1", {"avx2"}) is None
    assert target_type("q4_0", "q4_1", {"avx2"}) == "q4_0"
    assert target_type("q8_0", "q8_0", {"avx2"}) is None  # already that type
    with pytest.raises(ValueError, match=r"^unknown weight_type 'q3': use auto, file, q8_0, q4_0, f16, bf16$"):
        target_type("q3", "q4_1", set())


def test_converted_once_cached_and_reused(cache, conversions, caplog):
    caplog.set_level(logging.WARNING, logger="tinyagent.engine.llama_weights")
    first = LlamaRuntime(embedded_gguf_path(), weight_type="auto")
    assert first.weight_type == "q8_0" and loaded_type(first) == llama_weights.FTYPES["q8_0"]
    assert first.weights_path.parent == cache and first.weights_path.name.endswith(".q8_0.gguf")
    assert len(conversions) == 1 and "converted SmolLM2-135M-Instruct.Q4_1.gguf (q4_1) to Q8_0 once" in caplog.text
    made = first.weights_path.stat().st_mtime_ns
    second = LlamaRuntime(embedded_gguf_path())
    assert second.weights_path == first.weights_path and second.weights_path.stat().st_mtime_ns == made
    assert len(conversions) == 1  # reused: no second conversion
    assert not list(cache.glob(".partial-*"))


def test_the_off_switch_keeps_the_file(cache, conversions):
    runtime = LlamaRuntime(embedded_gguf_path(), weight_type="file")
    assert runtime.weights_path == embedded_gguf_path() and runtime.weight_type is None
    assert loaded_type(runtime) == llama_weights.FTYPES["q4_1"]
    assert conversions == [] and not cache.exists()


@pytest.mark.parametrize("damage", ["truncated", "garbage of the same size", "record lost"])
def test_a_corrupt_cache_is_converted_again(cache, conversions, damage):
    entry = LlamaRuntime(embedded_gguf_path()).weights_path
    size = entry.stat().st_size
    if damage == "truncated":
        entry.write_bytes(entry.read_bytes()[: size // 3])
    elif damage == "garbage of the same size":
        entry.write_bytes(b"\0" * size)
    else:
        entry.with_suffix(".json").unlink()
    again = LlamaRuntime(embedded_gguf_path())
    assert again.weights_path == entry and entry.stat().st_size == size
    assert loaded_type(again) == llama_weights.FTYPES["q8_0"] and len(conversions) == 2
    assert again.tokenize("Hello") and again.feed(0, again.tokenize("Hello there"), 0) is not None


def test_an_unwritable_cache_runs_the_file_as_it_is(tmp_path, monkeypatch, conversions, caplog):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    monkeypatch.setenv("TINYAGENT_CACHE", str(blocker))
    runtime = LlamaRuntime(embedded_gguf_path())
    assert runtime.weights_path == embedded_gguf_path() and runtime.weight_type is None
    assert conversions == [] and "cannot write the model cache" in caplog.text
