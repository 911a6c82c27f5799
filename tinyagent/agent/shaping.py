"""Tool output as it enters the prompt: control tokens broken, long results distilled by the model
when asked, and the length capped with a marker. Tool output is data: nothing here parses it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..format.messages import Message
from ..format.observations import cut, neutralize_control_tokens
from ..format.templates import Prompts, shipped


@dataclass(frozen=True)
class Observations:
    """How tool output is shaped before the model reads it (`Agent(observations=...)`)."""

    max_chars: int | None = 4000  # the most of one result the model reads (None: all), then a marker
    distill: bool = False  # have the model condense a result longer than `distill_threshold`
    distill_threshold: int = 1500

    def __post_init__(self) -> None:
        if self.max_chars is not None and (isinstance(self.max_chars, bool) or self.max_chars < 1):
            raise ValueError(f"max_chars must be a positive number of characters or None, not {self.max_chars!r}")


#: The most of a tool result a distill prompt shows (then fitted to the context window).
DISTILL_MAX_CHARS = 16_000
#: Below this many characters a distill prompt's tool result is not halved further.
DISTILL_MIN_CHARS = 200


def shaped(
    raw: str, lang: str, control_tokens: tuple[str, ...], limit: int | None, distill: Callable[[str], str] | None = None
) -> str:
    """`raw` as the model will read it; `distill(text)`, when given, condenses it first."""
    text = neutralize_control_tokens(raw, control_tokens)
    if distill is not None:
        text = distill(text)
    return text if limit is None else cut(text, limit, lang)


def distilled(
    observation: str,
    lang: str,
    question: str,
    thought: str,
    ask: Callable[[list[Message]], str],
    count: Callable[[list[Message]], int | None],
    budget: int | None,
    prompts: Prompts | None = None,
) -> str:
    """The facts of a long tool result that the current thought needs, as the model (`ask`) keeps them.

    The result in the distill prompt is cut like any prompt: to DISTILL_MAX_CHARS, then halved until
    the prompt fits `budget` tokens (when known). An empty answer keeps the observation as it was."""
    prompts = prompts or shipped()

    def prompt_for(text: str) -> list[Message]:
        return [
            {
                "role": "user",
                "content": prompts.fill(
                    "common.distill", lang, question=question, thought=thought or "-", observation=text
                ),
            }
        ]

    shown = cut(observation, DISTILL_MAX_CHARS, lang)
    while budget is not None and len(shown) > DISTILL_MIN_CHARS and (count(prompt_for(shown)) or 0) > budget:
        shown = cut(observation, len(shown) // 2, lang)
    facts = ask(prompt_for(shown)).strip()
    return prompts.fill("common.distilled_label", lang, n=len(observation)) + facts if facts else observation
