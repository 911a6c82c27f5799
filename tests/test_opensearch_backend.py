"""A second backend for local_search: OpenSearchIndex against a server on 127.0.0.1 that speaks the part of the
OpenSearch / Elasticsearch `_search` API it uses (a multi_match query; hits ranked here by shared words)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tinyagent import Agent
from tinyagent.tools import LocalSearch
from tinyagent.tools.opensearch import OpenSearchIndex

KEY = "es-api-key-for-tests-5b1e"
DOCS = [
    {
        "file": "handbook/leave.md",
        "heading": "Holidays",
        "title": "handbook › Holidays",
        "text": "Holidays are booked through the HR portal at least two weeks ahead.",
    },
    {"file": "policies.pdf", "page": 7, "text": "Expenses over 500 euros need a manager's approval."},
    {"file": "handbook/it.md", "heading": "Laptops", "text": "Laptops are replaced every four years."},
]


class SearchService:
    """POST /INDEX/_search: hits whose text shares words with the query, most shared first; `answer` overrides."""

    def __init__(self):
        self.requests, self.answer = [], None
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                service.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
                status, payload = service.answer or (200, service.search(body))
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def search(self, body: dict) -> dict:
        words = set(body["query"]["multi_match"]["query"].lower().replace("?", "").split())
        scored = [(len(words & set(d["text"].lower().rstrip(".").split())), d) for d in DOCS]
        hits = [{"_score": float(n), "_source": d} for n, d in sorted(scored, key=lambda x: -x[0]) if n]
        return {"took": 1, "hits": {"total": {"value": len(hits)}, "hits": hits[: body["size"]]}}


@pytest.fixture
def service():
    s = SearchService()
    yield s
    s.server.shutdown()


def test_local_search_on_a_search_service_shows_passages_and_sources(service):
    search = LocalSearch(index=OpenSearchIndex(service.url, "company-docs", api_key=KEY), min_score_ratio=0.5)
    assert search(search_query="how are holidays booked") == (
        "[1] handbook/leave.md § Holidays\nHolidays are booked through the HR portal at least two weeks ahead."
    )
    assert search(search_query="who approves expenses over 500 euros").startswith("[1] policies.pdf p. 7\n")
    sent = service.requests[0]
    assert sent["path"] == "/company-docs/_search" and sent["auth"] == f"ApiKey {KEY}"
    assert sent["body"]["size"] == 3 and sent["body"]["query"]["multi_match"]["fields"] == ["title^2", "text"]
    assert "the index 'company-docs' on a search service" in search.description("en")
    assert KEY not in repr(search.index)


@pytest.mark.parametrize(
    "answer, message",
    [
        ((500, {"error": "boom"}), "the search service failed"),
        ((401, {"error": "unauthorized"}), "the search service answered HTTP 401"),
        ((200, b"<html>not json</html>"), "non-JSON text"),
        ((200, {"hits": "none"}), "without a hits list"),
    ],
)
def test_a_failing_service_is_an_error_observation(service, scripted, answer, message):
    service.answer = answer
    model = scripted(['Action: local_search\nAction Input: {"search_query": "holidays"}', "Final Answer: unknown"])
    tools = [LocalSearch(index=OpenSearchIndex(service.url, "docs", max_retries=0))]
    result = Agent(model, tools=tools).run("How are holidays booked?")
    assert result.steps[0].observation.startswith("Error: ") and message in result.steps[0].observation
    assert "\n" not in result.steps[0].observation


def test_hits_without_text_are_skipped(service):
    service.answer = (
        200,
        {
            "hits": {
                "hits": [
                    {"_score": "x", "_source": {"file": "a.md"}},
                    {"_score": "odd", "_source": {"text": "kept", "page": "3"}},
                ]
            }
        },
    )
    hits = OpenSearchIndex(service.url, "docs").search("anything", 3)
    assert [(h.passage.text, h.passage.page, h.score) for h in hits] == [("kept", None, 0.0)]
