"""The CLI's approval prompt (tinyagent.terminal), through a real pseudo-terminal: `tinyagent ask` runs
as a child process whose controlling terminal is a pty this test types into, against a real
OpenAI-compatible server on 127.0.0.1 (and a real MCP server for --approve). And with no terminal."""
from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
from openai_stub import OpenAIStub
from test_cli import ROOT, TINYAGENT

WAIT_S = 60
ECHO_SERVER = str(Path(__file__).with_name("mcp_echo_server.py"))


def calc(expression: str) -> str:
    return f'Thought: compute.\nAction: calculator\nAction Input: {json.dumps({"expression": expression})}'


def echo(text: str) -> str:
    return f'Thought: say it.\nAction: echo\nAction Input: {json.dumps({"text": text})}'


class Terminal:
    """`tinyagent` in a child process on a pty: `expect` reads until a text appears, `type` sends a line."""

    def __init__(self, args: list[str], env: dict | None = None):
        environment = {k: v for k, v in os.environ.items() if k not in ("SERPER_API_KEY", "OPENAI_API_KEY")}
        environment.update({"HF_HUB_OFFLINE": "1", **(env or {})})
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: its stdin, stdout, stderr and /dev/tty are the pty
            os.chdir(ROOT)
            os.execve(TINYAGENT, [TINYAGENT, *args], environment)
        self.output = ""
        self._seen = 0

    def _read(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return True
        try:
            data = os.read(self.fd, 4096)
        except OSError:  # EIO: the child closed the terminal
            return False
        self.output += data.decode("utf-8", errors="replace").replace("\r\n", "\n")
        return bool(data)

    def expect(self, text: str) -> str:
        """Read until `text` appears after what the last expect saw; the output up to it."""
        deadline = time.monotonic() + WAIT_S
        while text not in self.output[self._seen:]:
            assert time.monotonic() < deadline and self._read(1.0), f"never saw {text!r} in:\n{self.output}"
        end = self.output.index(text, self._seen) + len(text)
        self._seen = end
        return self.output[:end]

    def type(self, line: str) -> None:
        os.write(self.fd, (line + "\n").encode())

    def finish(self) -> int:
        """Read to the end; the exit code."""
        while self._read(1.0):
            pass
        _, status = os.waitpid(self.pid, 0)
        os.close(self.fd)
        return os.waitstatus_to_exitcode(status)


@pytest.fixture
def approve_calculator(tmp_path) -> Path:
    path = tmp_path / "approve.yaml"
    path.write_text("agent:\n  tools: [calculator]\n  approve: {calculator: ask}\n", encoding="utf-8")
    return path


def test_edit_with_arguments_that_do_not_fit_is_asked_again_then_runs(approve_calculator):
    with OpenAIStub(replies=[calc("6*7"), "Final Answer: 48"]) as stub:
        term = Terminal(["ask", "--config", str(approve_calculator), "--base-url", stub.base_url, "--model", "m",
                         "What is 6*7?"])
        shown = term.expect("> ")
        assert 'Action Input: {"expression": "6*7"}\nApprove calculator {"expression": "6*7"}?\n' in shown
        assert "[y] run it  [a] always run calculator  [e] edit the arguments  [n] refuse" in shown
        term.type("e")
        term.expect("as JSON (now {\"expression\": \"6*7\"}): ")
        term.type('{"expr": "6*8"}')
        assert "those arguments do not fit: bad Action Input for calculator: unknown parameter(s) 'expr'" in \
            term.expect("> ")
        term.type("e")
        term.expect("as JSON")
        term.type('{"expression": "6*8"}')
        out = term.expect("Final Answer: 48\n[")
        assert term.finish() == 0
    assert 'Action Input (edited): {"expression": "6*8"}\nObservation: 48\n' in out
    assert "Observation: 48" in stub.requests[1]["body"]["messages"][-1]["content"]


def test_refuse_sends_the_reason_to_the_model(approve_calculator):
    with OpenAIStub(replies=[calc("6*7"), "Final Answer: I was not allowed"]) as stub:
        term = Terminal(["ask", "--config", str(approve_calculator), "--base-url", stub.base_url, "--model", "m",
                         "--json", "What is 6*7?"])
        term.expect("> ")
        term.type("maybe")
        term.expect("answer y, a, e or n\n> ")
        term.type("n")
        term.expect("why, for the model (Enter: no reason): ")
        term.type("do it in your head")
        term.expect('"stop_reason": "final_answer"')
        assert term.finish() == 0
    refused = "The call to calculator was refused, so it did not run: do it in your head."
    assert refused in stub.requests[1]["body"]["messages"][-1]["content"]
    result = json.loads(term.output[term.output.index('{"question"'):].splitlines()[0])
    assert result["steps"][0]["kind"] == "refused" and result["steps"][0]["error"] == "do it in your head"


def test_approve_asks_for_mcp_tools_only_and_always_stops_asking(tmp_path):
    config = tmp_path / "mcp.yaml"
    config.write_text(json.dumps({"agent": {"tools": ["calculator"], "mcp_servers": [
        {"command": sys.executable, "args": [ECHO_SERVER], "tools": ["echo"]}]}}), encoding="utf-8")
    replies = [echo("one"), calc("2+2"), echo("two"), "Final Answer: done"]
    with OpenAIStub(replies=replies) as stub:
        term = Terminal(["ask", "--config", str(config), "--approve", "--base-url", stub.base_url, "--model", "m",
                         "Echo twice"])
        assert 'Approve echo {"text": "one"}?' in term.expect("> ")
        term.type("a")
        out = term.expect("Final Answer: done\n[")
        assert term.finish() == 0
    assert out.count("Approve ") == 1   # not for calculator (built in), not for echo again (always)
    assert "Observation: one\n" in out and "Observation: 4\n" in out and "Observation: two\n" in out


def test_without_a_terminal_the_call_is_refused_and_stderr_says_why(approve_calculator):
    with OpenAIStub(replies=[calc("6*7"), "Final Answer: unknown"]) as stub:
        done = subprocess.run([TINYAGENT, "ask", "--config", str(approve_calculator), "--base-url", stub.base_url,
                               "--model", "m", "What is 6*7?"], capture_output=True, text=True, timeout=WAIT_S,
                              stdin=subprocess.DEVNULL, start_new_session=True, cwd=ROOT,
                              env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr
    assert ("tinyagent: refused calculator: it needs approval and there is no terminal to ask on (run on a "
            "terminal, or set agent.approve: {calculator: always})") in done.stderr
    assert "Observation: The call to calculator was refused, so it did not run: it needs approval" in done.stdout
    assert "Traceback" not in done.stderr
