"""Conversations that survive a restart: each conversation's turns (question, answer, how the run ended) and
their steps, kept in one SQLite file under the user's data directory.

    store = SQLiteStore()                      # $TINYAGENT_DATA, else $XDG_DATA_HOME/tinyagent, else
    history = store.load("trip")               # ~/.local/share/tinyagent: conversations.sqlite3
    result = agent.run(question, history=history)
    store.append("trip", question, result)

`load(name) -> [(question, answer), ...]` is the agent's `history`; `append(name, question, result)` adds one
turn. `ConversationStore` is the whole interface (a store over another database fits it). A conversation
belongs to an `owner` ("" for the local user; the chat page's login name), so two users' names never meet.

Each turn is written in one transaction (the turn row and its steps together), so a process killed
mid-write loses at most that turn, never the file; several processes and threads may write at once
(SQLite's locking, WAL journal). Text is stored redacted, as traces are. The file records its format
(`PRAGMA user_version`); a file from a newer tinyagent, or one that is not a store, is refused with one line.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Protocol

from .agent.results import AgentResult, Step, StopReason
from .redaction import redact
from .traces import to_jsonable

FORMAT = 1  # the file format this version writes (PRAGMA user_version)
APPLICATION_ID = 0x54416753  # "TAgS": marks the file as a tinyagent store (PRAGMA application_id)
FILE_NAME = "conversations.sqlite3"
DATA_ENV = "TINYAGENT_DATA"  # a folder that replaces the data directory
BUSY_SECONDS = 30.0  # how long a write waits for another writer's lock before it fails
MAX_NAME_CHARS = 200

_SCHEMA = """
CREATE TABLE conversations (
    id INTEGER PRIMARY KEY, owner TEXT NOT NULL, name TEXT NOT NULL,
    created REAL NOT NULL, updated REAL NOT NULL, UNIQUE (owner, name));
CREATE TABLE turns (
    id INTEGER PRIMARY KEY,
    conversation INTEGER NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
    position INTEGER NOT NULL, question TEXT NOT NULL, answer TEXT NOT NULL,
    stop_reason TEXT NOT NULL, lang TEXT NOT NULL, created REAL NOT NULL,
    result TEXT NOT NULL,  -- JSON: the rest of the AgentResult (tokens, seconds, error, protocol)
    UNIQUE (conversation, position));
CREATE TABLE steps (
    turn INTEGER NOT NULL REFERENCES turns (id) ON DELETE CASCADE,
    position INTEGER NOT NULL, kind TEXT NOT NULL,
    data TEXT NOT NULL,    -- JSON: the Step's fields
    PRIMARY KEY (turn, position));
"""


class StoreError(Exception):
    """The store cannot be used (not a store, a newer format, a file that cannot be opened); one line."""


@dataclass
class Turn:
    """One question of a conversation and how it was answered."""

    question: str
    answer: str
    stop_reason: str = ""
    lang: str = "en"
    steps: list[Step] = field(default_factory=list)
    created: float = 0.0
    details: dict = field(default_factory=dict)  # the rest of the result: tokens, seconds, error, protocol

    def result(self) -> AgentResult:
        """The turn as the run's AgentResult (what this version knows of it)."""
        known = {k: v for k, v in self.details.items() if k in _RESULT_FIELDS}
        try:
            stop_reason = StopReason(self.stop_reason) if self.stop_reason else ""
        except ValueError:  # a newer version's reason
            stop_reason = ""
        return AgentResult(
            **{
                **known,
                "question": self.question,
                "answer": self.answer,
                "steps": list(self.steps),
                "stop_reason": stop_reason,
                "lang": self.lang,
            }
        )


@dataclass
class Conversation:
    """A conversation as `conversations()` lists it."""

    name: str
    turns: int
    created: float
    updated: float


class ConversationStore(Protocol):
    """What the agent and the faces need of a store."""

    def load(self, name: str, owner: str = "") -> list[tuple[str, str]]:
        """The conversation's (question, answer) pairs, oldest first; [] for one never written."""

    def append(self, name: str, question: str, result: AgentResult | str, owner: str = "") -> None:
        """Add one turn (a run's result, or just its answer), atomically."""

    def turns(self, name: str, owner: str = "") -> list[Turn]:
        """The conversation's turns with their steps, oldest first."""

    def conversations(self, owner: str = "") -> list[Conversation]:
        """The owner's conversations, most recently updated first."""

    def forget(self, name: str, owner: str = "") -> bool:
        """Delete a conversation; False when there was none."""


@dataclass(frozen=True)
class Memory:
    """One named conversation of a store, as an agent keeps it (`Agent(memory=store.conversation("trip"))`):
    its turns are the agent's history when it starts, each `chat` adds one, `reset` forgets them."""

    store: ConversationStore
    name: str
    owner: str = ""

    def load(self) -> list[tuple[str, str]]:
        return self.store.load(self.name, self.owner)

    def append(self, question: str, result: AgentResult | str) -> None:
        self.store.append(self.name, question, result, self.owner)

    def forget(self) -> None:
        self.store.forget(self.name, self.owner)


def data_dir() -> Path:
    """Where tinyagent keeps user data: $TINYAGENT_DATA, else $XDG_DATA_HOME/tinyagent, else
    ~/.local/share/tinyagent."""
    if os.environ.get(DATA_ENV):
        return Path(os.environ[DATA_ENV]).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base).expanduser() / "tinyagent"


def default_path() -> Path:
    return data_dir() / FILE_NAME


def check_name(name: str) -> str:
    """A conversation name as given, or a ValueError saying what a name may be."""
    if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME_CHARS or not name.isprintable():
        raise ValueError(f"a conversation name is 1 to {MAX_NAME_CHARS} printable characters, not {name!r}")
    return name


class SQLiteStore:
    """Conversations in one SQLite file (`default_path()` unless `path` is given); see the module.

    Safe to share between threads: each call opens its own connection."""

    def __init__(self, path: str | os.PathLike | None = None, busy_seconds: float = BUSY_SECONDS):
        self.path = Path(path).expanduser() if path is not None else default_path()
        self.busy_seconds = busy_seconds
        self._ready = False
        self._lock = threading.Lock()
        with self._connection():  # created, or its format checked, now: a bad file fails at once
            pass

    # --- the interface --------------------------------------------------------------------------

    def conversation(self, name: str, owner: str = "") -> Memory:
        """The conversation `name` as an agent's memory."""
        return Memory(self, check_name(name), owner)

    def load(self, name: str, owner: str = "") -> list[tuple[str, str]]:
        with self._connection() as db:
            rows = db.execute(
                "SELECT t.question, t.answer FROM turns t JOIN conversations c ON t.conversation = "
                "c.id WHERE c.owner = ? AND c.name = ? ORDER BY t.position",
                (owner, name),
            ).fetchall()
        return [(q, a) for q, a in rows]

    def append(self, name: str, question: str, result: AgentResult | str, owner: str = "") -> None:
        check_name(name)
        if isinstance(result, str):
            result = AgentResult(question=question, answer=result, finished=True, stop_reason=StopReason.FINAL_ANSWER)
        record = redact(to_jsonable(result))
        steps = record.pop("steps")
        answer, stop_reason, lang = record.pop("answer"), record.pop("stop_reason"), record.pop("lang")
        record.pop("question")
        now = time.time()
        with self._connection() as db, _writing(db):
            db.execute(
                "INSERT INTO conversations (owner, name, created, updated) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (owner, name) DO UPDATE SET updated = excluded.updated",
                (owner, name, now, now),
            )
            (conversation,) = db.execute(
                "SELECT id FROM conversations WHERE owner = ? AND name = ?", (owner, name)
            ).fetchone()
            (position,) = db.execute(
                "SELECT COALESCE(MAX(position) + 1, 0) FROM turns WHERE conversation = ?", (conversation,)
            ).fetchone()
            turn = db.execute(
                "INSERT INTO turns (conversation, position, question, answer, stop_reason, lang, "
                "created, result) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    conversation,
                    position,
                    redact(question),
                    answer,
                    stop_reason or "",
                    lang,
                    now,
                    json.dumps(record, ensure_ascii=False),
                ),
            ).lastrowid
            db.executemany(
                "INSERT INTO steps (turn, position, kind, data) VALUES (?, ?, ?, ?)",
                [
                    (turn, i, step.get("kind") or "", json.dumps(step, ensure_ascii=False))
                    for i, step in enumerate(steps)
                ],
            )

    def turns(self, name: str, owner: str = "") -> list[Turn]:
        with self._connection() as db:
            rows = db.execute(
                "SELECT t.id, t.question, t.answer, t.stop_reason, t.lang, t.created, t.result "
                "FROM turns t JOIN conversations c ON t.conversation = c.id "
                "WHERE c.owner = ? AND c.name = ? ORDER BY t.position",
                (owner, name),
            ).fetchall()
            steps: dict[int, list[Step]] = {}
            for turn, data in db.execute(
                "SELECT s.turn, s.data FROM steps s JOIN turns t ON s.turn = t.id JOIN conversations c "
                "ON t.conversation = c.id WHERE c.owner = ? AND c.name = ? ORDER BY s.turn, s.position",
                (owner, name),
            ):
                steps.setdefault(turn, []).append(_step(json.loads(data)))
        return [
            Turn(
                question=q,
                answer=a,
                stop_reason=reason,
                lang=lang,
                created=created,
                steps=steps.get(turn, []),
                details=json.loads(details),
            )
            for turn, q, a, reason, lang, created, details in rows
        ]

    def conversations(self, owner: str = "") -> list[Conversation]:
        with self._connection() as db:
            rows = db.execute(
                "SELECT c.name, COUNT(t.id), c.created, c.updated FROM conversations c LEFT JOIN "
                "turns t ON t.conversation = c.id WHERE c.owner = ? GROUP BY c.id "
                "ORDER BY c.updated DESC, c.id DESC",
                (owner,),
            ).fetchall()
        return [Conversation(*row) for row in rows]

    def forget(self, name: str, owner: str = "") -> bool:
        with self._connection() as db, _writing(db):
            return db.execute("DELETE FROM conversations WHERE owner = ? AND name = ?", (owner, name)).rowcount > 0

    def __repr__(self) -> str:
        return f"<SQLiteStore {self.path}>"

    # --- the file -----------------------------------------------------------------------------------

    @contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        """A connection in autocommit mode (writes open their own transaction), the file ready."""
        try:
            if not self._ready:
                with self._lock:
                    if not self._ready:
                        self._prepare()
                        self._ready = True
            with closing(self._connect()) as db:
                yield db
        except sqlite3.DatabaseError as e:
            raise StoreError(f"conversation store {self.path}: {_reason(e)}") from None

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=self.busy_seconds, isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA foreign_keys = ON")
        db.execute("PRAGMA synchronous = FULL")
        return db

    def _prepare(self) -> None:
        """Create the file (private to the user) with its tables, or check that it is a store this version
        reads. Runs once per SQLiteStore; two processes creating one file at once both end up with it."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            os.close(os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600))  # the WAL files take its mode
        except OSError as e:
            raise StoreError(f"conversation store {self.path}: cannot create it ({e.strerror or e})") from None
        with closing(self._connect()) as db, _writing(db):
            (version,), (app,) = (
                db.execute("PRAGMA user_version").fetchone(),
                db.execute("PRAGMA application_id").fetchone(),
            )
            tables = db.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()[0]
            if version == 0 and app == 0 and tables == 0:  # a new file
                for statement in filter(str.strip, _SCHEMA.split(";")):
                    db.execute(statement)
                db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                db.execute(f"PRAGMA user_version = {FORMAT}")
            elif app != APPLICATION_ID:
                raise StoreError(
                    f"conversation store {self.path}: not a tinyagent conversation store (another "
                    "program's SQLite file); choose another file"
                )
            elif version > FORMAT:
                raise StoreError(
                    f"conversation store {self.path}: written by a newer tinyagent (format {version}; "
                    f"this version reads format {FORMAT}): upgrade tinyagent, or choose another file"
                )
        db = self._connect()
        try:
            db.execute("PRAGMA journal_mode = WAL")  # readers and one writer at once; set once, kept in the file
        finally:
            db.close()


@contextmanager
def _writing(db: sqlite3.Connection) -> Iterator[None]:
    """One write transaction, taking the write lock at its start (no deadlock between two writers that
    both read first); committed whole, or rolled back on any error."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


_STEP_FIELDS = {f.name for f in fields(Step)}
_RESULT_FIELDS = {f.name for f in fields(AgentResult)} - {"question", "answer", "steps", "stop_reason", "lang"}


def _step(data: dict) -> Step:
    """A stored step as a Step (fields this version does not know are left out; an unknown kind kept as
    no kind, so an older version still reads a newer one's steps)."""
    values = {k: v for k, v in data.items() if k in _STEP_FIELDS}
    try:
        return Step(**values)
    except ValueError:
        return Step(**{**values, "kind": ""})


def _reason(error: sqlite3.DatabaseError) -> str:
    text = str(error)
    if "file is not a database" in text or "file is encrypted" in text:
        return "not a tinyagent conversation store (not an SQLite file); choose another file"
    if "locked" in text:
        return f"{text} (another process held it for {BUSY_SECONDS:g} s)"
    return text
