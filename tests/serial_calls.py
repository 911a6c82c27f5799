"""A check that a model runs concurrent `generate` calls one at a time (tests of both local backends)."""

from __future__ import annotations

import threading

JOIN_WAIT = 2.0  # seconds the first call waits inside generation for another to join it


def calls_at_once(model, prompts, monkeypatch, **generate_kwargs) -> tuple[int, list[str]]:
    """Call `model.generate` on each prompt from its own thread: the first alone, the rest once it is inside
    `model._run`, where it waits up to JOIN_WAIT for another call to join it. Returns (the most calls inside
    `_run` at once, each prompt's reply). With a lock none can join (the wait ends after its timeout);
    without one, one always does, so a result of 1 is not luck."""
    inside, most, lock = 0, 0, threading.Lock()
    first_inside, second_inside = threading.Event(), threading.Event()
    real_run = model._run

    def run(*args, **kwargs):
        nonlocal inside, most
        with lock:
            inside += 1
            most = max(most, inside)
            (second_inside if first_inside.is_set() else first_inside).set()
        try:
            if not second_inside.is_set():
                second_inside.wait(timeout=JOIN_WAIT)
            return real_run(*args, **kwargs)
        finally:
            with lock:
                inside -= 1

    monkeypatch.setattr(model, "_run", run)
    results: dict[int, str] = {}

    def call(i):
        results[i] = str(model.generate(prompts[i], **generate_kwargs))

    threads = [threading.Thread(target=call, args=(0,))]
    threads[0].start()
    assert first_inside.wait(timeout=60)
    threads += [threading.Thread(target=call, args=(i,)) for i in range(1, len(prompts))]
    for t in threads[1:]:
        t.start()
    for t in threads:
        t.join()
    return most, [results[i] for i in range(len(prompts))]
