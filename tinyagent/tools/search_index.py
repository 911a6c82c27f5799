"""A corpus's passages in SQLite FTS5 (the standard library's full-text engine), kept on disk between starts.

The index of a folder lives under the cache (`TINYAGENT_CACHE/search/`, keyed by the folder's resolved path;
never inside the folder). At each start `sync` compares every file's size and modification time with what the
index recorded: only added, edited and removed files are read again (an edited file whose bytes are unchanged
is not re-indexed), so a second start on an unchanged folder reads no file. The index is rebuilt only when its
format or tokenisation changed, or when SQLite finds it damaged (then with one warning). Chosen by measurement
against the hand-written BM25 of corpus.py, tantivy and bm25s: bench/search_engines.py, bench/README.md.

Terms are written by `terms.tokenize` (so Chinese is indexed as character unigrams and bigrams) and stored
space-separated; FTS5's bm25() ranks, the heading trail weighing twice the body. (Over 300 lines: opening the
index, keeping it in step with the files and asking it share one connection, its lock and its damage handling.)
"""

from __future__ import annotations

import hashlib
import logging
import os
import sqlite3
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ..text import clip
from .corpus import CorpusError
from .documents import KINDS, MAX_FILE_BYTES, PASSAGE_CHARS, Passage, Unreadable, read_passages
from .terms import TOKENIZER, tokenize

log = logging.getLogger(__name__)

CACHE_ENV = "TINYAGENT_CACHE"
FORMAT = "1"  # bump when what the tables hold changes: older indexes are rebuilt
MAX_QUERY_TERMS = 64  # a longer query is searched by its first 64 distinct terms
TITLE_WEIGHT = 2.0  # bm25() weight of the heading trail against the body's 1
_SCHEMA = """
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE files(path TEXT PRIMARY KEY, size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL,
                   sha256 TEXT NOT NULL, error TEXT);
CREATE TABLE passages(id INTEGER PRIMARY KEY, file TEXT NOT NULL, heading TEXT NOT NULL, page INTEGER,
                      title TEXT NOT NULL, text TEXT NOT NULL);
CREATE INDEX passages_by_file ON passages(file);
CREATE VIRTUAL TABLE terms USING fts5(title, body, tokenize='unicode61 remove_diacritics 0');
"""


def cache_root() -> Path:
    """$TINYAGENT_CACHE, or ~/.cache/tinyagent (the folder converted models also go to)."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "tinyagent").expanduser()


def index_path(root: Path) -> Path:
    """Where the index of the folder (or file) `root` is kept."""
    key = hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:16]
    return cache_root() / "search" / f"{root.resolve().name or 'root'}-{key}.sqlite"


@dataclass(frozen=True)
class Hit:
    passage: Passage
    score: float  # higher is better (FTS5's bm25, negated)


@dataclass
class Changes:
    """What one `sync` did."""

    added: list[str] = field(default_factory=list)
    edited: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    unchanged: int = 0
    read: list[str] = field(default_factory=list)  # files whose bytes were read
    unreadable: dict[str, str] = field(default_factory=dict)
    other_kinds: Counter = field(default_factory=Counter)  # suffix -> files not searched


def _damaged(e: sqlite3.Error) -> bool:
    """The error says the file is not a (whole) index: damaged, not ours, or from an unknown version."""
    name = getattr(e, "sqlite_errorname", "")
    text = str(e).lower()
    return (
        name in ("SQLITE_CORRUPT", "SQLITE_NOTADB")
        or "malformed" in text
        or "not a database" in text
        or "no such table" in text
        or "no such column" in text
    )


class SearchIndex:
    """The passages of one corpus, a folder or one file, searchable by BM25.

    `SearchIndex(root)` opens (or makes) the index under the cache and syncs it with the files; `path=None`
    keeps it in memory (the shipped corpus; a cache that cannot be written). Searches may come from many
    threads at once: they take turns on one connection (each takes milliseconds).
    """

    def __init__(self, root: str | Path, path: Path | None | str = "cache", passage_chars: int = PASSAGE_CHARS):
        self.root = Path(root).expanduser()
        if not self.root.exists():
            raise CorpusError(f"corpus {'file' if self.root.suffix else 'folder'} not found: {self.root}")
        if not (self.root.is_dir() or self.root.is_file()):
            raise CorpusError(f"corpus is neither a folder nor a file: {self.root}")
        self.passage_chars = passage_chars
        self.single = self.root.is_file()
        self.lock = threading.Lock()
        self.path = index_path(self.root) if path == "cache" else (Path(path) if path is not None else None)
        self.db = self._open()
        self.changes = self.sync()
        if not self.count():
            raise CorpusError(
                f"{self.root}: nothing to search (no readable Markdown, text, HTML, PDF or JSONL file)"
                if not self.single
                else f"{self.root}: the corpus is empty"
            )

    def __repr__(self) -> str:
        return f"SearchIndex({str(self.root)!r}, files={self.file_count()}, passages={self.count()})"

    # --- opening ---------------------------------------------------------------------------------

    def _expected(self) -> dict[str, str]:
        return {
            "format": FORMAT,
            "tokenizer": TOKENIZER,
            "passage_chars": str(self.passage_chars),
            "root": str(self.root.resolve()),
        }

    def _open(self) -> sqlite3.Connection:
        if self.path is None:
            return self._create(":memory:")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self.path, timeout=30, check_same_thread=False)
        except (OSError, sqlite3.Error) as e:
            return self._in_memory(e)
        try:
            if not db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
                return self._initialised(db)
            if db.execute("PRAGMA quick_check").fetchone()[0] != "ok":
                raise sqlite3.DatabaseError("database disk image is malformed")
            if dict(db.execute("SELECT key, value FROM meta")) == self._expected():
                return db
            log.info("the search index of %s was made by another version: rebuilding it", self.root)
        except sqlite3.Error as e:
            if not _damaged(e):
                db.close()
                return self._in_memory(e)
            log.warning("the search index of %s was damaged (%s): rebuilding it", self.root, e)
        db.close()
        return self._rebuilt()

    def _create(self, where: str | Path) -> sqlite3.Connection:
        return self._initialised(sqlite3.connect(where, timeout=30, check_same_thread=False))

    def _initialised(self, db: sqlite3.Connection) -> sqlite3.Connection:
        """`db`, empty, given the tables and what this index expects of them."""
        db.executescript(_SCHEMA)
        with db:
            db.executemany("INSERT INTO meta VALUES (?, ?)", self._expected().items())
        return db

    def _rebuilt(self) -> sqlite3.Connection:
        """A new, empty index file in place of the old one (the next sync fills it)."""
        for suffix in ("", "-journal", "-wal", "-shm"):
            Path(f"{self.path}{suffix}").unlink(missing_ok=True)
        try:
            return self._create(self.path)
        except (OSError, sqlite3.Error) as e:
            return self._in_memory(e)

    def _in_memory(self, error: Exception) -> sqlite3.Connection:
        log.warning(
            "cannot keep the search index of %s under %s (%s): indexing in memory for this run",
            self.root,
            self.path.parent if self.path else "the cache",
            error,
        )
        self.path = None
        return self._create(":memory:")

    # --- keeping it in step with the files ---------------------------------------------------------

    def files(self) -> dict[str, Path]:
        """{name in sources: path} of the files to consider: the corpus file, or the folder's files (hidden
        ones and hidden folders left out, links to folders not followed), sorted."""
        if self.single:
            return {"" if self.root.suffix.lower() == ".jsonl" else self.root.name: self.root}
        found = {}
        for folder, dirs, names in os.walk(self.root):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for name in names:
                if not name.startswith("."):
                    path = Path(folder) / name
                    found[path.relative_to(self.root).as_posix()] = path
        return dict(sorted(found.items()))

    def sync(self) -> Changes:
        """Read again the files added or edited since the last sync, forget removed ones; warn (one line per
        file) about files that cannot be read. A corpus that is one file raises CorpusError instead."""
        try:
            return self._sync()
        except sqlite3.Error as e:
            if not _damaged(e):
                raise CorpusError(f"{self.root}: the search index could not be updated ({e})") from None
            self._rebuild_after(e)
            return self._sync()

    def _rebuild_after(self, error: sqlite3.Error) -> None:
        """Start again from an empty index after SQLite found this one damaged; other errors go on up."""
        if not _damaged(error) or self.path is None:
            raise error
        log.warning("the search index of %s was damaged (%s): rebuilding it", self.root, error)
        with self.lock:
            self.db.close()
            self.db = self._rebuilt()

    def _sync(self) -> Changes:
        changes = Changes()
        with self.lock, self.db:
            self.db.execute("BEGIN IMMEDIATE")  # a second process syncing the same folder waits, then has nothing to do
            known = {
                row[0]: row[1:] for row in self.db.execute("SELECT path, size, mtime_ns, sha256, error FROM files")
            }
            present = self.files()
            for name in sorted(set(known) - set(present)):
                self._forget(name)
                changes.removed.append(name)
            for name, path in present.items():
                suffix = path.suffix.lower()
                if suffix not in KINDS and not self.single:
                    changes.other_kinds[suffix or "(none)"] += 1
                    continue
                try:
                    stat = path.stat()
                except OSError as e:
                    self._record_error(name, 0, 0, "", f"cannot read it ({e.strerror or e})", changes)
                    continue
                before = known.get(name)
                if before is not None and before[:2] == (stat.st_size, stat.st_mtime_ns):
                    changes.unchanged += 1
                    if before[3]:
                        changes.unreadable[name] = before[3]
                    continue
                self._index_file(name, path, stat, before, changes)
        for name, reason in changes.unreadable.items():
            if self.single:
                raise CorpusError(f"{self.root}: {reason}")
            log.warning("%s: skipped, %s", name, reason)
        if changes.other_kinds:
            kinds = ", ".join(f"{n} {k}" for k, n in sorted(changes.other_kinds.items()))
            log.info("%s: not searched: files of other kinds (%s)", self.root, kinds)
        if changes.added or changes.edited or changes.removed:
            log.info(
                "search index of %s: %d added, %d edited, %d removed, %d unchanged",
                self.root,
                len(changes.added),
                len(changes.edited),
                len(changes.removed),
                changes.unchanged,
            )
        return changes

    def _index_file(self, name: str, path: Path, stat: os.stat_result, before, changes: Changes) -> None:
        if stat.st_size > MAX_FILE_BYTES:
            self._record_error(
                name, stat.st_size, stat.st_mtime_ns, "", f"larger than {MAX_FILE_BYTES // 2**20} MB", changes
            )
            return
        try:
            data = path.read_bytes()
        except OSError as e:
            self._record_error(name, stat.st_size, stat.st_mtime_ns, "", f"cannot read it ({e.strerror or e})", changes)
            return
        changes.read.append(name)
        digest = hashlib.sha256(data).hexdigest()
        if before is not None and before[2] == digest and not before[3]:  # touched, not changed
            self.db.execute(
                "UPDATE files SET size = ?, mtime_ns = ? WHERE path = ?", (stat.st_size, stat.st_mtime_ns, name)
            )
            changes.unchanged += 1
            return
        try:
            passages = read_passages(path, name, data, self.passage_chars)
        except (Unreadable, RecursionError) as e:
            reason = str(e) if isinstance(e, Unreadable) else "nested too deeply to read"
            self._record_error(name, stat.st_size, stat.st_mtime_ns, digest, reason, changes)
            return
        self._forget(name)
        self.db.execute("INSERT INTO files VALUES (?, ?, ?, ?, NULL)", (name, stat.st_size, stat.st_mtime_ns, digest))
        for p in passages:
            rowid = self.db.execute(
                "INSERT INTO passages(file, heading, page, title, text) VALUES (?, ?, ?, ?, ?)",
                (p.file, p.heading, p.page, p.title, p.text),
            ).lastrowid
            self.db.execute(
                "INSERT INTO terms(rowid, title, body) VALUES (?, ?, ?)",
                (rowid, " ".join(tokenize(p.title)), " ".join(tokenize(p.text))),
            )
        (changes.added if before is None else changes.edited).append(name)

    def _record_error(self, name, size, mtime_ns, digest, reason, changes: Changes) -> None:
        """The file is kept in the table with its reason, so an unchanged unreadable file is not read again."""
        self._forget(name)
        self.db.execute("INSERT INTO files VALUES (?, ?, ?, ?, ?)", (name, size, mtime_ns, digest, reason))
        changes.unreadable[name] = reason

    def _forget(self, name: str) -> None:
        self.db.execute("DELETE FROM terms WHERE rowid IN (SELECT id FROM passages WHERE file = ?)", (name,))
        self.db.execute("DELETE FROM passages WHERE file = ?", (name,))
        self.db.execute("DELETE FROM files WHERE path = ?", (name,))

    # --- asking it -------------------------------------------------------------------------------

    def count(self) -> int:
        with self.lock:
            return self.db.execute("SELECT count(*) FROM passages").fetchone()[0]

    def file_count(self) -> int:
        with self.lock:
            return self.db.execute("SELECT count(*) FROM files WHERE error IS NULL").fetchone()[0]

    def file_names(self, limit: int = 6) -> list[str]:
        """Some of the indexed files, those nearest the top of the folder first."""
        with self.lock:
            rows = self.db.execute("SELECT path FROM files WHERE error IS NULL").fetchall()
        return sorted((r[0] for r in rows), key=lambda p: (p.count("/"), p))[:limit]

    def topics(self, limit: int = 6) -> list[str]:
        """Some of the documents' own titles (a first heading, a PDF's title), those nearest the top first."""
        with self.lock:
            rows = self.db.execute(
                "SELECT file, title FROM passages WHERE id IN (SELECT min(id) FROM passages GROUP BY file)"
            ).fetchall()
        titles = [(file, title.split(" › ")[1]) for file, title in rows if " › " in title]
        return [clip(t, 60) for _, t in sorted(titles, key=lambda r: (r[0].count("/"), r[0]))][:limit]

    def summary(self, lang: str = "en") -> str:
        """What the index holds, in a few words: `the folder 'docs' (3 files: a.md, b.md, c.pdf; about: ...)`."""
        name = self.root.resolve().name
        if self.single:
            return f"文件 {name}（{self.count()} 段）" if lang == "zh" else f"the file {name} ({self.count()} passages)"
        names, n, topics = self.file_names(), self.file_count(), self.topics()
        if lang == "zh":
            about = f"；内容包括：{'、'.join(topics)}" if topics else ""
            return f"文件夹 {name}（{n} 个文件：{'、'.join(names)}{'等' if n > len(names) else ''}{about}）"
        about = f"; about: {', '.join(topics)}" if topics else ""
        return f"the folder '{name}' ({n} files: {', '.join(names)}{', ...' if n > len(names) else ''}{about})"

    def search(self, query: str, top_k: int = 3) -> list[Hit]:
        """The best `top_k` passages for `query`, best first (ties: the earlier passage)."""
        terms = list(dict.fromkeys(tokenize(query)))[:MAX_QUERY_TERMS]
        if not terms:
            return []
        match = " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)
        sql = (
            f"SELECT p.file, p.heading, p.text, p.page, p.title, bm25(terms, {TITLE_WEIGHT}, 1.0) AS score "
            "FROM terms JOIN passages AS p ON p.id = terms.rowid WHERE terms MATCH ? "
            "ORDER BY score, p.id LIMIT ?"
        )
        try:
            with self.lock:
                rows = self.db.execute(sql, (match, top_k)).fetchall()
        except sqlite3.Error as e:
            self._rebuild_after(e)
            self.changes = self._sync()
            with self.lock:
                rows = self.db.execute(sql, (match, top_k)).fetchall()
        return [Hit(Passage(*row[:5]), -row[5]) for row in rows]

    def close(self) -> None:
        with self.lock:
            self.db.close()
