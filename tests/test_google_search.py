"""GoogleSearch against a real HTTP server on 127.0.0.1 that speaks the Serper format."""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tinyagent import ReAct
from tinyagent.tools import GoogleSearch, ToolError

#: ReAct from the first reply: these tests drive the loop itself (the working first: test_working.py)
CLASSIC = ReAct(working_first=False, search="tool")

KEY = "serper-test-key-7f3a9c"

JAY_CHOU = {
    "searchParameters": {"q": "Jay Chou birth year", "type": "search", "engine": "google"},
    "answerBox": {"title": "Jay Chou / Born", "answer": "January 18, 1979"},
    "knowledgeGraph": {
        "title": "Jay Chou",
        "type": "Taiwanese singer",
        "description": "Jay Chou is a Taiwanese singer, songwriter and record producer.",
        "attributes": {
            "Born": "January 18, 1979 (age 47 years), Linkou District, New Taipei, Taiwan",
            "Albums": "Jay, Fantasy, Ye Hui Mei",
        },
    },
    "organic": [
        {
            "title": "Jay Chou - Wikipedia",
            "link": "https://en.wikipedia.org/wiki/Jay_Chou",
            "snippet": "Jay Chou (born 18 January 1979) is a Taiwanese singer.",
            "position": 1,
        },
        {
            "title": "Jay (album)",
            "link": "https://en.wikipedia.org/wiki/Jay_(album)",
            "snippet": "Jay is the debut studio album by Jay Chou, released on 7 November 2000.",
            "position": 2,
        },
    ],
}


class SerperServer:
    """A Serper-format server. `plan` is a list of (status, body) answered in order, then the last repeats."""

    def __init__(self):
        self.requests: list[dict] = []
        self.plan: list[tuple[int, object]] = [(200, JAY_CHOU)]
        self.hold = threading.Event()  # cleared: each answer waits until it is set (a hung server)
        self.hold.set()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                server.requests.append({"path": self.path, "headers": dict(self.headers), "json": json.loads(body)})
                status, payload = server.plan[min(len(server.requests) - 1, len(server.plan) - 1)]
                server.hold.wait(60)
                if self.headers.get("X-API-KEY") != KEY:
                    status, payload = 403, {"message": "Unauthorized.", "statusCode": 403}
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/search"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def serper():
    server = SerperServer()
    yield server
    server.close()


def search_tool(server, **kw):
    return GoogleSearch(api_key=KEY, endpoint=server.url, backoff=0.01, **kw)


def test_request_format_and_result_formatting(serper):
    out = search_tool(serper)(search_query="Jay Chou birth year")
    request = serper.requests[0]
    assert request["path"] == "/search"
    assert request["headers"]["X-API-KEY"] == KEY
    assert request["headers"]["Content-Type"] == "application/json"
    assert request["json"]["q"] == "Jay Chou birth year"
    assert "Answer: January 18, 1979" in out
    assert "Jay Chou (Taiwanese singer)" in out and "Born: January 18, 1979" in out
    assert "[2] Jay (album)" in out and "debut studio album" in out
    assert "https://en.wikipedia.org/wiki/Jay_Chou" in out


def test_key_from_environment(serper, monkeypatch):
    monkeypatch.setenv("SERPER_API_KEY", KEY)
    tool = GoogleSearch(endpoint=serper.url)
    assert "Jay Chou" in tool(search_query="q")
    assert KEY not in repr(tool)


def test_optional_locale(serper):
    search_tool(serper, gl="cn", hl="zh-cn")(search_query="周杰伦")
    assert serper.requests[0]["json"]["gl"] == "cn" and serper.requests[0]["json"]["hl"] == "zh-cn"


def test_missing_key_names_the_variable(monkeypatch):
    monkeypatch.delenv("SERPER_API_KEY", raising=False)
    with pytest.raises(ToolError, match="SERPER_API_KEY"):
        GoogleSearch(endpoint="http://127.0.0.1:9/search")(search_query="q")


def test_wrong_key_403(serper):
    with pytest.raises(ToolError, match="403") as e:
        GoogleSearch(api_key="wrong-key-123", endpoint=serper.url)(search_query="q")
    assert "wrong-key-123" not in str(e.value)
    assert len(serper.requests) == 1  # 403 is not retried


def test_429_and_5xx_are_retried_then_succeed(serper):
    serper.plan = [(429, {"message": "slow down"}), (503, {}), (200, JAY_CHOU)]
    assert "Jay Chou" in search_tool(serper)(search_query="q")
    assert len(serper.requests) == 3


def test_persistent_5xx_gives_up_after_bounded_retries(serper, caplog):
    serper.plan = [(500, {"error": "boom"})]
    caplog.set_level(logging.DEBUG)
    with pytest.raises(ToolError, match="HTTP 500") as e:
        search_tool(serper, max_retries=2)(search_query="q")
    assert len(serper.requests) == 3
    assert KEY not in str(e.value) and KEY not in caplog.text


def test_non_json_body(serper):
    serper.plan = [(200, b"<html>oops</html>")]
    with pytest.raises(ToolError, match="non-JSON"):
        search_tool(serper)(search_query="q")


def test_no_results(serper):
    serper.plan = [(200, {"organic": []})]
    assert search_tool(serper)(search_query="zzqx") == "No results found for 'zzqx'."


def test_malformed_fields_do_not_crash(serper):
    serper.plan = [(200, {"organic": "not a list", "knowledgeGraph": [], "answerBox": None})]
    assert "No results" in search_tool(serper)(search_query="q")


def test_timeout(serper):
    serper.hold.clear()  # the server answers nothing until the client has given up
    try:
        with pytest.raises(ToolError, match="timeout") as e:
            search_tool(serper, timeout=0.1, max_retries=1)(search_query="q")
    finally:
        serper.hold.set()
    assert KEY not in str(e.value)


def test_connection_refused():
    with pytest.raises(ToolError, match="connection failed"):
        GoogleSearch(api_key=KEY, endpoint="http://127.0.0.1:9/search", max_retries=1, backoff=0.01)(search_query="q")


def test_failures_become_observations_in_an_agent(serper, scripted):
    from tinyagent import Agent

    serper.plan = [(500, {})]
    model = scripted(
        [
            'Action: google_search\nAction Input: {"search_query": "Jay Chou"}',
            "Final Answer: I could not search.",
            "Final Answer: I could not search.",
        ]
    )  # re-checked once
    result = Agent(model, tools=[search_tool(serper, max_retries=1)], protocol=CLASSIC).run("Jay Chou?")
    assert result.finished
    assert result.steps[0].observation.startswith("Error: Google search failed")
    assert result.steps[0].error and KEY not in result.steps[0].observation


def test_a_body_that_echoes_the_key_is_redacted_in_the_error(serper, monkeypatch):
    monkeypatch.setenv("SERPER_API_KEY", KEY)
    serper.plan = [(200, f"<html>bad key {KEY}</html>".encode())]
    with pytest.raises(ToolError, match="non-JSON") as e:
        search_tool(serper)(search_query="q")
    assert KEY not in str(e.value) and "[REDACTED]" in str(e.value)
