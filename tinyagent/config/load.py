"""Reading a config: YAML and command-line overrides into a checked `Config`.

Mistakes are `ConfigError`s whose one-line message names the file and the key.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import types
import typing
from pathlib import Path

from ..agent import telemetry
from ..agent.protocols import PROTOCOLS
from ..agent.react import RECHECKS, SEARCHES
from ..engine.llama_runtime import INSTALL_HINT as LLAMACPP_HINT
from ..engine.llama_runtime import llamacpp_available
from ..engine.llama_weights import WEIGHT_TYPES
from ..format.step_format import INSTALL_HINT, outlines_available
from ..models.openai import GUIDED_DECODING_FIELDS, SCRATCHPAD_MODES
from ..redaction import register_args, register_secret, register_url
from ..text import clip
from ..tools.mcp.spec import spec_problem
from .schema import APPROVALS, BACKENDS, DTYPES, LANGS, RUNTIMES, SECTIONS, TOOL_NAMES, Config, ConfigError, ModelConfig

_DEVICE = re.compile(r"^(auto|cpu|mps|cuda(:\d+)?)$")
_HUB_ID = re.compile(r"^[\w.-]+(/[\w.-]+)?$")  # `name` or `org/name`


# --- loading ---------------------------------------------------------------------------------


def load_config(path: str | os.PathLike | None = None, overrides: dict | None = None) -> Config:
    """Read a YAML config (or the defaults when `path` is None), apply `overrides`, validate.

    `overrides` holds nested sections ({"agent": {"max_turns": 3}}) or dotted keys
    ({"agent.max_turns": 3}); None values are skipped, so command-line options map onto it directly.
    """
    values: dict[str, dict] = {name: {} for name in SECTIONS}
    origin: dict[str, str] = {}  # dotted key -> the file it came from ("" for an override)
    source = os.fspath(path) if path is not None else None
    if source is not None:
        _collect(_read_yaml(source), source, values, origin)
    _collect(overrides or {}, "", values, origin)
    cfg = Config(source=source)
    for name, cls in SECTIONS.items():
        setattr(cfg, name, _build_section(cls, name, values[name], origin))
    _check_values(cfg, lambda key: origin.get(key, source or ""))
    return cfg


def _read_yaml(path: str) -> dict:
    import yaml  # imported when a file is read: `tinyagent --help` does not need it

    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.load(f, Loader=_loader(yaml))
    except _AliasRefused as e:
        raise ConfigError(f"{path}: {e}") from None
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such config file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot read the config file ({type(e).__name__}: {e})") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"{path}: not valid YAML{where}: {problem}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the config must be a mapping with sections {', '.join(SECTIONS)}")
    return data


class _AliasRefused(Exception):
    """A YAML alias in a config; the message names the key and the line."""


def _loader(yaml) -> type:
    """yaml.SafeLoader that refuses aliases (`*name`) as it meets them, before anything is expanded: a config is
    small enough to write out, and nested aliases ("billion laughs") expand a few hundred bytes into gigabytes,
    or refer to themselves."""

    class NoAliases(yaml.SafeLoader):
        def __init__(self, stream):
            super().__init__(stream)
            self.keys: list[str] = []  # the keys of the node being composed, outermost first

        def compose_node(self, parent, index):
            self.keys.append(_key(index))
            try:
                if self.check_event(yaml.AliasEvent):
                    event = self.peek_event()
                    where = "".join(self.keys).lstrip(".") or "the top level"
                    raise _AliasRefused(
                        f"{where}: YAML aliases (*{event.anchor}) are not allowed in a config "
                        f"(line {event.start_mark.line + 1}); write the value out"
                    )
                return super().compose_node(parent, index)
            finally:
                self.keys.pop()

    return NoAliases


def _key(index) -> str:
    """How a node is named after its parent's name: `.key` for a mapping's value, `[n]` for a list's item."""
    if isinstance(index, int) and not isinstance(index, bool):
        return f"[{index}]"
    value = getattr(index, "value", None)
    return "." + clip(value, 60, "...") if isinstance(value, str) else ""


def _collect(data: dict, where: str, values: dict[str, dict], origin: dict[str, str]) -> None:
    """Sections ({"agent": {"max_turns": 3}}) or dotted keys ({"agent.max_turns": 3}) into `values`.

    `where` is the file name, or "" for overrides, whose None values mean "not given".
    """
    for key, value in data.items():
        section, dot, name = str(key).partition(".")
        cls = SECTIONS.get(section)
        if cls is None:
            raise ConfigError(f"{_at(where)}unknown section {section!r}; valid sections: {', '.join(SECTIONS)}")
        if not dot:
            if value is not None and not isinstance(value, dict):
                raise ConfigError(f"{_at(where)}{section}: must be a mapping of settings, not {_show(value)}")
            _collect({f"{section}.{k}": v for k, v in (value or {}).items()}, where, values, origin)
            continue
        valid = [f.name for f in dataclasses.fields(cls)]
        if name not in valid:
            raise ConfigError(f"{_at(where)}unknown key {key!r}; valid keys in {section}: {', '.join(valid)}")
        if value is not None or where:
            values[section][name], origin[key] = value, where


def _at(where: str) -> str:
    return f"{where}: " if where else ""


def _build_section(cls: type, section: str, values: dict, origin: dict[str, str]):
    hints = typing.get_type_hints(cls)
    for key, value in values.items():
        if not _fits(value, hints[key]):
            where = _at(origin.get(f"{section}.{key}", ""))
            raise ConfigError(f"{where}{section}.{key}: must be {_describe(hints[key])}, not {_show(value)}")
        if hints[key] in (float, float | None) and isinstance(value, int):
            values[key] = float(value)
    return cls(**values)


def _fits(value, hint) -> bool:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, arg) for arg in typing.get_args(hint))
    if origin is list:
        (item,) = typing.get_args(hint)
        return isinstance(value, list) and all(_fits(v, item) for v in value)
    if origin is dict:
        key, item = typing.get_args(hint)
        return isinstance(value, dict) and all(_fits(k, key) and _fits(v, item) for k, v in value.items())
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:  # YAML's .nan and .inf are floats too, and no setting means them
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return isinstance(value, hint)


def _describe(hint) -> str:
    names = {
        str: "a string",
        int: "an integer",
        float: "a finite number",
        bool: "true or false",
        type(None): "null",
        list[str]: "a list of strings",
        list[dict]: "a list of mappings",
        dict[str, str]: "a mapping of names to strings",
    }
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " or ".join(_describe(arg) for arg in typing.get_args(hint))
    return names.get(hint, str(hint))


def _show(value) -> str:
    return clip(json.dumps(value, ensure_ascii=False, default=str), 60, "...") + f" ({type(value).__name__})"


# --- checking values ---------------------------------------------------------------------------


def _check_values(cfg: Config, where: typing.Callable[[str], str]) -> None:
    m, g, a, w, v = cfg.model, cfg.generation, cfg.agent, cfg.web, cfg.serve
    choices = {
        "model.backend": (m.backend, BACKENDS),
        "model.dtype": (m.dtype, DTYPES),
        "model.runtime": (m.runtime, RUNTIMES),
        "model.weight_type": (m.weight_type, WEIGHT_TYPES),
        "model.scratchpad": (m.scratchpad, SCRATCHPAD_MODES),
        "agent.lang": (a.lang, LANGS),
        "agent.protocol": (a.protocol, PROTOCOLS),
        "agent.recheck": (a.recheck, (None, *RECHECKS)),
        "agent.search": (a.search, (None, *SEARCHES)),
        "model.guided_decoding": (m.guided_decoding, (None, *GUIDED_DECODING_FIELDS)),
        "agent.approve_mcp": (a.approve_mcp, APPROVALS),
        **{f"agent.approve.{name}": (value, APPROVALS) for name, value in a.approve.items()},
    }
    for key, (value, valid) in choices.items():
        if value not in valid:
            _fail(where, key, f"{value!r} is not one of {', '.join(map(str, valid))}")
    if not _DEVICE.match(m.device):
        _fail(where, "model.device", f"{m.device!r} is not a device (auto, cpu, cuda, cuda:N, mps)")
    minimums = {
        "agent.max_turns": (a.max_turns, 1),
        "generation.max_new_tokens": (g.max_new_tokens, 1),
        "generation.temperature": (g.temperature, 0),
        "model.max_retries": (m.max_retries, 0),
        "model.max_batch": (m.max_batch, 1),
        "model.kept_prefixes": (m.kept_prefixes, 0),
        "model.context_window": (m.context_window, 16),
        "model.kv_cells": (m.kv_cells, 16),
        "model.threads": (m.threads, 1),
        "agent.max_observation_chars": (a.max_observation_chars, 1),
        "agent.max_calls": (a.max_calls, 1),
        "generation.repetition_penalty": (g.repetition_penalty, 1),
        "generation.no_repeat_ngram_size": (g.no_repeat_ngram_size, 1),
        "generation.max_line_tokens": (g.max_line_tokens, 1),
        "model.max_response_bytes": (m.max_response_bytes, 1024),
        "web.max_question_chars": (w.max_question_chars, 1),
        "web.max_sessions": (w.max_sessions, 1),
        "web.max_runs": (w.max_runs, 1),
        "serve.max_runs": (v.max_runs, 1),
        "serve.max_waiting": (v.max_waiting, 0),
        "serve.max_request_bytes": (v.max_request_bytes, 1024),
        "serve.max_question_chars": (v.max_question_chars, 1),
    }
    for key, (value, least) in minimums.items():
        if value is not None and value < least:
            _fail(where, key, f"must be at least {least}, not {value}")
    if m.context_window and m.kv_cells and m.backend != "openai" and m.context_window > m.kv_cells:
        _fail(where, "model.context_window", f"{m.context_window} is more than model.kv_cells ({m.kv_cells}) can hold")
    if not 0 < g.top_p <= 1:
        _fail(where, "generation.top_p", f"must be in (0, 1], not {g.top_p}")
    for key, seconds in (
        ("model.timeout", m.timeout),
        ("model.deadline", m.deadline),
        ("web.session_ttl", w.session_ttl),
    ):
        if seconds <= 0:
            _fail(where, key, f"must be a positive number of seconds, not {seconds}")
    for name in a.tools:
        if name not in TOOL_NAMES:
            _fail(where, "agent.tools", f"unknown tool {name!r}; valid tools: {', '.join(TOOL_NAMES)}")
    if len(set(a.tools)) != len(a.tools):
        _fail(where, "agent.tools", f"a tool is listed twice: {a.tools}")
    if a.corpus is not None and not Path(a.corpus).expanduser().exists():
        _fail(where, "agent.corpus", f"no such folder or file: {a.corpus}")
    for key, value in (("serve.name", v.name), ("serve.api_key_env", v.api_key_env)):
        if value is not None and not value.strip():
            _fail(where, key, "must not be empty")
    if isinstance(w.store, str) and not w.store.strip():
        _fail(where, "web.store", "true (the default file) or a file name, not an empty string")
    _check_mcp_servers(a.mcp_servers, where)
    if a.search_tool is not None and not a.search_tool.strip():
        _fail(where, "agent.search_tool", "must name a tool (or be null: the first of local_search, google_search)")
    if a.otel and not telemetry.available():  # checked now, not at the first run
        _fail(where, "agent.otel", telemetry.INSTALL_HINT)
    _check_backend(m, where)


def _check_backend(m: ModelConfig, where: typing.Callable[[str], str]) -> None:
    if m.backend in ("hf", "internlm2"):
        if not m.path:
            _fail(where, "model.path", f"backend {m.backend} needs a hub id or a local model folder")
        if _looks_local(m.path) and not Path(m.path).expanduser().exists():
            _fail(where, "model.path", f"no such model folder: {m.path}")
    if m.backend == "hf" and m.gguf_file and m.path and Path(m.path).expanduser().is_dir():
        if not (Path(m.path).expanduser() / m.gguf_file).is_file():
            _fail(where, "model.gguf_file", f"no such GGUF file: {Path(m.path).expanduser() / m.gguf_file}")
    if m.gguf_file and m.backend not in ("hf", "llamacpp"):
        _fail(where, "model.gguf_file", f"is only used by backends hf and llamacpp, not {m.backend}")
    if m.backend == "llamacpp":
        if not m.path:
            _fail(where, "model.path", "backend llamacpp needs a .gguf file (or a folder and model.gguf_file)")
        gguf = Path(m.path).expanduser() / m.gguf_file if m.gguf_file else Path(m.path).expanduser()
        if not gguf.is_file():
            _fail(where, "model.gguf_file" if m.gguf_file else "model.path", f"no such GGUF file: {gguf}")
    if (m.backend == "llamacpp" or m.backend == "embedded" and m.runtime == "llamacpp") and not llamacpp_available():
        _fail(where, "model.backend" if m.backend == "llamacpp" else "model.runtime", LLAMACPP_HINT)
    register_url(m.base_url)  # its credentials are secrets before any message can show them
    if m.backend == "openai":
        if not m.base_url:
            _fail(where, "model.base_url", "backend openai needs the server URL, e.g. http://127.0.0.1:8000/v1")
        if not re.match(r"^https?://[^\s/]+", m.base_url):
            _fail(where, "model.base_url", f"{m.base_url!r} is not an http(s) URL")
        if not m.name:
            _fail(where, "model.name", "backend openai needs the served model name")
        if m.guided_decoding is not None and not outlines_available():  # checked now, not at step 1
            _fail(where, "model.guided_decoding", INSTALL_HINT)


def _check_mcp_servers(specs: list[dict], where: typing.Callable[[str], str]) -> None:
    for i, spec in enumerate(specs):
        for value in (spec.get("env") or {}).values() if isinstance(spec, dict) else ():
            register_secret(value if isinstance(value, str) else None)  # before any error or trace shows it
        if isinstance(spec, dict) and isinstance(spec.get("args"), list):
            secret_flags = spec.get("secret_args") if isinstance(spec.get("secret_args"), list) else []
            register_args(
                [a for a in spec["args"] if isinstance(a, str)], [f for f in secret_flags if isinstance(f, str)]
            )
        problem = spec_problem(spec)
        if problem:
            _fail(where, "agent.mcp_servers", f"entry {i + 1}: {problem}")


def _looks_local(path: str) -> bool:
    """True for what can only be a file-system path (a hub id is `org/name` or `name`)."""
    return (
        Path(path).expanduser().exists()
        or path.startswith((".", "/", "~", "\\"))
        or path.endswith(".gguf")
        or not _HUB_ID.match(path)
    )


def _fail(where: typing.Callable[[str], str], key: str, problem: str) -> typing.NoReturn:
    """Raise a ConfigError naming `key` and the file its value came from."""
    raise ConfigError(f"{_at(where(key))}{key}: {problem}")


def model_overrides(model: str, base_url: str | None = None, backend: str | None = None) -> dict:
    """Dotted overrides for a `--model` value: which backend serves it and where its weights are.

    With a `base_url` (or a config already on backend openai) it is the served model name.
    `embedded` is the built-in model; a local folder whose config.json says model_type
    internlm2, or a hub id containing "internlm2", is InternLM2; a path to a .gguf file runs on
    llama.cpp where it is installed (else the hf backend loads it from its folder); anything else
    is a Hugging Face model.
    """
    if base_url or backend == "openai":
        return {"model.backend": "openai", "model.name": model, "model.base_url": base_url}
    if model == "embedded":
        return {"model.backend": "embedded"}
    local = Path(model).expanduser()
    if local.suffix == ".gguf" and (local.is_file() or not local.exists()):  # a missing one: said at load_config
        if llamacpp_available():
            return {"model.backend": "llamacpp", "model.path": str(local)}
        return {"model.backend": "hf", "model.path": str(local.parent), "model.gguf_file": local.name}
    if (local / "config.json").is_file():
        try:
            model_type = json.loads((local / "config.json").read_text(encoding="utf-8")).get("model_type")
        except (OSError, ValueError, AttributeError):
            model_type = None
        return {"model.backend": "internlm2" if model_type == "internlm2" else "hf", "model.path": model}
    return {"model.backend": "internlm2" if "internlm2" in model.lower() else "hf", "model.path": model}
