"""Which of an agent's tools is its search tool, and where a query goes in it: what retrieve-then-answer and
the ReAct search policy search the question with."""

from __future__ import annotations

import re

from ..format.messages import history_to_messages
from .tool import Tool

#: Words that ask rather than name: left out of a question's search terms (`search_terms`).
_ASKING = re.compile(
    r"\b(?:what|which|who|whom|whose|when|where|why|how|many|much|is|are|was|were|did|does|do|the|"
    r"a|an|of|in|on|at|to|for|by|with|and|or|it|its|his|her|their|this|that|year|name|called)\b|"
    r"什么|哪一|哪个|哪里|哪年|哪|谁|多少|几|吗|呢|是|的|了|叫|在|有",
    re.IGNORECASE,
)
#: What a search tool says when it found nothing (local_search's words).
NOTHING_FOUND = re.compile(r"^\s*No results\b", re.IGNORECASE)

#: The names of the search tools retrieve-then-answer looks for, in this order (`find_search_tool`).
SEARCH_TOOLS = ("local_search", "google_search", "search")


def find_search_tool(tools, name: str | None = None) -> Tool | None:
    """The tool to search with: the one called `name` when given (None if there is none), else the first of
    `SEARCH_TOOLS` among `tools` that is a search engine's (called local_search or google_search, or saying so:
    `Tool.searches`, as the docstore's search does), else any other tool that says so, else None. A tool of
    your own that happens to be called `search` is not searched with unless named."""
    by_name = {t.name_for_model: t for t in tools}
    if name is not None:
        return by_name.get(name)
    engines = [by_name[n] for n in SEARCH_TOOLS if n in by_name] + list(by_name.values())
    return next((t for t in engines if t.name_for_model in SEARCH_TOOLS[:2] or getattr(t, "searches", False)), None)


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


#: Words that point back to something said before ("his first album", "它有多高"): a follow-up.
_POINTING_BACK = re.compile(
    r"\b(?:he|him|his|she|her|hers|it|its|they|them|their|this|that|these|those|there)\b|他|她|它|其|这|那",
    re.IGNORECASE,
)


def follow_up_query(question: str, history) -> str:
    """The query for a question in a conversation: a question that points back ("What was his first album?")
    with the naming words of the last question asked before it added ("... Jay Chou"), so the search finds
    what "his" means; any other question as it is. `history` is the agent's: (user, assistant) pairs or
    message dicts."""
    asked = [m["content"] for m in history_to_messages(history) if m["role"] == "user"]
    if not asked or not _POINTING_BACK.search(question):
        return question
    before = search_terms(asked[-1])
    return f"{question} {before}" if before else question


def search_terms(question: str) -> str:
    """A question's naming words (the words that ask, and punctuation, left out): the second query when the
    question itself found nothing."""
    return " ".join(re.sub(r"[^\w]+", " ", _ASKING.sub(" ", question)).split())
