"""local_search on a search service: an OpenSearch or Elasticsearch index as LocalSearch's backend, for a corpus
that has outgrown one disk. `LocalSearch(index=OpenSearchIndex("http://127.0.0.1:9200", "docs"))`.

One `_search` request per query (a `multi_match` over the title and the text, the title counting twice); each
document is expected to hold the fields a passage has: `text`, and where known `file`, `heading`, `page`,
`title` (docs/search.md shows how to fill such an index from a folder). The service ranks; the tool shows the
passages and their sources as it does for a folder on disk.
"""

from __future__ import annotations

from ..jsonhttp import Deadline, RequestFailed, json_body, post_json
from ..redaction import register_secret, register_url
from .documents import Passage
from .search_index import Hit
from .tool import ToolError


class OpenSearchIndex:
    """A `SearchBackend` (local_search.py) on `url/index/_search`. `api_key`: sent as `Authorization: ApiKey ...`
    (Elasticsearch's form; OpenSearch behind a proxy takes the same header)."""

    def __init__(
        self,
        url: str,
        index: str,
        api_key: str | None = None,
        timeout: float = 10.0,
        max_retries: int = 2,
        deadline: float | None = 30.0,
        fields: tuple[str, ...] = ("title^2", "text"),
    ):
        self.url = f"{url.rstrip('/')}/{index}/_search"
        self.shown_url = register_url(self.url)
        self.index, self.fields = index, list(fields)
        self.timeout, self.max_retries, self.deadline = timeout, max_retries, deadline
        self._headers = {"Content-Type": "application/json"}
        if api_key:
            register_secret(api_key)
            self._headers["Authorization"] = f"ApiKey {api_key}"

    def __repr__(self) -> str:
        return f"OpenSearchIndex({self.shown_url!r})"

    def search(self, query: str, top_k: int) -> list[Hit]:
        payload = {
            "size": top_k,
            "query": {"multi_match": {"query": query, "fields": self.fields}},
            "_source": ["file", "heading", "page", "title", "text"],
        }
        deadline = Deadline(self.deadline)
        try:
            with post_json(
                self.url, payload, self._headers, timeout=self.timeout, max_retries=self.max_retries, deadline=deadline
            ) as response:
                if response.status_code >= 400:
                    raise ToolError(f"the search service answered HTTP {response.status_code}")
                body = json_body(response, self.url, deadline=deadline)
        except RequestFailed as e:
            raise ToolError(f"the search service failed: {e}") from None
        hits = (body.get("hits") or {}).get("hits") if isinstance(body.get("hits"), dict) else None
        if not isinstance(hits, list):
            raise ToolError("the search service answered without a hits list")
        out = []
        for hit in hits:
            source = hit.get("_source") if isinstance(hit, dict) else None
            if isinstance(source, dict) and isinstance(source.get("text"), str):
                page, score = source.get("page"), hit.get("_score")
                out.append(
                    Hit(
                        Passage(
                            str(source.get("file") or ""),
                            str(source.get("heading") or ""),
                            source["text"],
                            page if isinstance(page, int) else None,
                            str(source.get("title") or ""),
                        ),
                        float(score) if isinstance(score, (int, float)) else 0.0,
                    )
                )
        return out

    def summary(self, lang: str = "en") -> str:
        return f"搜索服务上的索引 {self.index}" if lang == "zh" else f"the index '{self.index}' on a search service"
