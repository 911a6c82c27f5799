"""Keep every prompt inside the model's context window, shortening it deterministically."""

from __future__ import annotations

import logging
from collections.abc import Callable

from ..format.messages import prompt_messages
from ..format.observations import HISTORY_MARK, HISTORY_MARK_RE, OBSERVATION_MARK, QUESTION_MARK

MIN_OBSERVATION_CHARS = 200
MIN_QUESTION_CHARS = 200
DEFAULT_REPLY_ROOM = 512  # tokens kept for the reply when neither the call nor the model says max_new_tokens

log = logging.getLogger(__package__)


class ContextOverflow(Exception):
    """The prompt does not fit even after every allowed shortening; `notes` says what was tried."""

    def __init__(self, message: str, notes: list[str]):
        super().__init__(message)
        self.notes = notes


def prompt_budget(model, kwargs: dict) -> int | None:
    """Tokens a prompt may take: the model's window less the reply's room; None when unknown."""
    window = getattr(model, "context_window", None)
    if not window:
        return None
    return window - (
        kwargs.get("max_new_tokens")
        or getattr(model, "generation_defaults", {}).get("max_new_tokens")
        or DEFAULT_REPLY_ROOM
    )


def fit_prompt(
    messages: list[dict], steps, suffix: str, model, kwargs: dict, lang: str, render: Callable = prompt_messages
) -> list[str]:
    """`fit` to the model's window less the reply's room (nothing when the window is unknown); notes logged.
    The tools a template shows (`kwargs["tools"]`) count too."""
    budget = prompt_budget(model, kwargs)
    if budget is None:
        return []
    count = model.count_tokens
    if kwargs.get("tools"):
        count = lambda m, tools=kwargs["tools"]: model.count_tokens(m, tools=tools)
    notes = fit(messages, steps, suffix, count, budget, lang, render)
    for note in notes:
        log.info("context: %s", note)
    return notes


def fit(
    messages: list[dict],
    steps,
    suffix: str,
    count: Callable[[list[dict]], int | None],
    budget: int,
    lang: str,
    render: Callable = prompt_messages,
) -> list[str]:
    """Shorten `messages` and the steps' observations in place until the prompt fits `budget` tokens.

    `render(messages, steps, suffix)` makes the prompt (the protocol's messages; ReAct's by default).

    Order: the oldest chat turns first, then the longest observation (halved each time, with a
    marker), then the middle of the question. Returns one note per shortening; raises
    ContextOverflow when nothing more may be cut.
    """
    notes: list[str] = []
    while True:
        used = count(render(messages, steps, suffix))
        if used is None or used <= budget:
            return notes
        reason = f"prompt {used} tokens > budget {budget}"
        if len(messages) > 2:  # [system, history..., user]: drop the oldest turn
            dropped = _drop_oldest_turn(messages, lang)
            notes.append(f"dropped the oldest chat turn ({reason}); {dropped} omitted so far")
            continue
        longest = max(
            (
                s
                for s in steps
                if s.final_answer is None
                and s.observation
                and len(_strip_mark(s.observation, lang)) > MIN_OBSERVATION_CHARS
            ),
            key=lambda s: len(s.observation),
            default=None,
        )
        if longest is not None:
            before = _strip_mark(longest.observation, lang)
            if longest.raw_observation is None:
                longest.raw_observation = longest.observation
            keep = max(MIN_OBSERVATION_CHARS, len(before) // 2)
            longest.observation = before[:keep] + OBSERVATION_MARK[lang]
            notes.append(f"shortened the observation of step {longest.index + 1} to {keep} characters ({reason})")
            continue
        question = messages[-1]["content"]
        keep = len(question) // 2  # each cut at least halves what is kept, marker included, so this ends
        if keep >= MIN_QUESTION_CHARS:
            head, tail = question[: keep // 2], question[len(question) - keep // 2 :]
            messages[-1] = {
                **messages[-1],
                "content": head + QUESTION_MARK[lang].format(n=len(question) - len(head) - len(tail)) + tail,
            }
            notes.append(f"cut the middle of the question to {keep} characters ({reason})")
            continue
        raise ContextOverflow(
            f"the prompt needs {used} tokens but only {budget} fit in the context window "
            "after shortening everything that may be shortened",
            notes,
        )


def _strip_mark(text: str, lang: str) -> str:
    mark = OBSERVATION_MARK[lang]
    return text[: -len(mark)] if text.endswith(mark) else text


def _drop_oldest_turn(messages: list[dict], lang: str) -> int:
    """Remove the oldest history message pair and update the marker in the system prompt."""
    end = 3 if len(messages) > 3 and messages[1]["role"] == "user" and messages[2]["role"] == "assistant" else 2
    del messages[1:end]
    system = messages[0]["content"]
    m = HISTORY_MARK_RE.search(system)
    dropped = (int(m.group(1)) if m else 0) + 1
    base = system[: m.start()] if m else system
    messages[0] = {**messages[0], "content": base + HISTORY_MARK[lang].format(n=dropped)}
    return dropped
