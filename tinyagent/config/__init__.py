"""Configuration (layer 4): a YAML file per model, turned into the model, the tools and the agent.

- schema.py: the sections and their typed settings with defaults (`Config`).
- load.py: `load_config` (YAML plus overrides, every value checked) and `model_overrides`.
- build.py: `build_model`, `build_tools`, `build_agent` (with its approval and tracing hooks), `start_tracing`,
  `stop_tracing`.
"""

from .build import (
    build_agent,
    build_model,
    build_tools,
    close_tools,
    embedded_runtime,
    select_tools,
    start_tracing,
    stop_tracing,
)
from .load import load_config, model_overrides
from .schema import (
    BACKENDS,
    DTYPES,
    LANGS,
    SERPER_KEY_ENV,
    TOOL_NAMES,
    AgentConfig,
    Config,
    ConfigError,
    GenerationConfig,
    ModelConfig,
)

__all__ = [
    "AgentConfig",
    "BACKENDS",
    "Config",
    "ConfigError",
    "DTYPES",
    "GenerationConfig",
    "LANGS",
    "ModelConfig",
    "SERPER_KEY_ENV",
    "TOOL_NAMES",
    "build_agent",
    "build_model",
    "build_tools",
    "close_tools",
    "embedded_runtime",
    "load_config",
    "model_overrides",
    "select_tools",
    "start_tracing",
    "stop_tracing",
]
