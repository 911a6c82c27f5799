"""The chat page's session store (tinyagent.web.sessions): ids the server makes, idle sessions evicted after
their TTL, a cap on how many are kept. A hand-moved clock: no sleeps."""

from __future__ import annotations

import pytest

from tinyagent.web.sessions import SessionsFull, SessionStore


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def store(**kwargs):
    clock, dropped = Clock(), []
    made = iter(range(1_000_000))
    sessions = SessionStore(
        lambda: {"n": next(made), "busy": False},
        busy=lambda s: s["busy"],
        on_drop=dropped.append,
        clock=clock,
        **kwargs,
    )
    return sessions, clock, dropped


def test_an_unknown_or_chosen_id_gets_a_new_session_under_a_fresh_id():
    sessions, _, _ = store()
    key, first, new = sessions.get(None)
    assert new and len(key) >= 32
    assert sessions.get(key) == (key, first, False)
    for chosen in ("", "abc", key + "x", "victim-hash"):
        other, session, new = sessions.get(chosen)
        assert new and other != chosen and session is not first
    assert sessions.find("no-such-id") is None and len(sessions) == 5


def test_idle_sessions_are_evicted_after_the_ttl_and_running_ones_are_not():
    sessions, clock, dropped = store(ttl=60)
    idle, _, _ = sessions.get(None)
    running, session, _ = sessions.get(None)
    session["busy"] = True
    clock.now = 59
    assert sessions.find(idle) is not None  # used again: its TTL starts over
    clock.now = 118
    sessions.get(None)
    assert sessions.find(idle) is not None
    clock.now = 200
    sessions.get(None)
    assert sessions.find(idle) is None and sessions.find(running) is session
    assert sorted(d["n"] for d in dropped) == [0, 2]  # the one made at 118 was idle by 200 too


def test_three_thousand_visitors_that_never_come_back_keep_at_most_the_cap():
    sessions, _, dropped = store(max_sessions=100)
    keys = [sessions.get(None)[0] for _ in range(3000)]
    assert len(sessions) == 100 and len(dropped) == 2900
    assert sessions.find(keys[-1]) is not None and sessions.find(keys[0]) is None  # the least recently used went


def test_when_every_session_is_running_a_new_one_is_refused():
    sessions, _, _ = store(max_sessions=2)
    for _ in range(2):
        sessions.get(None)[1]["busy"] = True
    with pytest.raises(SessionsFull):
        sessions.get(None)


@pytest.mark.parametrize("kwargs", [{"max_sessions": 0}, {"ttl": 0}])
def test_limits_must_be_positive(kwargs):
    with pytest.raises(ValueError):
        SessionStore(dict, **kwargs)
