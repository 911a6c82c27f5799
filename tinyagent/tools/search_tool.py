"""Which of an agent's tools is its search tool, and where a query goes in it: what retrieve-then-answer and
the ReAct search policy search the question with."""
from __future__ import annotations

from .tool import Tool

#: The names of the search tools retrieve-then-answer looks for, in this order (`find_search_tool`).
SEARCH_TOOLS = ("local_search", "google_search", "search")


def find_search_tool(tools, name: str | None = None) -> Tool | None:
    """The tool to search with: the one called `name` when given (None if there is none), else the first of
    `SEARCH_TOOLS` among `tools` (local_search, google_search, the docstore's search), else None."""
    by_name = {t.name_for_model: t for t in tools}
    if name is not None:
        return by_name.get(name)
    return next((by_name[n] for n in SEARCH_TOOLS if n in by_name), None)


def query_argument(tool: Tool) -> str:
    """The parameter a search tool takes its query in: its first required string parameter (search_query,
    entity, an MCP tool's query), else its first parameter."""
    params = tool.parameters or []
    if not params:
        raise ValueError(f"the search tool {tool.name_for_model} takes no parameter to put the question in")
    for p in params:
        if p.get("required") and (p.get("schema") or {}).get("type", "string") == "string":
            return p["name"]
    return params[0]["name"]
