"""Google search through the Serper API (https://serper.dev)."""

from __future__ import annotations

import os

from ..jsonhttp import Deadline, RequestFailed, json_body, post_json
from ..redaction import register_secret, register_url
from .tool import Tool, ToolError

SERPER_URL = "https://google.serper.dev/search"
KEY_ENV = "SERPER_API_KEY"
ENDPOINT_ENV = "SERPER_ENDPOINT"  # optional: a proxy or a local test server


class GoogleSearch(Tool):
    name_for_model = "google_search"
    searches = True
    name_for_human = {"en": "Google Search", "zh": "谷歌搜索"}
    description_for_model = {
        "en": "A web search engine (Google). Use it to look up public facts about people, places and events, "
        "anything current, and what is not in your own documents. Returns the top results with their snippets.",
        "zh": "一个网络搜索引擎（谷歌）。用于查询人物、地点、事件等公开事实、最新信息，以及你自己的文档中没有的内容，"
        "返回最相关结果的摘要。",
    }
    parameters = [
        {
            "name": "search_query",
            "description": {"en": "the search keywords or question", "zh": "搜索关键词或问题"},
            "required": True,
            "schema": {"type": "string"},
        }
    ]

    def __init__(
        self,
        api_key: str | None = None,
        endpoint: str | None = None,
        timeout: float = 10.0,
        max_retries: int = 2,
        num_results: int = 5,
        gl: str | None = None,
        hl: str | None = None,
        backoff: float = 0.5,
        deadline: float | None = 60.0,
    ):
        """`timeout`: seconds without an answer before a retry; `deadline`: seconds for a search in all."""
        self._api_key = api_key
        register_secret(api_key)  # a server may echo it back into results, traces and prompts
        self.endpoint = endpoint or os.environ.get(ENDPOINT_ENV) or SERPER_URL
        self.shown_endpoint = register_url(self.endpoint)
        self.deadline = deadline
        self.timeout = timeout
        self.max_retries = max_retries
        self.num_results = num_results
        self.gl, self.hl = gl, hl
        self.backoff = backoff

    def __repr__(self) -> str:  # the key stays out of reprs and tracebacks
        return f"GoogleSearch(endpoint={self.shown_endpoint!r})"

    @property
    def api_key(self) -> str | None:
        return self._api_key or os.environ.get(KEY_ENV) or None

    def call(self, search_query: str) -> str:
        key = self.api_key
        if not key:
            raise ToolError(
                f"Google search is not configured: set the {KEY_ENV} environment variable (a Serper API key)"
            )
        if not search_query.strip():
            raise ToolError("the search query is empty")
        payload = {"q": search_query, "num": self.num_results}
        payload.update({k: v for k, v in (("gl", self.gl), ("hl", self.hl)) if v})
        headers = {"X-API-KEY": key, "Content-Type": "application/json"}
        deadline = Deadline(self.deadline)
        try:
            with post_json(
                self.endpoint,
                payload,
                headers,
                timeout=self.timeout,
                max_retries=self.max_retries,
                backoff=self.backoff,
                deadline=deadline,
            ) as response:
                if response.status_code in (401, 403):
                    raise ToolError(f"Serper rejected the API key (HTTP {response.status_code}); check {KEY_ENV}")
                if response.status_code >= 400:
                    raise ToolError(f"Serper answered HTTP {response.status_code}")
                body = json_body(response, self.endpoint, deadline=deadline)
        except RequestFailed as e:
            raise ToolError(f"Google search failed: {e}") from None
        return format_results(body, self.num_results) or f"No results found for {search_query!r}."


def format_results(body: dict, limit: int = 5) -> str:
    """The useful parts of a Serper response: answer box, knowledge graph, top organic results."""
    parts = []
    box = body.get("answerBox")
    if isinstance(box, dict):
        answer = box.get("answer") or box.get("snippet") or ", ".join(box.get("snippetHighlighted") or [])
        if answer:
            parts.append(f"Answer: {answer}" + (f" ({box['title']})" if box.get("title") else ""))
    kg = body.get("knowledgeGraph")
    if isinstance(kg, dict) and kg.get("title"):
        head = kg["title"] + (f" ({kg['type']})" if kg.get("type") else "")
        lines = [head + (f": {kg['description']}" if kg.get("description") else "")]
        attributes = kg.get("attributes")
        if isinstance(attributes, dict):
            lines += [f"{k}: {v}" for k, v in list(attributes.items())[:8]]
        parts.append("\n".join(lines))
    organic = body.get("organic")
    for i, item in enumerate(organic if isinstance(organic, list) else [], 1):
        if i > limit or not isinstance(item, dict):
            break
        line = f"[{i}] {item.get('title', '').strip()}"
        if item.get("date"):
            line += f" ({item['date']})"
        if item.get("snippet"):
            line += f"\n{item['snippet'].strip()}"
        if item.get("link"):
            line += f"\n{item['link']}"
        parts.append(line)
    return "\n\n".join(parts)
