"""Tools from MCP (Model Context Protocol) servers.

    with MCPServer("python", ["-m", "mcp_server_time"]) as server:
        agent = Agent(model, server.tools)

- server.py: `MCPServer`, one server over stdio, and `start_servers` for a config's entries.
- tool.py: `MCPTool`, one tool of a server, typed against the small `ToolServer` protocol.
- spec.py: what a config entry may hold (`spec_problem`), and `MCPServerError`.

`MCPServer` and `start_servers` load on first use: their module brings asyncio, which a config
check or `import tinyagent` does not need.
"""

from __future__ import annotations

import importlib

from .server_tool import MCPTool
from .spec import MCPServerError, spec_problem

__all__ = ["MCPServer", "MCPServerError", "MCPTool", "spec_problem", "start_servers"]


def __getattr__(name: str):
    if name in ("MCPServer", "start_servers"):
        return getattr(importlib.import_module(".server", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
