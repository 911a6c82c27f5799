"""YAML config: schema, defaults, overrides, one-line errors naming key and file, and building."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from tinyagent import config
from tinyagent.config import ConfigError, load, load_config, model_overrides, select_tools
from tinyagent.models import embedded
from tinyagent.redaction import redact

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = sorted((ROOT / "configs").glob("*.yaml"))


def write(tmp_path, text: str, name: str = "c.yaml") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def error_of(*args, **kwargs) -> str:
    with pytest.raises(ConfigError) as e:
        load_config(*args, **kwargs)
    message = str(e.value)
    assert "\n" not in message
    return message


def test_defaults_are_the_embedded_model_with_all_tools():
    cfg = load_config()
    assert cfg.model.backend == "embedded" and cfg.model.trust_remote_code is False
    assert cfg.agent.tools == ["google_search", "calculator", "local_search"]
    assert cfg.generation_kwargs() == {"max_new_tokens": 512, "temperature": 0.0, "top_p": 1.0}
    assert cfg.agent.agent_kwargs() == {"lang": "auto", "max_turns": 5}
    assert (cfg.agent.max_observation_chars, cfg.agent.llm_fallback, cfg.agent.distill_observations) == (
        4000,
        False,
        False,
    )
    assert cfg.agent.protocol == "react" and cfg.agent.protocol_settings() == {}  # the protocol's own defaults


def test_default_yaml_matches_the_built_in_defaults():
    assert load_config(ROOT / "configs" / "default.yaml").to_dict() == load_config().to_dict()


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_every_shipped_config_validates(path):
    cfg = load_config(path)
    assert cfg.source == str(path)
    assert cfg.model.trust_remote_code is False
    if cfg.model.backend in ("hf", "internlm2"):
        assert "/" in cfg.model.path  # a hub id: loading it is the model worker's job


def test_shipped_model_configs_name_the_expected_models():
    expected = {
        "default.yaml": ("embedded", None),
        "internlm2-chat-1_8b.yaml": ("internlm2", "internlm/internlm2-chat-1_8b"),
        "internlm2-chat-7b.yaml": ("internlm2", "internlm/internlm2-chat-7b"),
        "qwen2.5-1.5b-instruct.yaml": ("hf", "Qwen/Qwen2.5-1.5B-Instruct"),
    }
    for name, (backend, path) in expected.items():
        cfg = load_config(ROOT / "configs" / name)
        assert (cfg.model.backend, cfg.model.path) == (backend, path)


def test_file_values_then_overrides_win(tmp_path):
    path = write(tmp_path, "agent:\n  max_turns: 3\n  lang: zh\ngeneration:\n  temperature: 1\n")
    cfg = load_config(path)
    assert (cfg.agent.max_turns, cfg.agent.lang, cfg.agent.tools) == (3, "zh", list(config.TOOL_NAMES))
    assert cfg.generation.temperature == 1.0 and isinstance(cfg.generation.temperature, float)
    cfg = load_config(path, {"agent": {"max_turns": 7}, "generation.top_p": 0.5, "agent.lang": None})
    assert (cfg.agent.max_turns, cfg.generation.top_p, cfg.agent.lang) == (7, 0.5, "zh")


def test_an_empty_file_means_the_defaults(tmp_path):
    assert load_config(write(tmp_path, "# nothing\n")).to_dict() == load_config().to_dict()


def test_unknown_keys_name_the_key_and_the_file(tmp_path):
    path = write(tmp_path, "model:\n  backend: embedded\n  pth: x\n")
    message = error_of(path)
    assert path in message and "'model.pth'" in message and "valid keys in model" in message and "path" in message
    message = error_of(write(tmp_path, "agents:\n  max_turns: 3\n", "d.yaml"))
    assert "'agents'" in message and "model, generation, agent" in message
    assert "'agent.turns'" in error_of(None, {"agent.turns": 2})


@pytest.mark.parametrize(
    "overrides, words",
    [
        ({"agent.lang": "fr"}, ["agent.lang", "'fr'", "auto, en, zh"]),
        ({"agent.max_turns": -1}, ["agent.max_turns", "at least 1", "-1"]),
        ({"agent.max_turns": 0}, ["agent.max_turns", "at least 1"]),
        ({"agent.max_turns": "five"}, ["agent.max_turns", "an integer", '"five"']),
        ({"agent.max_turns": True}, ["agent.max_turns", "an integer"]),
        ({"model.backend": "onnx"}, ["model.backend", "embedded, hf, internlm2, llamacpp, openai"]),
        ({"model.runtime": "onnx"}, ["model.runtime", "auto, llamacpp, hf"]),
        ({"model.backend": "llamacpp"}, ["model.path", "backend llamacpp needs a .gguf file"]),
        (
            {"model.backend": "llamacpp", "model.path": "/no/such.gguf"},
            ["model.path", "no such GGUF file: /no/such.gguf"],
        ),
        ({"model.context_window": 4}, ["model.context_window", "at least 16"]),
        ({"model.threads": 0}, ["model.threads", "at least 1"]),
        ({"agent.tools": ["calculator", "web"]}, ["unknown tool 'web'", "google_search, calculator, local_search"]),
        ({"agent.tools": "calculator"}, ["agent.tools", "a list of strings"]),
        ({"agent.tools": ["calculator", "calculator"]}, ["agent.tools", "twice"]),
        ({"generation.temperature": -0.1}, ["generation.temperature", "at least 0"]),
        ({"generation.top_p": 0}, ["generation.top_p", "(0, 1]"]),
        ({"generation.max_new_tokens": 2.5}, ["generation.max_new_tokens", "an integer"]),
        ({"model.device": "gpu0"}, ["model.device", "'gpu0'"]),
        ({"model.dtype": "int4"}, ["model.dtype", "float16"]),
        ({"model.trust_remote_code": "yes"}, ["model.trust_remote_code", "true or false"]),
        ({"model.backend": "hf"}, ["model.path", "backend hf needs"]),
        ({"model.backend": "openai", "model.name": "m"}, ["model.base_url", "needs the server URL"]),
        ({"model.backend": "openai", "model.base_url": "localhost:8000"}, ["model.base_url", "not an http(s) URL"]),
        ({"model.backend": "openai", "model.base_url": "http://127.0.0.1:1/v1"}, ["model.name"]),
        (
            {"model.backend": "internlm2", "model.path": "internlm/x", "model.gguf_file": "a.gguf"},
            ["model.gguf_file", "only used by backends hf and llamacpp"],
        ),
        ({"model.backend": "hf", "model.path": "./no/such/folder"}, ["model.path", "no such model folder"]),
        ({"agent.corpus": "/no/such/corpus.jsonl"}, ["agent.corpus", "no such folder or file"]),
        ({"model": "hf"}, ["model", "mapping"]),
        ({"model.timeout": float("nan")}, ["model.timeout", "a finite number", "NaN"]),
        ({"model.timeout": float("inf")}, ["model.timeout", "a finite number", "Infinity"]),
        ({"generation.temperature": float("inf")}, ["generation.temperature", "a finite number"]),
        ({"serve.max_runs": 0}, ["serve.max_runs", "at least 1"]),
        ({"serve.max_request_bytes": 10}, ["serve.max_request_bytes", "at least 1024"]),
        ({"serve.name": " "}, ["serve.name", "must not be empty"]),
        ({"web.store": ""}, ["web.store", "true (the default file) or a file name"]),
        ({"web.store": 1}, ["web.store", "true or false or a string"]),
    ],
)
def test_bad_values_are_one_line_errors_naming_the_key(overrides, words):
    message = error_of(None, overrides)
    for word in words:
        assert word in message


def test_a_bad_value_blames_the_file_it_came_from(tmp_path):
    path = write(tmp_path, "agent:\n  lang: fr\n")
    assert error_of(path).startswith(f"{path}: agent.lang:")
    assert error_of(path, {"agent.max_turns": 0}).startswith(f"{path}: agent.lang:")
    assert error_of(write(tmp_path, "", "ok.yaml"), {"agent.max_turns": 0}).startswith("agent.max_turns:")


def test_yaml_nan_and_inf_are_refused(tmp_path):
    assert "model.timeout: must be a finite number" in error_of(write(tmp_path, "model:\n  timeout: .nan\n"))
    assert "model.timeout: must be a finite number" in error_of(write(tmp_path, "model:\n  timeout: .inf\n"))


def test_unreadable_files_are_config_errors(tmp_path):
    assert "no such config file" in error_of(tmp_path / "missing.yaml")
    message = error_of(write(tmp_path, "model:\n  backend: [hf\n"))
    assert "not valid YAML" in message and "line" in message
    assert "must be a mapping" in error_of(write(tmp_path, "- a\n- b\n", "list.yaml"))


def laughs(levels: int) -> str:
    """A "billion laughs" config: each level an alias list of nine of the level before (385 bytes at nine levels)."""
    lines = ['  a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    names = "abcdefghij"
    for prev, name in zip(names, names[1:levels]):
        lines.append(f"  {name}: &{name} [{', '.join([f'*{prev}'] * 9)}]")
    return "agent:\n" + "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    "text, where",
    [
        (laughs(9), "agent.b[0]: YAML aliases (*a)"),  # 9^9 strings once expanded: 35 s, 3 GB, then MemoryError
        (laughs(4), "agent.b[0]: YAML aliases (*a)"),
        ("agent:\n  tools: &t [calculator, *t]\n", "agent.tools[1]: YAML aliases (*t)"),  # itself
        ("model: &m\n  backend: embedded\nagent:\n  <<: *m\n", "agent.<<: YAML aliases (*m)"),  # a merge key
    ],
)
def test_yaml_aliases_are_refused_with_one_line_naming_the_file_and_key(tmp_path, text, where):
    path = write(tmp_path, text)
    message = error_of(path)
    assert message.startswith(f"{path}: {where} are not allowed in a config (line ") and "\n" not in message
    assert "lol" not in message and "Circular" not in message  # nothing expanded is shown


def test_an_anchor_without_an_alias_is_plain_yaml(tmp_path):
    assert load_config(write(tmp_path, "agent:\n  max_turns: &turns 3\n")).agent.max_turns == 3


def test_a_llamacpp_config_without_llama_cpp_installed_says_how_to_install_it(monkeypatch, tmp_path):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    monkeypatch.setattr(load, "llamacpp_available", lambda: False)
    for overrides, key in (
        ({"model.backend": "llamacpp", "model.path": str(gguf)}, "model.backend"),
        ({"model.runtime": "llamacpp"}, "model.runtime"),
    ):
        message = error_of(None, overrides)
        assert message.startswith(f"{key}: the llama.cpp backend needs llama-cpp-python") and "\n" not in message
    assert model_overrides(str(gguf)) == {
        "model.backend": "hf",
        "model.path": str(tmp_path),
        "model.gguf_file": "m.gguf",
    }
    assert "model.gguf_file: no such GGUF file" in error_of(None, model_overrides(str(tmp_path / "none.gguf")))
    monkeypatch.setattr(load, "llamacpp_available", lambda: True)
    assert model_overrides(str(gguf)) == {"model.backend": "llamacpp", "model.path": str(gguf)}
    assert "model.path: no such GGUF file" in error_of(None, model_overrides(str(tmp_path / "none.gguf")))


def test_llamacpp_settings_that_cannot_work_together_are_one_line_errors(monkeypatch, tmp_path):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    monkeypatch.setattr(load, "llamacpp_available", lambda: True)
    base = {"model.backend": "llamacpp", "model.path": str(gguf)}
    assert error_of(None, {**base, "model.kv_cells": 256, "model.context_window": 1024}) == (
        "model.context_window: 1024 is more than model.kv_cells (256) can hold"
    )
    assert "model.weight_type: 'q3' is not one of auto, file, q8_0" in error_of(
        None, {**base, "model.weight_type": "q3"}
    )
    assert load_config(None, {**base, "model.kv_cells": 256, "model.weight_type": "file"}).model.kv_cells == 256


def test_model_overrides_pick_the_backend(tmp_path):
    internlm = tmp_path / "my-internlm"
    internlm.mkdir()
    (internlm / "config.json").write_text(json.dumps({"model_type": "internlm2"}))
    llama = tmp_path / "my-llama"
    llama.mkdir()
    (llama / "config.json").write_text(json.dumps({"model_type": "llama"}))
    gguf = tmp_path / "m.Q4.gguf"
    gguf.write_bytes(b"GGUF")
    assert model_overrides(str(internlm)) == {"model.backend": "internlm2", "model.path": str(internlm)}
    assert model_overrides(str(llama)) == {"model.backend": "hf", "model.path": str(llama)}
    assert model_overrides("internlm/internlm2-chat-1_8b")["model.backend"] == "internlm2"
    assert model_overrides("Qwen/Qwen2.5-1.5B-Instruct") == {
        "model.backend": "hf",
        "model.path": "Qwen/Qwen2.5-1.5B-Instruct",
    }
    assert model_overrides(str(gguf))["model.backend"] in ("hf", "llamacpp")  # see the test above
    assert model_overrides("embedded") == {"model.backend": "embedded"}
    assert model_overrides("served", base_url="http://h:1/v1") == {
        "model.backend": "openai",
        "model.name": "served",
        "model.base_url": "http://h:1/v1",
    }
    assert model_overrides("served", backend="openai")["model.name"] == "served"
    cfg = load_config(None, {k: v for k, v in model_overrides(str(internlm)).items()})
    assert (cfg.model.backend, cfg.model.path) == ("internlm2", str(internlm))


def test_select_tools_falls_back_to_local_search_without_a_serper_key(tmp_path):
    cfg = load_config()
    names, notice = select_tools(cfg, env={})
    assert names == ["calculator", "local_search"]
    assert "SERPER_API_KEY" in notice and "local_search" in notice
    assert select_tools(cfg, env={"SERPER_API_KEY": "k" * 20}) == (list(config.TOOL_NAMES), None)
    only_google = load_config(None, {"agent.tools": ["google_search", "calculator"]})
    assert select_tools(only_google, env={})[0] == ["local_search", "calculator"]
    assert select_tools(load_config(None, {"agent.tools": ["calculator"]}), env={}) == (["calculator"], None)


def test_build_tools_uses_the_configured_corpus(tmp_path, monkeypatch):
    monkeypatch.delenv("SERPER_API_KEY", raising=False)
    corpus = tmp_path / "notes.jsonl"
    corpus.write_text(json.dumps({"title": "Zorblat", "text": "The zorblat festival is held in Quenton."}) + "\n")
    tools = config.build_tools(load_config(None, {"agent.tools": ["local_search"], "agent.corpus": str(corpus)}))
    assert [t.name_for_model for t in tools] == ["local_search"]
    assert "Quenton" in tools[0](search_query="zorblat festival")
    bad = tmp_path / "bad.jsonl"
    bad.write_text("this is not json\n")
    with pytest.raises(ConfigError) as e:
        config.build_tools(load_config(None, {"agent.tools": ["local_search"], "agent.corpus": str(bad)}))
    assert str(e.value).startswith("agent.corpus:") and "\n" not in str(e.value)


def test_build_tools_logs_the_fallback_once(monkeypatch, caplog):
    monkeypatch.delenv("SERPER_API_KEY", raising=False)
    with caplog.at_level(logging.WARNING, logger="tinyagent"):
        tools = config.build_tools(load_config())
    assert sorted(t.name_for_model for t in tools) == ["calculator", "local_search"]
    assert [r.getMessage() for r in caplog.records].count(select_tools(load_config(), env={})[1]) == 1


class Recorder:
    """Stands in for a model class: records how it was constructed."""

    made: list = []

    def __init__(self, *args, **kwargs):
        Recorder.made.append((args, kwargs))


def test_build_model_maps_each_backend(monkeypatch, tmp_path, caplog):
    from tinyagent import models as llm

    for name in ("HFChatModel", "InternLM2Chat", "OpenAIChatModel", "default_model", "LlamaCppModel"):
        monkeypatch.setitem(vars(llm), name, Recorder)
    monkeypatch.setattr(embedded, "llamacpp_available", lambda: True)
    monkeypatch.setattr(load, "llamacpp_available", lambda: True)
    Recorder.made = []
    gen = {"max_new_tokens": 64, "temperature": 0.0, "top_p": 1.0}
    local = {"max_batch": 8}  # kept_prefixes null: the backend's own (16 on transformers, max_batch on llama.cpp)
    config.build_model(load_config(None, {"generation.max_new_tokens": 64}))
    assert Recorder.made[-1] == ((), {"runtime": "llamacpp", "weight_type": "auto", **local, **gen})
    config.build_model(load_config(None, {"generation.max_new_tokens": 64, "model.runtime": "hf"}))
    assert Recorder.made[-1] == ((), {"runtime": "hf", "dtype": "auto", **local, **gen})
    config.build_model(
        load_config(
            None,
            {"generation.max_new_tokens": 64, "model.device": "cuda", "model.max_batch": 32, "model.kept_prefixes": 64},
        )
    )
    assert Recorder.made[-1] == (
        (),
        {"runtime": "hf", "device": "cuda", "dtype": "auto", "max_batch": 32, "kept_prefixes": 64, **gen},
    )
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    config.build_model(
        load_config(
            None,
            {"model.backend": "llamacpp", "model.path": str(gguf), "model.threads": 1, "generation.max_new_tokens": 64},
        )
    )
    assert Recorder.made[-1] == ((str(gguf),), {"threads": 1, "weight_type": "auto", **local, **gen})
    config.build_model(
        load_config(
            None,
            {
                "model.backend": "hf",
                "model.path": "org/m",
                "model.gguf_file": "m.gguf",
                "model.device": "cpu",
                "generation.max_new_tokens": 64,
            },
        )
    )
    assert Recorder.made[-1] == (
        ("org/m",),
        {"device": "cpu", "dtype": "auto", "gguf_file": "m.gguf", "trust_remote_code": False, **local, **gen},
    )
    with caplog.at_level(logging.WARNING, logger="tinyagent"):
        config.build_model(
            load_config(
                ROOT / "configs" / "internlm2-chat-1_8b.yaml",
                {"model.trust_remote_code": True, "generation.max_new_tokens": 64},
            )
        )
    assert Recorder.made[-1] == (
        ("internlm/internlm2-chat-1_8b",),
        {"device": "auto", "dtype": "auto", "trust_remote_code": True, **local, **gen},
    )
    warning = " ".join(r.getMessage() for r in caplog.records)
    assert "trust_remote_code" in warning and "code from that model repository will run on this machine" in warning


def test_build_model_reads_the_api_key_from_the_named_variable_and_treats_it_as_secret(monkeypatch):
    from tinyagent import models as llm

    monkeypatch.setitem(vars(llm), "OpenAIChatModel", Recorder)
    monkeypatch.setenv("MY_SERVER_TOKEN", "tok-very-secret-123")
    Recorder.made = []
    config.build_model(
        load_config(
            ROOT / "configs" / "openai-compatible.yaml", {"model.api_key_env": "MY_SERVER_TOKEN", "model.timeout": 5}
        )
    )
    args, kwargs = Recorder.made[-1]
    assert args == ("http://127.0.0.1:23333/v1", "internlm2-chat-7b")
    assert kwargs["api_key"] == "tok-very-secret-123" and kwargs["timeout"] == 5.0 and kwargs["scratchpad"] == "fold"
    assert redact("key tok-very-secret-123") == "key [REDACTED]"


def test_build_agent_takes_its_settings_from_the_config(scripted, monkeypatch):
    monkeypatch.delenv("SERPER_API_KEY", raising=False)
    cfg = load_config(
        None,
        {
            "agent.lang": "zh",
            "agent.max_turns": 2,
            "agent.tools": ["calculator"],
            "generation.max_new_tokens": 33,
            "agent.max_observation_chars": 100,
            "agent.working_first": False,
        },
    )
    model = scripted(["Final Answer: 好"])
    agent = config.build_agent(cfg, model)
    assert (agent.lang, agent.max_turns, agent.observations.max_chars) == ("zh", 2, 100)
    assert list(agent.tools) == ["calculator"]
    assert agent.run("hi").answer == "好"
    assert model.calls[0]["kwargs"]["max_new_tokens"] == 33
    system = model.calls[0]["messages"][0]["content"]
    assert "请尽你所能" in system and "calculator" in system and "local_search" not in system
    assert config.build_agent(cfg, scripted([]), max_turns=4).max_turns == 4


def test_every_agent_setting_is_an_agent_keyword(scripted):
    """Each agent section key (but tools / corpus) reaches Agent under its own name."""
    import inspect

    from tinyagent import Agent

    accepted = inspect.signature(Agent).parameters
    assert set(load_config().agent.agent_kwargs()) <= set(accepted)
    cfg = load_config(None, {"agent.llm_fallback": True, "agent.tools": ["calculator"]})
    agent = config.build_agent(cfg, scripted([]))
    assert list(agent.tools) == ["calculator", "llm_tool"]


def test_guided_decoding_for_vllm_servers(tmp_path):
    cfg = load_config(
        None,
        {
            "model.backend": "openai",
            "model.base_url": "http://127.0.0.1:1/v1",
            "model.name": "m",
            "model.guided_decoding": "structured_outputs",
        },
    )
    model = config.build_model(cfg)
    assert model.guided_decoding == "structured_outputs"
    with pytest.raises(ConfigError, match="model.guided_decoding"):
        load_config(None, {"model.guided_decoding": "grammar"})


def test_guided_decoding_without_outlines_fails_at_config_load(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *args: None if name == "outlines_core" else real(name, *args)
    )
    overrides = {"model.backend": "openai", "model.base_url": "http://127.0.0.1:1/v1", "model.name": "m"}
    with pytest.raises(ConfigError, match=r"^model.guided_decoding: .*pip install 'tinyagent\[constrained\]'$"):
        load_config(None, {**overrides, "model.guided_decoding": "structured_outputs"})
    assert load_config(None, overrides).model.guided_decoding is None


def test_reply_repetition_settings_are_checked_and_passed_only_when_set():
    cfg = load_config(
        None,
        {"generation.repetition_penalty": 1.2, "generation.no_repeat_ngram_size": 4, "generation.max_line_tokens": 32},
    )
    assert cfg.generation_kwargs() == {
        "max_new_tokens": 512,
        "temperature": 0.0,
        "top_p": 1.0,
        "repetition_penalty": 1.2,
        "no_repeat_ngram_size": 4,
        "max_line_tokens": 32,
    }
    assert set(load_config(None).generation_kwargs()) == {"max_new_tokens", "temperature", "top_p"}
    for key, bad in (("repetition_penalty", 0.5), ("no_repeat_ngram_size", 0), ("max_line_tokens", 0)):
        with pytest.raises(ConfigError, match=f"generation.{key}: must be at least 1"):
            load_config(None, {f"generation.{key}": bad})


def test_batching_settings_are_checked():
    assert (load_config(None).model.max_batch, load_config(None).model.kept_prefixes) == (8, None)
    assert load_config(None, {"model.max_batch": 1, "model.kept_prefixes": 0}).model.max_batch == 1
    for key, bad, least in (("max_batch", 0, 1), ("kept_prefixes", -1, 0)):
        with pytest.raises(ConfigError, match=f"model.{key}: must be at least {least}"):
            load_config(None, {f"model.{key}": bad})
