"""`tinyagent chat --session NAME`: a conversation kept in the conversation store goes on after the process is
killed with SIGKILL mid-turn (the turn in progress is lost, the earlier ones are not); /sessions lists the
stored conversations, /forget deletes one; a store this version cannot read is one line."""

from __future__ import annotations

import os
import signal
import subprocess
import threading

from openai_stub import OpenAIStub
from serving import TINYAGENT, Process, environment

from tinyagent.store import SQLiteStore


def asks(body: dict, text: str) -> bool:
    return any(text in str(m.get("content")) for m in body["messages"] if m["role"] == "user")


def chat(stub: OpenAIStub, data, stdin: str, *more: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [TINYAGENT, "chat", "--base-url", stub.base_url, "--model", "stub-model", "--tools", "calculator", *more],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        env=environment(TINYAGENT_DATA=str(data)),
    )


def test_a_conversation_goes_on_after_the_process_is_killed_mid_turn(tmp_path):
    asked_second, release = threading.Event(), threading.Event()

    def replies(body: dict) -> str:
        if asks(body, "second question"):
            asked_second.set()
            release.wait(60)
            return "Final Answer: lost with the process"
        if asks(body, "third question"):
            return "Final Answer: Lyon is 470 km away"
        return "Final Answer: Paris is 450 km away"

    with OpenAIStub(replies=replies) as stub:
        args = ["chat", "--session", "trip", "--base-url", stub.base_url, "--model", "stub-model"]
        with Process(*args, env=environment(TINYAGENT_DATA=str(tmp_path)), stdin=subprocess.PIPE) as first:
            first.proc.stdin.write("first question\nsecond question\n")
            first.proc.stdin.flush()
            assert asked_second.wait(60), "".join(first.lines)  # the first turn is written before the second
            os.kill(first.proc.pid, signal.SIGKILL)  # is read, so the kill comes mid-turn
            assert first.proc.wait(30) == -signal.SIGKILL
            release.set()
        again = chat(stub, tmp_path, "/history\nthird question\n/sessions\n", "--session", "trip")
        resumed = [r["body"]["messages"] for r in stub.requests if asks(r["body"], "third question")][0]
    assert again.returncode == 0, again.stderr
    assert "conversation 'trip': 1 earlier turns" in again.stderr
    assert "1. Q: first question\n   A: Paris is 450 km away\n" in again.stdout
    assert "second question" not in again.stdout and "Final Answer: Lyon is 470 km away" in again.stdout
    assert {"role": "user", "content": "first question"} in resumed
    assert {"role": "assistant", "content": "Paris is 450 km away"} in resumed
    assert "second question" not in str(resumed)
    assert again.stdout.rstrip().splitlines()[-1].startswith("* trip  (2 turns, ")
    assert SQLiteStore(tmp_path / "conversations.sqlite3").load("trip") == [
        ("first question", "Paris is 450 km away"),
        ("third question", "Lyon is 470 km away"),
    ]


def test_sessions_lists_and_forget_deletes(tmp_path):
    with OpenAIStub(replies="Final Answer: ok") as stub:
        chat(stub, tmp_path, "one\n", "--session", "a")
        chat(stub, tmp_path, "two\n", "--session", "b")
        out = chat(
            stub, tmp_path, "/sessions\n/forget a\n/forget nothing\n/sessions\n/forget\n/history\n", "--session", "b"
        )
    lines = out.stdout.splitlines()
    assert lines[0].startswith("* b  (1 turns") and lines[1].startswith("  a  (1 turns")
    assert lines[2].startswith("* b  (1 turns") and len(lines) == 4 and lines[3] == "(no history)"
    assert "conversation 'a' deleted" in out.stderr and "conversation 'nothing' does not exist" in out.stderr
    assert "history cleared (conversation 'b' deleted)" in out.stderr
    assert SQLiteStore(tmp_path / "conversations.sqlite3").conversations() == []


def test_without_a_session_the_store_commands_say_what_they_need(tmp_path):
    with OpenAIStub(replies="Final Answer: ok") as stub:
        out = chat(stub, tmp_path, "/sessions\n")
    assert out.returncode == 0 and "/sessions needs --session NAME" in out.stderr
    assert not (tmp_path / "conversations.sqlite3").exists()


def test_a_store_it_cannot_read_is_one_line_before_the_model_loads(tmp_path):
    bad = tmp_path / "notes.txt"
    bad.write_text("these are my notes, not a database\n" * 100)
    with OpenAIStub() as stub:
        out = chat(stub, tmp_path, "hi\n", "--session", "a", "--store", str(bad))
        assert stub.chat_requests == 0
    assert out.returncode == 1
    assert out.stderr == (
        f"tinyagent: error: conversation store {bad}: not a tinyagent conversation store (not an "
        "SQLite file); choose another file\n"
    )
