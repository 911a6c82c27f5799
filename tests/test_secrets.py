"""API keys appear in no output, trace, log or error text: the real CLI through success and failure paths."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from openai_stub import OpenAIStub
from test_google_search import KEY as SERPER_KEY
from test_google_search import SerperServer

OPENAI_KEY = "sk-test-openai-5b1e0f77c2"
SEARCH_CALL = 'Thought: search\nAction: google_search\nAction Input: {"search_query": "Jay Chou"}'


def run_cli(args, tmp_path, serper_url="http://127.0.0.1:9/search", timeout=120):
    trace = tmp_path / "trace.jsonl"
    env = {
        **os.environ,
        "OPENAI_API_KEY": OPENAI_KEY,
        "SERPER_API_KEY": SERPER_KEY,
        "SERPER_ENDPOINT": serper_url,
        "HF_HUB_OFFLINE": "1",
    }
    proc = subprocess.run(
        [sys.executable, "-m", "tinyagent", *args, "--no-working-first", "--trace", str(trace)],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )
    written = trace.read_text() if trace.exists() else ""
    return proc, written


def assert_no_secret(*texts):
    for text in texts:
        assert OPENAI_KEY not in text and SERPER_KEY not in text


@pytest.fixture
def serper():
    server = SerperServer()
    yield server
    server.close()


def config_file(tmp_path, base_url, timeout=5, retries=1):
    path = tmp_path / "server.yaml"
    path.write_text(
        f"model:\n  backend: openai\n  name: stub\n  base_url: {base_url}\n  scratchpad: fold\n"
        f"  timeout: {timeout}\n  max_retries: {retries}\nagent:\n  tools: [google_search, calculator]\n"
    )
    return str(path)


@pytest.mark.parametrize("mode", [["--json"], ["--no-stream", "--verbose"], []])
def test_success_path_with_a_leaky_model_and_search_service(tmp_path, serper, mode):
    # A search service and a model that both echo the keys back must not get them printed.
    serper.plan = [(200, {"organic": [{"title": "Leak", "snippet": f"your key is {SERPER_KEY}"}]})]
    replies = [SEARCH_CALL, f"Thought: done\nFinal Answer: the key was {OPENAI_KEY} and {SERPER_KEY}"]
    with OpenAIStub(replies, require_key=OPENAI_KEY) as stub:
        proc, trace = run_cli(
            ["ask", *mode, "--config", config_file(tmp_path, stub.base_url), "Jay Chou?"], tmp_path, serper.url
        )
    assert proc.returncode == 0, proc.stderr
    assert "[REDACTED]" in proc.stdout and "Leak" in proc.stdout
    assert serper.requests[0]["headers"]["X-API-KEY"] == SERPER_KEY  # the key was really used
    assert_no_secret(proc.stdout, proc.stderr, trace)
    if mode == ["--json"]:
        assert json.loads(proc.stdout.strip().splitlines()[-1])["finished"] is True


def echo_key_server():
    """A server that answers 401 with the Authorization header in its message, as some APIs do."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            data = json.dumps({"error": {"message": f"Incorrect API key provided: {self.headers['Authorization']}"}})
            self.send_response(401)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data.encode())

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


@pytest.mark.parametrize("failure", ["500s", "down", "401_echo", "timeout", "search_403_echo", "search_500"])
def test_failure_paths(tmp_path, serper, failure):
    echo = echo_key_server() if failure == "401_echo" else None
    replies = [SEARCH_CALL, "Final Answer: no search"]
    stub = OpenAIStub(
        replies, require_key=OPENAI_KEY, slow_seconds=3, fail_rate=1.0 if failure == "500s" else 0.0
    ).start()
    base_url = {
        "down": "http://127.0.0.1:9/v1",
        "401_echo": echo and f"http://127.0.0.1:{echo.server_address[1]}/v1",
    }.get(failure, stub.base_url)
    if failure == "search_403_echo":
        serper.plan = [(403, {"message": f"key {SERPER_KEY} is not allowed"})]
    if failure == "search_500":
        serper.plan = [(500, {"message": f"internal error for {SERPER_KEY}"})]
    try:
        for mode in (["--json"], ["--verbose"]):
            if failure == "timeout":
                stub.push("slow", "slow")  # the first try and its one retry
            proc, trace = run_cli(
                ["ask", *mode, "--config", config_file(tmp_path, base_url, timeout=1), "Jay Chou?"],
                tmp_path,
                serper.url,
            )
            assert_no_secret(proc.stdout, proc.stderr, trace)
            if failure.startswith("search"):
                assert proc.returncode == 0 and "Error: " in (proc.stdout + trace)
            else:
                assert proc.returncode == 1
                assert "tinyagent: error:" in proc.stderr and "Traceback" not in proc.stderr.split("\n")[0]
                if mode == ["--json"]:
                    assert "Traceback" not in proc.stderr
    finally:
        stub.close()
        if echo:
            echo.shutdown()
            echo.server_close()


def test_usage_errors_do_not_leak(tmp_path):
    proc, trace = run_cli(["ask", "--tools", f"nope,{OPENAI_KEY}", "hi"], tmp_path)
    assert proc.returncode == 2
    assert_no_secret(proc.stdout, proc.stderr, trace)


# --- credentials in URLs ---------------------------------------------------------------------------

URL_PASSWORD, URL_KEY = "hunter2-pw-8841", "qk-77889900aa"
CRED_URL = f"http://bob:{URL_PASSWORD}@127.0.0.1:9/v1?api-key={URL_KEY}&model=x"


def test_any_urls_credentials_are_stripped_from_what_is_shown():
    from tinyagent.redaction import redact, secret_scope

    with secret_scope(fresh=True):
        text = (
            f"calling {CRED_URL} and https://ghp_token1234@github.com/x?access_token=zz99&sig=ab12"
            "&author=me&page=2, then mailto:someone@example.org"
        )
        assert redact(text) == (
            "calling http://[REDACTED]@127.0.0.1:9/v1?api-key=[REDACTED]&model=x and "
            "https://[REDACTED]@github.com/x?access_token=[REDACTED]&sig=[REDACTED]&author=me"
            "&page=2, then mailto:someone@example.org"
        )


def test_a_base_urls_credentials_become_secrets_of_the_model(caplog):
    import logging

    from tinyagent.jsonhttp import RequestFailed
    from tinyagent.models import OpenAIChatModel
    from tinyagent.redaction import redact, secret_scope

    caplog.set_level(logging.DEBUG)
    with secret_scope(fresh=True):
        model = OpenAIChatModel(CRED_URL.split("?")[0] + f"?api-key={URL_KEY}", "m", max_retries=0, timeout=2)
        with pytest.raises(RequestFailed) as e:
            model.generate([{"role": "user", "content": "hi"}])
        shown = [repr(model), str(e.value), caplog.text, redact(f"the password is {URL_PASSWORD}, key {URL_KEY}")]
    for text in shown:
        assert URL_PASSWORD not in text and URL_KEY not in text
    assert "127.0.0.1:9" in str(e.value) and "[REDACTED]" in repr(model)


def test_credentials_in_the_base_url_appear_in_no_output(tmp_path):
    proc, trace = run_cli(["ask", "--base-url", CRED_URL, "--model", "m", "--verbose", "hi"], tmp_path)
    assert proc.returncode == 1 and "127.0.0.1:9" in proc.stderr
    for text in (proc.stdout, proc.stderr, trace):
        assert URL_PASSWORD not in text and URL_KEY not in text and "bob:" not in text


@pytest.mark.parametrize("at", [170, 185, 199])
def test_a_key_straddling_the_cut_of_a_server_error_leaks_no_part(at):
    from tinyagent.models.sse import error_detail
    from tinyagent.redaction import register_secret, secret_scope

    key = "sk-echoed-0123456789abcdefghijklmnopqrstuvwxyz"
    with secret_scope(fresh=True):
        register_secret(key)
        detail = error_detail({"error": {"message": "y" * at + key + " is not valid"}})
    assert detail.startswith("y" * min(at, 197)) and not any(key[:k] in detail for k in range(4, len(key) + 1))
