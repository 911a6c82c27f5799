"""One `agent.mcp_servers` entry of a config: what it may hold, checked before any server starts."""

from __future__ import annotations

from ...text import clip

INSTALL_HINT = "MCP servers need the mcp package: pip install 'tinyagent[mcp]'"


class MCPServerError(RuntimeError):
    """An MCP server could not be started, or its tools cannot be used as asked."""


#: The keys of one `agent.mcp_servers` entry, and what each must be.
SPEC_KEYS = {
    "command": "a non-empty string",
    "args": "a list of strings",
    "env": "a mapping of strings",
    "timeout": "a positive number of seconds",
    "tools": "a list of tool names",
    "secret_args": "a list of flags whose values are secrets",
}


def spec_problem(spec) -> str | None:
    """What is wrong with one `agent.mcp_servers` entry, or None when it can start a server."""
    if not isinstance(spec, dict):
        return "must be a mapping with keys " + ", ".join(SPEC_KEYS)
    unknown = [k for k in spec if k not in SPEC_KEYS]
    if unknown:
        return f"unknown key {unknown[0]!r}; valid keys: {', '.join(SPEC_KEYS)}"
    checks = {
        "command": lambda v: isinstance(v, str) and v.strip() != "",
        "args": lambda v: isinstance(v, list) and all(isinstance(a, str) for a in v),
        "env": lambda v: isinstance(v, dict) and all(isinstance(x, str) for x in (*v, *v.values())),
        "timeout": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0,
        "tools": lambda v: isinstance(v, list) and all(isinstance(a, str) for a in v),
        "secret_args": lambda v: isinstance(v, list) and all(isinstance(a, str) and a.startswith("-") for a in v),
    }
    if "command" not in spec:
        return "needs a `command` (the program that runs the server)"
    for key, value in spec.items():
        if not checks[key](value):
            shown = "[REDACTED]" if key == "env" else clip(repr(value), 60)  # env values are secrets
            return f"{key} must be {SPEC_KEYS[key]}, not {shown}"
    return None
