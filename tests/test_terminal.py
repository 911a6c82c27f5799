"""The CLI's approval prompt (tinyagent.cli.terminal), through a real pseudo-terminal: `tinyagent ask` runs
as a child process whose controlling terminal is a pty this test types into, against a real
OpenAI-compatible server on 127.0.0.1 (and a real MCP server for --approve). And with no terminal."""

from __future__ import annotations

import io
import json
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from openai_stub import OpenAIStub
from test_cli import ROOT, TINYAGENT, Failing, StreamingModel, run_cli, use_model  # noqa: F401  (a fixture)

from tinyagent.agent.approval import ApprovalRequest
from tinyagent.agent.results import Step
from tinyagent.cli.terminal import TerminalApprover
from tinyagent.text import escape_controls

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
        while text not in self.output[self._seen :]:
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
        term = Terminal(
            ["ask", "--config", str(approve_calculator), "--base-url", stub.base_url, "--model", "m", "What is 6*7?"]
        )
        shown = term.expect("> ")
        assert 'Action Input: {"expression": "6*7"}\nApprove calculator {"expression": "6*7"}?\n' in shown
        assert "[y] run it  [a] always run calculator  [e] edit the arguments  [n] refuse" in shown
        term.type("e")
        term.expect("as JSON (now {\"expression\": \"6*7\"}): ")
        term.type('{"expr": "6*8"}')
        assert (
            "those arguments do not fit: bad Action Input for calculator: unknown parameter(s) 'expr'"
            in term.expect("> ")
        )
        term.type("e")
        term.expect("as JSON")
        term.type('{"expression": "6*8"}')
        out = term.expect("Final Answer: 48\n[")
        assert term.finish() == 0
    assert 'Action Input (edited): {"expression": "6*8"}\nObservation: 48\n' in out
    assert "Observation: 48" in stub.requests[1]["body"]["messages"][-1]["content"]


def test_refuse_sends_the_reason_to_the_model(approve_calculator):
    with OpenAIStub(replies=[calc("6*7"), "Final Answer: I was not allowed"]) as stub:
        term = Terminal(
            [
                "ask",
                "--config",
                str(approve_calculator),
                "--base-url",
                stub.base_url,
                "--model",
                "m",
                "--json",
                "What is 6*7?",
            ]
        )
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
    result = json.loads(term.output[term.output.index('{"question"') :].splitlines()[0])
    assert result["steps"][0]["kind"] == "refused" and result["steps"][0]["error"] == "do it in your head"


def test_approve_asks_for_mcp_tools_only_and_always_stops_asking(tmp_path):
    config = tmp_path / "mcp.yaml"
    config.write_text(
        json.dumps(
            {
                "agent": {
                    "tools": ["calculator"],
                    "mcp_servers": [{"command": sys.executable, "args": [ECHO_SERVER], "tools": ["echo"]}],
                }
            }
        ),
        encoding="utf-8",
    )
    replies = [echo("one"), calc("2+2"), echo("two"), "Final Answer: done"]
    with OpenAIStub(replies=replies) as stub:
        term = Terminal(
            ["ask", "--config", str(config), "--approve", "--base-url", stub.base_url, "--model", "m", "Echo twice"]
        )
        assert 'Approve echo {"text": "one"}?' in term.expect("> ")
        term.type("a")
        out = term.expect("Final Answer: done\n[")
        assert term.finish() == 0
    assert out.count("Approve ") == 1  # not for calculator (built in), not for echo again (always)
    assert "Observation: one\n" in out and "Observation: 4\n" in out and "Observation: two\n" in out


def test_without_a_terminal_the_call_is_refused_and_stderr_says_why(approve_calculator):
    with OpenAIStub(replies=[calc("6*7"), "Final Answer: unknown"]) as stub:
        done = subprocess.run(
            [
                TINYAGENT,
                "ask",
                "--config",
                str(approve_calculator),
                "--base-url",
                stub.base_url,
                "--model",
                "m",
                "What is 6*7?",
            ],
            capture_output=True,
            text=True,
            timeout=WAIT_S,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=ROOT,
            env={**os.environ, "HF_HUB_OFFLINE": "1"},
        )
    assert done.returncode == 0, done.stderr
    assert (
        "tinyagent: refused calculator: it needs approval and there is no terminal to ask on (run on a "
        "terminal, or set agent.approve: {calculator: always})"
    ) in done.stderr
    assert "Observation: The call to calculator was refused, so it did not run: it needs approval" in done.stdout
    assert "Traceback" not in done.stderr


# --- what reaches a terminal: no escape sequence from a model or a tool ---------------------------------

#: What a prompt-injected model or page could write to drive the terminal: OSC 52 (set the clipboard), OSC 0 (the
#: window title), clear the screen, an 8-bit CSI (C1), a bell, a backspace and a lone carriage return.
DRIVES = "\x1b]52;c;cm0gLXJmIH4=\x07\x1b]0;pwned\x07\x1b[2J\x9b31m\x08\r"


def no_control(text: str) -> bool:
    return not any(ch in text for ch in "\x1b\x07\x9b\x08\r")


def test_escape_controls_shows_them_and_keeps_text_lines_and_tabs():
    assert escape_controls("a\x1b]0;t\x07b\x9bc\x7fd\te\r\nf") == "a\\u001b]0;t\\u0007b\\u009bc\\u007fd\te\nf"
    hidden = "x\u202ey\u2066z\u200b"
    assert escape_controls(hidden) == hidden  # only where a person decides on what they read
    assert escape_controls(hidden, invisible=True) == "x\\u202ey\\u2066z\\u200b"
    assert json.loads(escape_controls(json.dumps({"a": hidden + "\x9b"}, ensure_ascii=False), invisible=True)) == {
        "a": hidden + "\x9b"
    }  # JSON's own escapes: shown JSON is still the same JSON


@pytest.mark.parametrize("stream", [True, False])
def test_the_cli_writes_no_escape_sequence_of_the_models_text(use_model, capsys, stream):
    model = use_model(StreamingModel([f"Thought: {DRIVES}look.\nFinal Answer: 42{DRIVES}"]))
    code, out, err = run_cli(capsys, "ask", "--tools", "calculator", *([] if stream else ["--no-stream"]), "Q?")
    assert code == 0 and model.calls
    assert no_control(out) and no_control(err)
    assert "Thought: \\u001b]52;c;cm0gLXJmIH4=\\u0007\\u001b]0;pwned\\u0007" in out  # shown, visibly
    assert "Final Answer: 42\\u001b]52;c;" in out


def test_json_output_escapes_what_json_leaves_as_it_is(use_model, capsys):
    use_model(StreamingModel([f"Final Answer: 42{DRIVES}\x85!"]))
    code, out, _ = run_cli(capsys, "ask", "--tools", "calculator", "--json", "Q?")
    assert code == 0 and no_control(out) and "\x85" not in out
    assert json.loads(out)["answer"] == f"42{DRIVES}\x85!"


def test_chat_history_and_errors_on_stderr_are_escaped_too(use_model, capsys, monkeypatch):
    use_model(Failing([f"Final Answer: 1{DRIVES}"], RuntimeError(f"the server said {DRIVES}"), at=1))
    monkeypatch.setattr("sys.stdin", io.StringIO("first\nsecond\n/history\n"))
    code, out, err = run_cli(capsys, "chat", "--tools", "calculator")
    assert code == 0 and "the server said \\u001b]52" in err and "A: 1\\u001b]52" in out
    assert no_control(out) and no_control(err)


class FakeTerminal:
    """What TerminalApprover._ask reads and writes: typed lines in, everything written kept."""

    def __init__(self, *lines: str):
        self.lines, self.written = [line + "\n" for line in lines], ""

    def write(self, text: str) -> None:
        self.written += text

    def flush(self) -> None:
        pass

    def readline(self) -> str:
        return self.lines.pop(0) if self.lines else ""


def test_the_approval_prompt_shows_hidden_characters_escaped_and_an_edit_of_what_it_shows_runs_the_same():
    """What the person reads is what runs: an RLO, an isolate, a zero-width space and an escape sequence in the
    arguments (or the tool's name) are shown as JSON escapes; typed back as the edit, they mean the same."""
    hidden = "notes\u202etxt.exe\u2066\u200b\x1b]0;title\x07"
    tool = SimpleNamespace(name_for_model="write\u202efile")
    request = ApprovalRequest(tool, {"path": hidden}, Step(index=0, text=""), None)
    shown = json.dumps({"path": hidden}, ensure_ascii=False)
    term = FakeTerminal("e", escape_controls(shown, invisible=True))
    verdict = TerminalApprover()._ask(term, request)
    assert not set("\u202e\u2066\u200b\x1b\x07") & set(term.written)
    assert (
        'Approve write\\u202efile {"path": "notes\\u202etxt.exe\\u2066\\u200b\\u001b]0;title\\u0007"}?' in term.written
    )
    assert verdict.decision == "edit" and json.loads(verdict.arguments) == {"path": hidden}


def test_eval_progress_and_compare_tables_show_a_models_text_escaped():
    from tinyagent.eval.progress import question_line
    from tinyagent.eval.table import shown_answer

    record = {
        "id": "q1",
        "success": False,
        "format_valid": True,
        "tool_errors": [],
        "steps": 1,
        "seconds": 1.0,
        "error": f"the server said {DRIVES}",
    }
    assert no_control(question_line(record)) and "\\u001b]52" in question_line(record)
    assert no_control(shown_answer(f"x{DRIVES}y", 200))
