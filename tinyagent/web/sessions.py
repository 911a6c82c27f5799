"""The chat page's conversations, apart from Gradio: each under an id the server makes, so a client
cannot choose another's (Gradio's own session hash is sent by the client); at most `max_sessions`,
and one idle for `ttl` seconds is forgotten. Nothing here knows what a session holds."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from secrets import token_urlsafe
from typing import Generic, TypeVar

T = TypeVar("T")

DEFAULT_MAX_SESSIONS = 100
DEFAULT_SESSION_TTL = 3600.0
ID_BYTES = 24  # 192 random bits: not guessable


class SessionsFull(Exception):
    """Every stored session is running a question: no room for another one now."""


class SessionStore(Generic[T]):
    """Sessions by server-made id, most recently used last.

    `get(key)` returns the session of a known id, or a new one under a fresh id (an unknown or empty
    id never names a session). Idle sessions (those `busy` says are not running) are dropped once
    unused for `ttl` seconds, and the least recently used idle one makes room when `max_sessions`
    are stored; `on_drop(session)` is called for each session dropped.
    """

    def __init__(
        self,
        make: Callable[[], T],
        max_sessions: int = DEFAULT_MAX_SESSIONS,
        ttl: float = DEFAULT_SESSION_TTL,
        busy: Callable[[T], bool] = lambda s: False,
        on_drop: Callable[[T], None] = lambda s: None,
        clock: Callable[[], float] = time.monotonic,
    ):
        if max_sessions < 1 or not ttl > 0:
            raise ValueError(f"max_sessions must be at least 1 and ttl positive, not {max_sessions}, {ttl}")
        self.make, self.max_sessions, self.ttl = make, max_sessions, ttl
        self.busy, self.on_drop, self.clock = busy, on_drop, clock
        self._sessions: OrderedDict[str, tuple[T, float]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str | None) -> tuple[str, T, bool]:
        """(id, session, whether it is new): the session of `key`, or a new one under a fresh id."""
        with self._lock:
            now = self.clock()
            self._evict_idle(now)
            if key and key in self._sessions:
                session = self._sessions[key][0]
                self._touch(key, session, now)
                return key, session, False
            if len(self._sessions) >= self.max_sessions:
                self._make_room()
            key, session = token_urlsafe(ID_BYTES), self.make()
            self._touch(key, session, now)
            return key, session, True

    def adopt(self, key: str, session: T) -> None:
        """Keep `session` under `key`, an id this store made before (a conversation brought back from a
        conversation store after a restart), making room as `get` does."""
        with self._lock:
            now = self.clock()
            self._evict_idle(now)
            if key not in self._sessions and len(self._sessions) >= self.max_sessions:
                self._make_room()
            self._touch(key, session, now)

    def find(self, key: str | None) -> T | None:
        """The session of `key`, or None; never makes one."""
        with self._lock:
            entry = self._sessions.get(key) if key else None
            if entry is not None:
                self._touch(key, entry[0], self.clock())
            return entry[0] if entry is not None else None

    def touch(self, key: str | None) -> None:
        """Count `key`'s session as used now (a run that ends is use too)."""
        self.find(key)

    def __len__(self) -> int:
        with self._lock:
            return len(self._sessions)

    def _touch(self, key: str, session: T, now: float) -> None:
        self._sessions[key] = (session, now)
        self._sessions.move_to_end(key)

    def _evict_idle(self, now: float) -> None:
        for key, (session, seen) in list(self._sessions.items()):
            if now - seen >= self.ttl and not self.busy(session):
                self._drop(key)

    def _make_room(self) -> None:
        idle = next((k for k, (s, _) in self._sessions.items() if not self.busy(s)), None)
        if idle is None:
            raise SessionsFull(f"all {self.max_sessions} sessions are running a question")
        self._drop(idle)

    def _drop(self, key: str) -> None:
        session, _ = self._sessions.pop(key)
        self.on_drop(session)
