"""Tools the agent can call. Each describes itself for the prompt and validates its arguments."""

from . import mcp
from .calculator import Calculator
from .corpus import CorpusError
from .docstore import DocstoreLookup, DocstoreSearch, docstore_tools
from .google_search import GoogleSearch
from .llm_tool import LLMTool
from .local_search import LocalSearch
from .mcp import MCPServerError
from .opensearch import OpenSearchIndex
from .search_index import SearchIndex
from .tool import FunctionTool, Tool, ToolArgumentError, ToolError, ToolTimeout, invoke, tool

__all__ = [
    "Tool",
    "FunctionTool",
    "ToolError",
    "ToolArgumentError",
    "ToolTimeout",
    "invoke",
    "tool",
    "Calculator",
    "GoogleSearch",
    "LocalSearch",
    "SearchIndex",
    "OpenSearchIndex",
    "CorpusError",
    "DocstoreSearch",
    "DocstoreLookup",
    "docstore_tools",
    "LLMTool",
    "MCPServer",
    "MCPServerError",
]


def __getattr__(name: str):
    """MCPServer on first use: its module brings asyncio, which `import tinyagent` does not need."""
    if name == "MCPServer":
        return mcp.MCPServer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
