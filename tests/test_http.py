"""The shared JSON client (tinyagent.jsonhttp) against real servers on 127.0.0.1: redirects carry no key to
another host, error text is redacted before it is cut."""

from __future__ import annotations

import contextlib
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from test_google_search import KEY, SerperServer

from tinyagent import redaction as secrets
from tinyagent.jsonhttp import RequestFailed, json_body, post_json
from tinyagent.tools import GoogleSearch, ToolError


class LocalServer:
    """A server on 127.0.0.1 for one handler class, running in a thread; `url` ends with `path`."""

    def __init__(self, handler: type[BaseHTTPRequestHandler], path: str):
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}{path}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class Redirector(LocalServer):
    """Answers a POST to /search with `status` and a Location header (a path on this server, or another
    URL), and a POST to any other path with `{}`; records the headers of each request."""

    def __init__(self, location: str, status: int = 307):
        self.headers: list[dict] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                owner.headers.append(dict(self.headers))
                redirect = self.path == "/search"
                self.send_response(status if redirect else 200)
                if redirect:
                    self.send_header("Location", location)
                self.send_header("Content-Length", "0" if redirect else "2")
                self.end_headers()
                if not redirect:
                    self.wfile.write(b"{}")

            def log_message(self, *args):
                pass

        super().__init__(Handler, "/search")


@pytest.fixture
def serper():
    with contextlib.closing(SerperServer()) as server:
        yield server


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_a_redirect_to_another_host_or_port_does_not_carry_the_serper_key(serper, host):
    target = serper.url.replace("127.0.0.1", host)
    hop = Redirector(target)
    try:
        with pytest.raises(ToolError, match="rejected the API key"):  # the target never saw the key
            GoogleSearch(api_key=KEY, endpoint=hop.url, max_retries=0)(search_query="Jay Chou")
    finally:
        hop.close()
    assert hop.headers[0]["X-API-KEY"] == KEY and len(serper.requests) == 1  # the POST was redirected (307)
    assert "X-API-KEY" not in serper.requests[0]["headers"]
    assert serper.requests[0]["headers"]["Content-Type"] == "application/json"


def test_a_redirect_on_the_same_server_keeps_the_key():
    hop = Redirector("/v2/search")
    try:
        response = post_json(hop.url, {"q": "x"}, {"X-API-KEY": KEY})
        assert response.status_code == 200 and json_body(response, hop.url) == {}
    finally:
        hop.close()
    assert [h.get("X-API-KEY") for h in hop.headers] == [KEY, KEY]


class TextServer(LocalServer):
    """Answers every POST with 200 and a fixed non-JSON body."""

    def __init__(self, body: str):
        data = body.encode()

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        super().__init__(Handler, "/")


SECRET = "sk-live-0123456789abcdefghijklmnopqrstu"  # 40 characters


@pytest.mark.parametrize("at", [50, 60, 70, 79])
def test_a_key_straddling_the_cut_of_a_non_json_answer_leaks_no_part(at):
    server = TextServer("x" * at + SECRET + " and more text after it")
    try:
        with secrets.secret_scope():
            secrets.register_secret(SECRET)
            with pytest.raises(RequestFailed) as e:
                json_body(post_json(server.url, {}), server.url)
    finally:
        server.close()
    message = str(e.value)
    assert "non-JSON text" in message and "x" * min(at, 60) in message
    assert not any(SECRET[:k] in message for k in range(4, len(SECRET) + 1))
