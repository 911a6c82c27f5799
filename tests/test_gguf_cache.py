"""The GGUF conversion cache: the first load of a local GGUF file writes the converted model, later loads
read it; a changed file is converted again; a concurrent writer or an unwritable cache never breaks a load.
Every test writes under a temporary TINYAGENT_CACHE (conftest), never the user's ~/.cache."""

from __future__ import annotations

import json
import os

import pytest

from tinyagent.engine import gguf_cache
from tinyagent.engine.loading import load_hf
from tinyagent.models import embedded


@pytest.fixture
def fake_gguf(tmp_path, monkeypatch):
    """A stand-in GGUF file and a converter that records its calls and writes a minimal entry."""
    monkeypatch.setenv("TINYAGENT_CACHE", str(tmp_path / "cache"))
    source = tmp_path / "models" / "tiny.gguf"
    source.parent.mkdir()
    source.write_bytes(b"GGUF" + b"\0" * 60)
    calls: list[str] = []

    def convert(path, folder):
        calls.append(path.read_bytes().decode(errors="replace"))
        (folder / "config.json").write_text("{}")
        (folder / "model.safetensors").write_bytes(b"\0" * 2_000_000)
        (folder / "source.json").write_text(json.dumps({"gguf": str(path.resolve())}))

    monkeypatch.setattr(gguf_cache, "_convert", convert)
    return source, calls


def test_cache_folder_follows_the_environment_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("TINYAGENT_CACHE", str(tmp_path / "elsewhere"))
    assert gguf_cache.cache_root() == tmp_path / "elsewhere"
    monkeypatch.delenv("TINYAGENT_CACHE")
    assert gguf_cache.cache_root() == gguf_cache.Path.home() / ".cache" / "tinyagent"


def test_converted_once_then_read_from_the_cache_with_its_size_logged(fake_gguf, caplog):
    source, calls = fake_gguf
    with caplog.at_level("WARNING"):
        first = gguf_cache.cached_folder(source)
    assert "tiny.gguf" in caplog.text and "(2 MB;" in caplog.text and "TINYAGENT_CACHE" in caplog.text
    assert gguf_cache.cached_folder(source) == first and len(calls) == 1
    assert first.parent == gguf_cache.cache_root() / "gguf"
    assert [p.name for p in first.parent.iterdir()] == [first.name]  # no partial folder left behind


def test_a_changed_source_is_converted_again_and_the_old_entry_dropped(fake_gguf):
    source, calls = fake_gguf
    first = gguf_cache.cached_folder(source)
    source.write_bytes(b"GGUF" + b"2" * 60)  # same size: only the modification time tells
    os.utime(source, ns=(source.stat().st_atime_ns, source.stat().st_mtime_ns + 1_000_000_000))
    second = gguf_cache.cached_folder(source)
    assert second != first and len(calls) == 2 and calls[1] == "GGUF" + "2" * 60
    assert not first.exists() and [p.name for p in second.parent.iterdir()] == [second.name]


def test_another_process_finishing_first_wins_and_nothing_partial_stays(fake_gguf, monkeypatch):
    source, calls = fake_gguf
    target = gguf_cache.entry_path(source)
    convert = gguf_cache._convert

    def racing(path, folder):  # while we convert, another process renames its finished copy into place
        target.mkdir(parents=True)
        (target / "config.json").write_text('{"theirs": true}')
        convert(path, folder)

    monkeypatch.setattr(gguf_cache, "_convert", racing)
    assert gguf_cache.cached_folder(source) == target
    assert json.loads((target / "config.json").read_text()) == {"theirs": True}
    assert [p.name for p in target.parent.iterdir()] == [target.name]


def test_an_unwritable_cache_falls_back_to_converting_each_time(fake_gguf, tmp_path, monkeypatch, caplog):
    source, calls = fake_gguf
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("TINYAGENT_CACHE", str(blocker))
    with caplog.at_level("WARNING"):
        assert gguf_cache.cached_folder(source) is None
    assert "cannot write the model cache" in caplog.text and not calls


@pytest.mark.slow
def test_the_embedded_model_loads_from_the_cache_the_second_time(embedded_hf, model_cache, monkeypatch):
    """The session's first load of the embedded model filled the (temporary) cache; a second load reads
    it without converting, with the tokenizer the GGUF file itself gives and the same weights."""
    import torch
    from transformers import AutoTokenizer

    path = embedded.embedded_gguf_path()
    entry = gguf_cache.entry_path(path)
    assert entry.parent.parent == model_cache and (entry / "model.safetensors").is_file()

    def no_conversion(path, folder):
        raise AssertionError("converted again")

    monkeypatch.setattr(gguf_cache, "_convert", no_conversion)
    dtype = embedded_hf.model.dtype
    model, tokenizer = load_hf(str(path.parent), device="cpu", dtype=dtype, gguf_file=path.name)
    direct = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    text = "Thought: 周杰伦 was born in 1979.<|im_end|>\nObservation: 72"
    assert tokenizer(text)["input_ids"] == direct(text)["input_ids"]
    assert (tokenizer.chat_template, tokenizer.all_special_tokens) == (direct.chat_template, direct.all_special_tokens)
    ids = torch.tensor([direct(text)["input_ids"]])
    with torch.inference_mode():
        assert torch.equal(model(ids).logits, embedded_hf.model(ids).logits)


def test_a_full_disk_while_writing_falls_back_and_leaves_nothing_behind(fake_gguf, monkeypatch, caplog):
    source, _ = fake_gguf

    def disk_full(path, folder):
        (folder / "model.safetensors").write_bytes(b"\0" * 1000)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(gguf_cache, "_convert", disk_full)
    with caplog.at_level("WARNING"):
        assert gguf_cache.cached_folder(source) is None
    assert "No space left on device" in caplog.text
    assert list((gguf_cache.cache_root() / "gguf").iterdir()) == []


def test_partial_folders_of_killed_conversions_are_cleared_but_not_a_live_one(fake_gguf):
    source, _ = fake_gguf
    folder = gguf_cache.cache_root() / "gguf"
    stale, live = folder / ".partial-killed", folder / ".partial-running"
    for partial in (stale, live):
        partial.mkdir(parents=True)
        (partial / "model.safetensors").write_bytes(b"\0" * 100)
    hours_ago = stale.stat().st_mtime - 2 * gguf_cache.STALE_SECONDS
    os.utime(stale, (hours_ago, hours_ago))
    entry = gguf_cache.cached_folder(source)
    assert sorted(p.name for p in folder.iterdir()) == sorted([entry.name, live.name])
