"""Ctrl-C (SIGINT) in a real `tinyagent` process stops promptly, reports, keeps the trace, exits 130."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from openai_stub import OpenAIStub

CALL = 'Thought: compute\nAction: calculator\nAction Input: {"expression": "6*7"}'


def start_cli(args, tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    env.pop("SERPER_API_KEY", None)
    return subprocess.Popen(
        [sys.executable, "-m", "tinyagent", *args, "--trace", str(tmp_path / "t.jsonl")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def communicate_or_kill(proc: subprocess.Popen, timeout: float) -> tuple[str, str]:
    """proc.communicate, killing the process when it does not end in time (the test fails, nothing is left)."""
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise


def wait_for(predicate, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("command", ["ask", "chat"])
def test_ctrl_c_during_generation(tmp_path, command):
    # The second model call hangs: the first step (a tool call) is done when Ctrl-C arrives.
    with OpenAIStub([CALL, "Final Answer: 42"], slow_seconds=30) as stub:
        stub.fault_for = lambda body: "slow" if len(stub.requests) >= 1 else None
        args = [command, "--base-url", stub.base_url, "--model", "stub", "--tools", "calculator", "--no-working-first"]
        proc = start_cli(args + (["What is 6 times 7?"] if command == "ask" else []), tmp_path)
        if command == "chat":
            proc.stdin.write("What is 6 times 7?\n")
            proc.stdin.flush()
        assert wait_for(lambda: stub.chat_requests >= 2), "the second model call never started"
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = communicate_or_kill(proc, timeout=20)
        stopped_after = time.monotonic() - sent
    assert proc.returncode == 130, err
    assert stopped_after < 10  # promptly: not after the 30 s the server would take
    assert "Observation: 42" in out and "Interrupted after 1 step" in out
    assert "Traceback" not in err
    events = [json.loads(line) for line in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events] == ["start", "step", "interrupted"]
    assert events[1]["observation"] == "42"


def test_the_next_run_starts_normally(tmp_path):
    with OpenAIStub([CALL, "Final Answer: 42"]) as stub:
        proc = start_cli(
            ["ask", "--base-url", stub.base_url, "--model", "stub", "--tools", "calculator", "What is 6 times 7?"],
            tmp_path,
        )
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "Final Answer: 42" in out
