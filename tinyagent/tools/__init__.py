"""Tools the agent can call. Each describes itself for the prompt and validates its arguments."""
from .base import FunctionTool, Tool, ToolArgumentError, ToolError, tool
from .calculator import Calculator
from .google_search import GoogleSearch

__all__ = ["Tool", "FunctionTool", "ToolError", "ToolArgumentError", "tool", "Calculator", "GoogleSearch"]
from .local_search import CorpusError, LocalSearch  # noqa: E402
from .docstore import DocstoreLookup, DocstoreSearch, docstore_tools  # noqa: E402

__all__ += ["LocalSearch", "CorpusError", "DocstoreSearch", "DocstoreLookup", "docstore_tools"]
