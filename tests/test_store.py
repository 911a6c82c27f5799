"""The conversation store: turns and steps kept in one SQLite file, read back after a restart; several
writers at once; a writer killed mid-write loses only its turn; a file it cannot read refused in one line."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from tinyagent.agent.results import AgentResult, Step, StopReason
from tinyagent.format.kinds import StepKind
from tinyagent.redaction import register_secret
from tinyagent.store import APPLICATION_ID, FORMAT, SQLiteStore, StoreError, data_dir, default_path

ROOT = Path(__file__).resolve().parent.parent


def result(question: str, answer: str, steps: int = 2) -> AgentResult:
    """A finished run with `steps` tool steps and a final one."""
    made = [
        Step(
            index=i,
            text=f"Action: calculator {i}",
            kind=StepKind.ACTION,
            action="calculator",
            arguments={"expression": f"{i}+1"},
            observation=str(i + 1),
            prompt_tokens=10,
            completion_tokens=3,
        )
        for i in range(steps)
    ]
    made.append(Step(index=steps, text=f"Final Answer: {answer}", kind=StepKind.FINAL_ANSWER, final_answer=answer))
    return AgentResult(
        question=question,
        answer=answer,
        steps=made,
        finished=True,
        stop_reason=StopReason.FINAL_ANSWER,
        lang="en",
        generate_calls=steps + 1,
        prompt_tokens=10 * (steps + 1),
        completion_tokens=3 * (steps + 1),
        seconds=0.5,
    )


def test_turns_and_steps_come_back_from_a_new_store_on_the_same_file(tmp_path):
    path = tmp_path / "c.sqlite3"
    first = SQLiteStore(path)
    first.append("trip", "How far is Paris?", result("How far is Paris?", "450 km"))
    first.append("trip", "And Lyon?", "470 km")  # an answer alone is a turn too
    again = SQLiteStore(path)  # as a restarted process opens it
    assert again.load("trip") == [("How far is Paris?", "450 km"), ("And Lyon?", "470 km")]
    turn, plain = again.turns("trip")
    assert [s.kind for s in turn.steps] == [StepKind.ACTION, StepKind.ACTION, StepKind.FINAL_ANSWER]
    assert turn.steps[1].arguments == {"expression": "1+1"} and turn.steps[1].observation == "2"
    assert turn.stop_reason == "final_answer" and turn.details["prompt_tokens"] == 30
    assert plain.steps == [] and plain.answer == "470 km"
    rebuilt = turn.result()  # the run as it was, for a page that shows it again
    assert rebuilt.finished and rebuilt.stop_reason == StopReason.FINAL_ANSWER and rebuilt.generate_calls == 3
    assert rebuilt.steps == turn.steps and rebuilt.answer == "450 km" and rebuilt.seconds == 0.5
    assert plain.result().finished and plain.result().stop_reason == StopReason.FINAL_ANSWER
    assert again.load("unknown") == [] and again.turns("unknown") == []


def test_conversations_are_listed_newest_first_forgotten_and_kept_apart_by_owner(tmp_path):
    store = SQLiteStore(tmp_path / "c.sqlite3")
    store.append("a", "q1", "a1")
    store.append("b", "q2", "b1")
    store.append("a", "q3", "a2")
    store.append("a", "mine", "alice's", owner="alice")
    assert [(c.name, c.turns) for c in store.conversations()] == [("a", 2), ("b", 1)]
    assert store.load("a", owner="alice") == [("mine", "alice's")]
    assert store.load("a", owner="bob") == []
    assert store.forget("a") is True and store.forget("a") is False
    assert store.load("a") == [] and store.load("a", owner="alice") == [("mine", "alice's")]
    assert [c.name for c in store.conversations()] == ["b"]


def test_secrets_are_stored_redacted(tmp_path):
    register_secret("sk-store-secret-123456")
    store = SQLiteStore(tmp_path / "c.sqlite3")
    store.append("s", "my key is sk-store-secret-123456", result("q", "it is sk-store-secret-123456"))
    raw = b"".join(f.read_bytes() for f in tmp_path.glob("c.sqlite3*"))  # the WAL file too, while there is one
    assert b"sk-store-secret-123456" not in raw
    assert store.load("s") == [("my key is [REDACTED]", "it is [REDACTED]")]


def test_a_bad_name_is_refused():
    with pytest.raises(ValueError, match="conversation name"):
        SQLiteStore.__new__(SQLiteStore).append("", "q", "a")


def test_the_data_directory_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.delenv("TINYAGENT_DATA", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert default_path() == tmp_path / "xdg" / "tinyagent" / "conversations.sqlite3"
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert data_dir() == tmp_path / "home" / ".local" / "share" / "tinyagent"
    monkeypatch.setenv("TINYAGENT_DATA", str(tmp_path / "mine"))
    store = SQLiteStore()
    assert store.path == tmp_path / "mine" / "conversations.sqlite3" and store.path.is_file()
    assert oct(store.path.stat().st_mode & 0o777) == oct(0o600)  # conversations are private


# --- files it cannot read ---------------------------------------------------------------------------


def test_a_store_from_a_newer_version_is_refused_in_one_line(tmp_path):
    path = tmp_path / "c.sqlite3"
    SQLiteStore(path).append("a", "q", "a")
    with sqlite3.connect(path) as db:
        db.execute(f"PRAGMA user_version = {FORMAT + 1}")
    with pytest.raises(StoreError) as e:
        SQLiteStore(path)
    assert str(e.value) == (
        f"conversation store {path}: written by a newer tinyagent (format {FORMAT + 1}; this "
        f"version reads format {FORMAT}): upgrade tinyagent, or choose another file"
    )


def test_a_file_that_is_not_a_store_is_refused_in_one_line(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("not a database at all\n" * 200)
    with pytest.raises(StoreError, match="not an SQLite file") as e:
        SQLiteStore(text)
    assert "\n" not in str(e.value)
    other = tmp_path / "other.sqlite3"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE things (x)")
    with pytest.raises(StoreError, match="another program's SQLite file"):
        SQLiteStore(other)
    with sqlite3.connect(other) as db:  # the refusal changed nothing
        assert db.execute("PRAGMA application_id").fetchone()[0] != APPLICATION_ID


def test_a_folder_that_cannot_be_made_is_one_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(StoreError, match="cannot create it"):
        SQLiteStore(blocker / "sub" / "c.sqlite3")


# --- writers at once, and a writer killed mid-write ---------------------------------------------------

WRITER = textwrap.dedent("""
    import sys
    sys.path.insert(0, {root!r})
    from tinyagent.store import SQLiteStore
    store, who = SQLiteStore(sys.argv[1]), sys.argv[2]
    for i in range(int(sys.argv[3])):
        store.append("shared", f"{{who}} q{{i}}", f"{{who}} a{{i}}")
        store.append(who, f"q{{i}}", f"a{{i}}")
""")


def test_processes_and_threads_writing_at_once_lose_no_turn(tmp_path):
    path, n = tmp_path / "c.sqlite3", 15
    script = tmp_path / "writer.py"
    script.write_text(WRITER.format(root=str(ROOT)))
    procs = [subprocess.Popen([sys.executable, str(script), str(path), f"p{k}", str(n)]) for k in range(3)]
    store = SQLiteStore(path)

    def thread_writer(who: str) -> None:
        for i in range(n):
            store.append("shared", f"{who} q{i}", f"{who} a{i}")

    threads = [threading.Thread(target=thread_writer, args=(f"t{k}",)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(p.wait(timeout=120) == 0 for p in procs)
    shared = store.load("shared")
    assert len(shared) == 6 * n
    for who in ("p0", "p1", "p2", "t0", "t1", "t2"):  # each writer's turns in its own order
        assert [q for q, _ in shared if q.startswith(who + " ")] == [f"{who} q{i}" for i in range(n)]
    assert store.load("p1") == [(f"q{i}", f"a{i}") for i in range(n)]


KILLED = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {root!r})
    import tinyagent.store as store_module
    from tinyagent.agent.results import AgentResult, Step
    store = store_module.SQLiteStore(sys.argv[1])
    steps = [Step(index=i, text=f"step {{i}}", kind="action") for i in range(3)]
    store.append("c", "q0", AgentResult(question="q0", answer="a0", steps=steps))
    store.append("c", "q1", AgentResult(question="q1", answer="a1", steps=steps))
    real = store_module.json.dumps
    class Stalling:
        calls = 0
        @staticmethod
        def dumps(value, **kw):  # the third turn's second step: its turn row is written, the steps not yet
            Stalling.calls += 1
            if Stalling.calls == 3:
                print("mid-write", flush=True)
                time.sleep(600)
            return real(value, **kw)
    store_module.json = Stalling
    store.append("c", "q2", AgentResult(question="q2", answer="a2", steps=steps))
""")


def test_a_writer_killed_mid_write_loses_only_its_turn(tmp_path):
    path = tmp_path / "c.sqlite3"
    script = tmp_path / "killed.py"
    script.write_text(KILLED.format(root=str(ROOT)))
    proc = subprocess.Popen([sys.executable, str(script), str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "mid-write"  # inside the turn's transaction
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
        proc.stdout.close()
    store = SQLiteStore(path)
    assert store.load("c") == [("q0", "a0"), ("q1", "a1")]
    assert all(len(t.steps) == 3 for t in store.turns("c"))
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    store.append("c", "q2", "a2")  # the killed writer's lock went with it
    assert store.load("c")[-1] == ("q2", "a2")


def test_an_agents_memory_survives_a_new_agent_and_reset_forgets_it(tmp_path, scripted):
    from tinyagent import Agent, ReAct

    store = SQLiteStore(tmp_path / "c.sqlite3")
    first = scripted(["Final Answer: 1979"])
    Agent(first, [], ReAct(working_first=False), memory=store.conversation("trip")).chat("When was Jay Chou born?")
    later = scripted(["Final Answer: Jay"])
    agent = Agent(later, [], ReAct(working_first=False), memory=store.conversation("trip"))  # a new process's
    assert agent.history == [("When was Jay Chou born?", "1979")]
    agent.chat("And his first album?")
    assert later.calls[0]["messages"][1:3] == [
        {"role": "user", "content": "When was Jay Chou born?"},
        {"role": "assistant", "content": "1979"},
    ]
    assert store.load("trip") == [("When was Jay Chou born?", "1979"), ("And his first album?", "Jay")]
    assert store.load("other") == []  # another conversation of the same store is apart
    agent.reset()
    assert store.load("trip") == [] and agent.history == []
