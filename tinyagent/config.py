"""YAML configuration: one file per model, turned into the model, the tools and the agent.

A config has three sections: `model` (which backend and weights), `generation` (sampling
settings) and `agent` (language, turn cap, tools). Every key has a default, so an empty file
(or no file) means the embedded SmolLM2 model. Mistakes are `ConfigError`s whose one-line
message names the file and the key.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path

from .llm.openai import GUIDED_DECODING_FIELDS, GUIDED_DECODING_NEEDS, regex_engine_available
from .trace import register_secret

log = logging.getLogger(__name__)

BACKENDS = ("embedded", "hf", "internlm2", "openai")
TOOL_NAMES = ("google_search", "calculator", "local_search")
LANGS = ("auto", "en", "zh")
DTYPES = ("auto", "float32", "float16", "bfloat16")
SCRATCHPAD_MODES = ("continue", "fold")
SERPER_KEY_ENV = "SERPER_API_KEY"
_DEVICE = re.compile(r"^(auto|cpu|mps|cuda(:\d+)?)$")
_HUB_ID = re.compile(r"^[\w.-]+(/[\w.-]+)?$")  # `name` or `org/name`


class ConfigError(ValueError):
    """A configuration mistake a user made; the message is one line naming the file and key."""


@dataclass
class ModelConfig:
    backend: str = "embedded"
    path: str | None = None          # hub id or local folder (hf, internlm2)
    gguf_file: str | None = None     # a .gguf file inside `path` (hf)
    device: str = "auto"
    dtype: str = "auto"
    trust_remote_code: bool = False
    name: str | None = None          # openai: the served model name
    base_url: str | None = None      # openai: e.g. http://127.0.0.1:8000/v1
    api_key_env: str | None = "OPENAI_API_KEY"
    scratchpad: str = "continue"     # openai: continue the assistant message, or fold it into the user turn
    guided_decoding: str | None = None  # openai: structured_outputs | guided_regex (vLLM), for constrained runs
    timeout: float = 60.0
    max_retries: int = 2
    max_batch: int = 8               # hf, internlm2, embedded: generate calls run together (1: one at a time)
    kept_prefixes: int = 16          # hf, internlm2, embedded: conversations whose KV cache is kept between calls


@dataclass
class GenerationConfig:
    max_new_tokens: int = 512
    temperature: float = 0.0
    top_p: float = 1.0
    # Local models (hf, internlm2, embedded) only; null leaves them out. Within the reply, not the prompt:
    repetition_penalty: float | None = None   # > 1 lowers tokens the reply already used
    no_repeat_ngram_size: int | None = None   # bans repeating an n-gram of the reply
    max_line_tokens: int | None = None        # line budget of constrained replies (react.MAX_LINE_TOKENS)


#: AgentConfig fields that choose tools; every other field is passed to `Agent(...)` as is.
TOOL_FIELDS = ("tools", "corpus", "mcp_servers")


@dataclass
class AgentConfig:
    lang: str = "auto"
    max_turns: int = 5
    tools: list[str] = field(default_factory=lambda: list(TOOL_NAMES))
    corpus: str | None = None        # JSONL file for local_search
    mcp_servers: list[dict] = field(default_factory=list)  # [{command, args, env, timeout, tools}]
    max_observation_chars: int | None = 4000
    llm_fallback: bool = False           # offer the model itself as a tool when no tool fits
    distill_observations: bool = False   # have the model shorten long observations
    constrained: bool | None = None      # decode only valid ReAct steps; null: on for the embedded model

    def agent_kwargs(self) -> dict:
        """The settings `Agent(...)` takes, under its own keyword names."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in TOOL_FIELDS}


SECTIONS: dict[str, type] = {"model": ModelConfig, "generation": GenerationConfig, "agent": AgentConfig}


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)
    source: str | None = None        # the file it was read from

    def generation_kwargs(self) -> dict:
        """The generation settings that are set (None ones are left out, so backends without them work)."""
        return {k: v for k, v in dataclasses.asdict(self.generation).items() if v is not None}

    def to_dict(self) -> dict:
        return {name: dataclasses.asdict(getattr(self, name)) for name in SECTIONS}


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
    if cfg.agent.constrained is None:  # the embedded model follows the ReAct format only when constrained
        cfg.agent.constrained = cfg.model.backend == "embedded"
    _check_values(cfg, lambda key: origin.get(key, source or ""))
    return cfg


def _read_yaml(path: str) -> dict:
    import yaml

    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
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
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, hint)


def _describe(hint) -> str:
    names = {str: "a string", int: "an integer", float: "a number", bool: "true or false",
             type(None): "null", list[str]: "a list of strings",
             list[dict]: "a list of mappings"}
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " or ".join(_describe(arg) for arg in typing.get_args(hint))
    return names.get(hint, str(hint))


def _show(value) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return (text if len(text) <= 60 else text[:57] + "...") + f" ({type(value).__name__})"


# --- checking values ---------------------------------------------------------------------------

def _check_values(cfg: Config, where: typing.Callable[[str], str]) -> None:
    m, g, a = cfg.model, cfg.generation, cfg.agent
    choices = {"model.backend": (m.backend, BACKENDS), "model.dtype": (m.dtype, DTYPES),
               "model.scratchpad": (m.scratchpad, SCRATCHPAD_MODES), "agent.lang": (a.lang, LANGS),
               "model.guided_decoding": (m.guided_decoding, (None, *GUIDED_DECODING_FIELDS))}
    for key, (value, valid) in choices.items():
        if value not in valid:
            _fail(where, key, f"{value!r} is not one of {', '.join(map(str, valid))}")
    if not _DEVICE.match(m.device):
        _fail(where, "model.device", f"{m.device!r} is not a device (auto, cpu, cuda, cuda:N, mps)")
    minimums = {"agent.max_turns": (a.max_turns, 1), "generation.max_new_tokens": (g.max_new_tokens, 1),
                "generation.temperature": (g.temperature, 0), "model.max_retries": (m.max_retries, 0),
                "model.max_batch": (m.max_batch, 1), "model.kept_prefixes": (m.kept_prefixes, 0),
                "agent.max_observation_chars": (a.max_observation_chars, 1),
                "generation.repetition_penalty": (g.repetition_penalty, 1), "generation.no_repeat_ngram_size":
                (g.no_repeat_ngram_size, 1), "generation.max_line_tokens": (g.max_line_tokens, 1)}
    for key, (value, least) in minimums.items():
        if value is not None and value < least:
            _fail(where, key, f"must be at least {least}, not {value}")
    if not 0 < g.top_p <= 1:
        _fail(where, "generation.top_p", f"must be in (0, 1], not {g.top_p}")
    if m.timeout <= 0:
        _fail(where, "model.timeout", f"must be a positive number of seconds, not {m.timeout}")
    for name in a.tools:
        if name not in TOOL_NAMES:
            _fail(where, "agent.tools", f"unknown tool {name!r}; valid tools: {', '.join(TOOL_NAMES)}")
    if len(set(a.tools)) != len(a.tools):
        _fail(where, "agent.tools", f"a tool is listed twice: {a.tools}")
    if a.corpus is not None and not Path(a.corpus).expanduser().is_file():
        _fail(where, "agent.corpus", f"no such file: {a.corpus}")
    _check_mcp_servers(a.mcp_servers, where)
    _check_backend(m, where)


def _check_backend(m: ModelConfig, where: typing.Callable[[str], str]) -> None:
    if m.backend in ("hf", "internlm2"):
        if not m.path:
            _fail(where, "model.path", f"backend {m.backend} needs a hub id or a local model folder")
        if _looks_local(m.path) and not Path(m.path).expanduser().exists():
            _fail(where, "model.path", f"no such model folder: {m.path}")
    if m.gguf_file and m.backend != "hf":
        _fail(where, "model.gguf_file", f"is only used by backend hf, not {m.backend}")
    if m.backend == "openai":
        if not m.base_url:
            _fail(where, "model.base_url", "backend openai needs the server URL, e.g. http://127.0.0.1:8000/v1")
        if not re.match(r"^https?://[^\s/]+", m.base_url):
            _fail(where, "model.base_url", f"{m.base_url!r} is not an http(s) URL")
        if not m.name:
            _fail(where, "model.name", "backend openai needs the served model name")
        if m.guided_decoding is not None and not regex_engine_available():  # checked now, not at step 1
            _fail(where, "model.guided_decoding", GUIDED_DECODING_NEEDS)


def _check_mcp_servers(specs: list[dict], where: typing.Callable[[str], str]) -> None:
    if not specs:
        return
    from .tools.mcp import spec_problem  # the mcp SDK itself is imported only to start a server

    for i, spec in enumerate(specs):
        for value in (spec.get("env") or {}).values() if isinstance(spec, dict) else ():
            register_secret(value if isinstance(value, str) else None)  # before any error or trace shows it
        problem = spec_problem(spec)
        if problem:
            _fail(where, "agent.mcp_servers", f"entry {i + 1}: {problem}")


def _looks_local(path: str) -> bool:
    """True for what can only be a file-system path (a hub id is `org/name` or `name`)."""
    return (Path(path).expanduser().exists() or path.startswith((".", "/", "~", "\\"))
            or path.endswith(".gguf") or not _HUB_ID.match(path))


def _fail(where: typing.Callable[[str], str], key: str, problem: str) -> typing.NoReturn:
    """Raise a ConfigError naming `key` and the file its value came from."""
    raise ConfigError(f"{_at(where(key))}{key}: {problem}")


def model_overrides(model: str, base_url: str | None = None, backend: str | None = None) -> dict:
    """Dotted overrides for a `--model` value: which backend serves it and where its weights are.

    With a `base_url` (or a config already on backend openai) it is the served model name.
    `embedded` is the built-in model; a local folder whose config.json says model_type
    internlm2, or a hub id containing "internlm2", is InternLM2; a path to a .gguf file is
    loaded by the hf backend from its folder; anything else is a Hugging Face model.
    """
    if base_url or backend == "openai":
        return {"model.backend": "openai", "model.name": model, "model.base_url": base_url}
    if model == "embedded":
        return {"model.backend": "embedded"}
    local = Path(model).expanduser()
    if local.is_file() and local.suffix == ".gguf":
        return {"model.backend": "hf", "model.path": str(local.parent), "model.gguf_file": local.name}
    if (local / "config.json").is_file():
        try:
            model_type = json.loads((local / "config.json").read_text(encoding="utf-8")).get("model_type")
        except (OSError, ValueError, AttributeError):
            model_type = None
        return {"model.backend": "internlm2" if model_type == "internlm2" else "hf", "model.path": model}
    return {"model.backend": "internlm2" if "internlm2" in model.lower() else "hf", "model.path": model}


# --- building ----------------------------------------------------------------------------------

def build_model(cfg: Config):
    """The model the config names. Loads weights (or connects nothing yet, for openai)."""
    from . import llm

    m, gen = cfg.model, cfg.generation_kwargs()
    if cfg.agent.constrained and m.backend != "openai":  # fail before a slow load, not at the first step
        from .llm.constrained import require_outlines

        require_outlines()
    if m.trust_remote_code:
        log.warning("trust_remote_code is on for %s: Python code from that model repository will run on "
                    "this machine with your permissions. Use it only for repositories you trust.", m.path)
    local = {"max_batch": m.max_batch, "kept_prefixes": m.kept_prefixes}
    if m.backend == "embedded":  # CPU unless a device is named: 135M parameters need no GPU
        return llm.default_model(**({} if m.device == "auto" else {"device": m.device}), dtype=m.dtype,
                                 **local, **gen)
    if m.backend == "hf":
        return llm.HFChatModel(m.path, device=m.device, dtype=m.dtype, gguf_file=m.gguf_file,
                               trust_remote_code=m.trust_remote_code, **local, **gen)
    if m.backend == "internlm2":
        return llm.InternLM2Chat(m.path, device=m.device, dtype=m.dtype,
                                 trust_remote_code=m.trust_remote_code, **local, **gen)
    api_key = os.environ.get(m.api_key_env) if m.api_key_env else None
    register_secret(api_key)
    return llm.OpenAIChatModel(m.base_url, m.name, api_key=api_key, timeout=m.timeout,
                               max_retries=m.max_retries, scratchpad=m.scratchpad,
                               guided_decoding=m.guided_decoding, **gen)


def select_tools(cfg: Config, env: typing.Mapping[str, str] | None = None) -> tuple[list[str], str | None]:
    """The tool names to use, and a one-line notice when google_search gave way to local_search.

    Without SERPER_API_KEY google search cannot work, so the offline search takes its place
    and the agent still has a search tool.
    """
    names = list(cfg.agent.tools)
    env = os.environ if env is None else env
    if "google_search" not in names or env.get(SERPER_KEY_ENV):
        return names, None
    at = names.index("google_search")
    names.remove("google_search")
    if "local_search" not in names:
        names.insert(at, "local_search")
    return names, f"{SERPER_KEY_ENV} is not set: using the offline local_search tool instead of google_search"


def build_tools(cfg: Config):
    """Tool instances for the config (see `select_tools`); the notice, if any, is logged.

    MCP servers in `agent.mcp_servers` are started here; `close_tools` stops them.
    """
    from . import tools

    names, notice = select_tools(cfg)
    if notice:
        log.warning(notice)
    built = []
    for name in names:
        if name == "google_search":
            built.append(tools.GoogleSearch())
        elif name == "calculator":
            built.append(tools.Calculator())
        else:
            from .tools.local_search import LocalSearch

            try:
                built.append(LocalSearch(corpus_path=cfg.agent.corpus))
            except (ValueError, OSError) as e:
                raise ConfigError(f"agent.corpus: {str(e).strip().splitlines()[0]}") from None
    if cfg.agent.mcp_servers:
        from .tools.mcp import MCPServerError, start_servers

        try:
            built += start_servers(cfg.agent.mcp_servers, taken=built)
        except MCPServerError as e:
            raise ConfigError(f"agent.mcp_servers: {e}") from None
    return built


def close_tools(tools: list) -> None:
    """Stop the MCP servers behind `tools` (`build_tools` started them)."""
    servers = {id(s): s for s in (getattr(t, "server", None) for t in tools) if s is not None}
    for server in servers.values():
        server.close()


def build_agent(cfg: Config, model=None, tools: list | None = None, **agent_kwargs):
    """An `Agent` for the config: its tools and model (each built unless given) and settings.

    Tools are built first so a bad corpus fails before a slow model load. `agent_kwargs`
    (on_step, on_text, ...) are passed to `Agent` and win over the config.
    """
    from .agent import Agent

    tools = tools if tools is not None else build_tools(cfg)
    model = model if model is not None else build_model(cfg)
    kwargs = {**cfg.agent.agent_kwargs(), **cfg.generation_kwargs(), **agent_kwargs}
    return Agent(model, tools, **kwargs)
