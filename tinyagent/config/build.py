"""Building what a config names: the model, the tools (MCP servers started here), the agent."""

from __future__ import annotations

import dataclasses
import logging
import os
import typing

from .. import models
from ..agent import Agent, Observations, telemetry
from ..agent.approval import Approver
from ..agent.loop import protocol_for
from ..format.step_format import require_outlines
from ..models.embedded import runtime_for
from ..redaction import register_secret
from ..text import one_line
from ..tools import Calculator, GoogleSearch, LocalSearch, mcp
from ..tools.llm_tool import LLMTool
from .schema import SERPER_KEY_ENV, Config, ConfigError

log = logging.getLogger(__name__)


def build_model(cfg: Config):
    """The model the config names. Loads weights (or connects nothing yet, for openai)."""
    m, gen = cfg.model, cfg.generation_kwargs()
    if cfg.agent.constrained and m.backend != "openai":  # fail before a slow load, not at the first step
        require_outlines()
    if m.trust_remote_code:
        log.warning(
            "trust_remote_code is on for %s: Python code from that model repository will run on "
            "this machine with your permissions. Use it only for repositories you trust.",
            m.path,
        )
    local = {"max_batch": m.max_batch, **({"kept_prefixes": m.kept_prefixes} if m.kept_prefixes is not None else {})}
    llama = {
        k: getattr(m, k) for k in ("context_window", "kv_cells", "threads", "weight_type") if getattr(m, k) is not None
    }
    if m.backend == "embedded":  # CPU unless a device is named: 135M parameters need no GPU
        device = {} if m.device == "auto" else {"device": m.device}
        runtime = embedded_runtime(cfg)
        extra = llama if runtime == "llamacpp" else {**device, "dtype": m.dtype}
        return models.default_model(runtime=runtime, **extra, **local, **gen)
    if m.backend == "llamacpp":
        return models.LlamaCppModel(gguf_path(m), **local, **llama, **gen)
    if m.backend == "hf":
        return models.HFChatModel(
            m.path,
            device=m.device,
            dtype=m.dtype,
            gguf_file=m.gguf_file,
            trust_remote_code=m.trust_remote_code,
            **local,
            **gen,
        )
    if m.backend == "internlm2":
        return models.InternLM2Chat(
            m.path, device=m.device, dtype=m.dtype, trust_remote_code=m.trust_remote_code, **local, **gen
        )
    api_key = os.environ.get(m.api_key_env) if m.api_key_env else None
    register_secret(api_key)
    return models.OpenAIChatModel(
        m.base_url,
        m.name,
        api_key=api_key,
        timeout=m.timeout,
        max_retries=m.max_retries,
        scratchpad=m.scratchpad,
        guided_decoding=m.guided_decoding,
        deadline=m.deadline,
        max_response_bytes=m.max_response_bytes,
        context_window=m.context_window,
        **gen,
    )


def embedded_runtime(cfg: Config) -> str:
    """Which runtime serves the embedded model under this config: "llamacpp" or "hf" (`runtime_for`)."""
    m = cfg.model
    return runtime_for(m.runtime, "cpu" if m.device == "auto" else m.device, m.dtype)


def gguf_path(m) -> str:
    """The .gguf file a llamacpp config names: `path` itself, or `gguf_file` inside the `path` folder."""
    return os.path.join(os.path.expanduser(m.path), m.gguf_file) if m.gguf_file else os.path.expanduser(m.path)


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
    names, notice = select_tools(cfg)
    if notice:
        log.warning(notice)
    built = []
    for name in names:
        if name == "google_search":
            built.append(GoogleSearch())
        elif name == "calculator":
            built.append(Calculator())
        else:
            try:
                built.append(LocalSearch(corpus_path=cfg.agent.corpus))
            except (ValueError, OSError) as e:
                raise ConfigError(f"agent.corpus: {one_line(e, with_type=False)}") from None
    if cfg.agent.mcp_servers:
        try:
            built += mcp.start_servers(cfg.agent.mcp_servers, taken=built)
        except mcp.MCPServerError as e:
            raise ConfigError(f"agent.mcp_servers: {e}") from None
    return built


def close_tools(tools: list) -> None:
    """Stop the MCP servers behind `tools` (`build_tools` started them)."""
    servers = {id(s): s for s in (getattr(t, "server", None) for t in tools) if s is not None}
    for server in servers.values():
        server.close()


def build_agent(cfg: Config, model=None, tools: list | None = None, **agent_kwargs):
    """An `Agent` for the config: its tools and model (each built unless given), its protocol with the
    settings the config sets (`build_protocol`), observations and hooks.

    Tools are built first so a bad corpus fails before a slow model load. When `agent.approve` /
    `agent.approve_mcp` say to ask about a tool, the agent's first hook is an `Approver` with no one to
    ask (such calls are refused) until the caller gives it someone (`approval.give_asker`: the CLI's
    terminal, the chat page's card). `agent_kwargs` (on_step, on_text, ...) are passed to `Agent` and
    win over the config.
    """
    tools = list(tools) if tools is not None else build_tools(cfg)
    model = model if model is not None else build_model(cfg)
    if cfg.agent.llm_fallback:
        tools.append(LLMTool(model, lang=None if cfg.agent.lang == "auto" else cfg.agent.lang))
    kwargs = {
        **cfg.agent.agent_kwargs(),
        **cfg.generation_kwargs(),
        "protocol": build_protocol(cfg, model),
        "observations": Observations(max_chars=cfg.agent.max_observation_chars, distill=cfg.agent.distill_observations),
        **agent_kwargs,
    }
    if cfg.agent.otel:
        kwargs["hooks"] = [*kwargs.get("hooks", []), telemetry.Tracing()]
    agent = Agent(model, tools, **kwargs)
    unknown = sorted(set(cfg.agent.approve) - set(agent.tools))
    if unknown:
        raise ConfigError(f"agent.approve: no tool named {', '.join(unknown)}; tools: {', '.join(agent.tools)}")
    policy = {
        name: cfg.agent.approve.get(name) or (cfg.agent.approve_mcp if isinstance(t, mcp.MCPTool) else "always")
        for name, t in agent.tools.items()
    }
    if any(value != "always" for value in policy.values()):  # approval goes first: it sees every call
        agent.hooks.insert(0, Approver(None, policy, default="always"))
    return agent


def build_protocol(cfg: Config, model):
    """The protocol `agent.protocol` names (for "auto", the one the model gets), with the settings the config
    sets; a setting of the other protocol is a ConfigError. Unresolved: the Agent decides the rest."""
    protocol = protocol_for(cfg.agent.protocol, model)
    own = {f.name for f in dataclasses.fields(protocol) if f.init}
    settings = cfg.agent.protocol_settings()
    if cfg.agent.search_tool is not None and "search_tool" in own:  # also the eval's retrieve-then-answer tool
        settings["search_tool"] = cfg.agent.search_tool
    other = sorted(set(settings) - own)
    if other:
        raise ConfigError(
            f"agent.{other[0]}: a setting of another protocol than {protocol.name} "
            f"(agent.protocol: {cfg.agent.protocol})"
        )
    try:
        return dataclasses.replace(protocol, **settings)
    except ValueError as e:
        raise ConfigError(f"agent: {e}") from None


def start_tracing(cfg: Config):
    """With `agent.otel`, a global TracerProvider from the OTEL_* variables unless one is set
    (`telemetry.configure`); returns it, for `stop_tracing` at exit, or None."""
    if not cfg.agent.otel:
        return None
    try:
        return telemetry.configure()
    except (ValueError, ImportError) as e:
        raise ConfigError(f"agent.otel: {e}") from None


def stop_tracing(provider) -> None:
    """Export the spans still queued by `provider` (from `start_tracing`; None: nothing), waiting at most
    `telemetry.SHUTDOWN_SECONDS`: a collector that never answers does not hold the command at exit."""
    if provider is not None:
        telemetry.shutdown(provider)
