"""What the loop asks of a protocol, and which protocol a name means.

A protocol is how one loop talks to a model: ReAct text (`react.ReAct`) or the model's own tool-call format
(`tools_protocol.Tools`). Each is a frozen dataclass holding the settings that only it means, so a setting
of one cannot be given to the other. The loop (`loop.py`) asks it for the system prompt, the messages and
options of each call, what a reply says, and what to do around a turn; the tool calls, guards, forced
answer and records are the loop's and the same for both. `BaseProtocol` holds what both do alike.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from ..format.messages import Message, history_to_messages
from ..format.reading import Reading
from ..format.templates import Prompts
from ..models.model import BaseModel, Reply
from ..text import StrEnum
from .results import Generation
from .run import RunState

PROTOCOLS = ("react", "tools", "auto")


class ProtocolName(StrEnum):
    REACT = "react"
    TOOLS = "tools"


class BaseProtocol:
    """The steps both protocols take alike; `ReAct` and `Tools` add and override what is theirs.

    `run` below is the run in progress (`run.RunState`): its question, language, messages, result and prompts,
    with `generate(...)` (one model call on the conversation and the steps so far), `record(step)`, `show(text)`.
    """

    name: ClassVar[ProtocolName]
    constrained: bool | None  # decode only replies in the protocol's format (None: as the model prefers)

    def resolved(self, model: BaseModel, tools) -> BaseProtocol:
        """These settings with every None decided, for `model` and `tools`: the one place defaults are chosen."""
        constrained = getattr(model, "prefers_constrained", False) if self.constrained is None else self.constrained
        return dataclasses.replace(self, constrained=bool(constrained))

    def record(self) -> dict:
        """The settings as data (the eval's provenance, traces): the name and every field."""
        return {"protocol": str(self.name), **dataclasses.asdict(self)}

    # --- the conversation and each model call ------------------------------------------------

    def conversation(self, question: str, history, lang: str, system: str, prompts: Prompts) -> list[Message]:
        """The run's messages before its steps: the system prompt, the earlier turns, the question."""
        return [
            {"role": "system", "content": system},
            *history_to_messages(history),
            {"role": "user", "content": question},
        ]

    def before_call(self, model: BaseModel, prompt: list[Message], tools, run: RunState) -> list[str]:
        """Notes for the step of the call about to be made (none by default)."""
        return []

    def after_call(self, reply: Reply, run: RunState) -> None:
        """Told each reply as it comes."""

    def reply(self, reply: Reply) -> Reply:
        """The reply as the protocol keeps it."""
        return reply

    # --- around a turn: what only one protocol does (nothing by default) -----------------------

    def first(self, run: RunState) -> Generation | None:
        """A first model call of its own, before the turns (ReAct's working first); None: none."""
        return None

    @property
    def lead(self) -> str:
        """What each step's reply is begun with."""
        return ""

    def completed(
        self, run: RunState, generation: Generation, readings: list[Reading]
    ) -> tuple[Generation, list[Reading], bool]:
        """A reply read as `readings`, completed where the protocol asks for more in the same step:
        (generation, readings, whether an answer was asked for)."""
        return generation, readings, False

    def sent_back(self, run: RunState, step, turn: int, max_turns: int) -> str | None:
        """The observation that sends a final answer back once to be checked, or None to take it."""
        return None

    def calls_at_once(self, count: int) -> int:
        """How many of a reply's `count` calls run (the rest are refused); all, by default."""
        return count

    def together(self) -> bool:
        """Whether the calls of one reply may run at the same time."""
        return False
