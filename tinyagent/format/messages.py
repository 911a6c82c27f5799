"""Chat messages of a run: the conversation, then the scratchpad (the run's steps so far) as a trailing
assistant message the model continues, or folded into the user turn for servers that cannot
continue one. Pure data in, data out.
"""
from __future__ import annotations

from collections.abc import Iterable

from ..text import detect_lang
from .observations import format_observation

Message = dict  # {"role": "system" | "user" | "assistant", "content": str}

FOLD_INSTRUCTION = {
    "en": "Your reply so far is below. Continue it from exactly where it ends; "
          "do not repeat any of it.\n\n",
    "zh": "下面是你到目前为止的回复。请从它结束的地方直接接着写，不要重复其中任何内容。\n\n",
}


def history_to_messages(history: Iterable | None) -> list[Message]:
    """TinyAgent history (a list of (user, assistant) pairs) or message dicts -> messages."""
    messages: list[Message] = []
    for item in history or ():
        if isinstance(item, dict):
            messages.append({"role": item["role"], "content": item["content"]})
        else:
            user, assistant = item
            messages.append({"role": "user", "content": user})
            messages.append({"role": "assistant", "content": assistant})
    return messages


def scratchpad(steps, suffix: str = "") -> str:
    """The assistant message of a run: each non-final step's reply followed by its observation."""
    return "".join(s.text + format_observation(s.observation or "")
                   for s in steps if s.final_answer is None) + suffix


def prompt_messages(messages: list[Message], steps, suffix: str = "") -> list[Message]:
    """The messages to send: the conversation, then the scratchpad as a trailing assistant message."""
    pad = scratchpad(steps, suffix)
    return [*messages, {"role": "assistant", "content": pad}] if pad else list(messages)


def fold_scratchpad(messages: list[Message]) -> list[Message]:
    """Move a trailing assistant message into the user message before it, with an instruction to continue."""
    *rest, last = messages
    pad = last["content"]
    user = rest.pop()["content"] if rest and rest[-1]["role"] == "user" else ""
    lang = detect_lang(user + pad)
    content = (user.rstrip() + "\n\n" if user.strip() else "") + FOLD_INSTRUCTION[lang] + pad
    return [*rest, {"role": "user", "content": content}]
