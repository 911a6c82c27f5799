"""Chat messages of a run: the conversation, then the run's steps so far. ReAct: the scratchpad as a
trailing assistant message the model continues, or folded into the user turn for servers that cannot
continue one. The tools protocol: each reply an assistant turn, each result a tool message.
Pure data in, data out.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..text import detect_lang
from .kinds import StepKind
from .observations import format_observation
from .templates import shipped

Message = dict  # {"role": "system" | "user" | "assistant" | "tool", "content": str, ...}


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
    return "".join(s.text + format_observation(s.observation or "") for s in steps if s.final_answer is None) + suffix


def prompt_messages(messages: list[Message], steps, suffix: str = "") -> list[Message]:
    """The messages to send: the conversation, then the scratchpad as a trailing assistant message.
    A `searched` step (the question searched first) is already in the conversation: its results are in the
    question's message. A `working` step (the model's own working, first) is a turn of its own: its reply,
    then the user message asking to check it (the step's observation); the scratchpad of the steps after it
    follows."""
    messages = list(messages)
    steps = [s for s in steps if s.kind != StepKind.SEARCHED]
    if steps and steps[0].kind == StepKind.WORKING:  # only ever a run's first step (after a search)
        working, *steps = steps
        messages += [
            {"role": "assistant", "content": working.text},
            {"role": "user", "content": working.observation or ""},
        ]
    pad = scratchpad(steps, suffix)
    return [*messages, {"role": "assistant", "content": pad}] if pad else messages


def fold_scratchpad(messages: list[Message]) -> list[Message]:
    """Move a trailing assistant message into the user message before it, with an instruction to continue."""
    *rest, last = messages
    pad = last["content"]
    user = rest.pop()["content"] if rest and rest[-1]["role"] == "user" else ""
    lang = detect_lang(user + pad)
    content = (user.rstrip() + "\n\n" if user.strip() else "") + shipped().text("common.fold", lang) + pad
    return [*rest, {"role": "user", "content": content}]


# --- the tools protocol: real assistant turns and tool results -----------------------------------


def tool_turn_messages(
    messages: list[Message],
    steps,
    suffix: str = "",
    *,
    result_role: str | None = "tool",
    wrap=None,
    call_turns: bool = False,
) -> list[Message]:
    """The conversation, then each model reply of the run as an assistant turn and its results.

    One reply may hold several calls (steps sharing a `turn`); its results follow it, one message each.
    A reply goes back as written (`text`), so the prompt only grows; with `call_turns` (OpenAI-compatible
    servers) the turn also carries its `tool_calls`, whose ids the results name. A result goes in
    `result_role` (None: a user message, wrapped by `wrap(text)`, for templates without a tool role); an
    error about a reply with no call is a user message. `suffix` (the forced answer) is a last user message.
    """
    out = list(messages)
    for turn in _turns(steps):
        if turn[0].final_answer is not None:
            continue
        assistant: Message = {"role": "assistant", "content": turn[0].text}
        calls = [s for s in turn if s.action is not None]
        if call_turns and calls:
            assistant["tool_calls"] = [
                {
                    "id": _call_id(s),
                    "type": "function",
                    "function": {"name": s.action, "arguments": s.action_input or "{}"},
                }
                for s in calls
            ]
        out.append(assistant)
        for s in turn:
            result = (s.observation or "").strip()
            if s.action is None:
                out.append({"role": "user", "content": result})
            elif result_role is None:
                out.append({"role": "user", "content": wrap(result) if wrap else result})
            else:
                out.append({"role": result_role, "content": result, "name": s.action, "tool_call_id": _call_id(s)})
    if suffix:
        out.append({"role": "user", "content": suffix})
    return out


def _turns(steps) -> list[list]:
    """Steps grouped by the reply they came from (consecutive steps with one `turn`)."""
    groups: list[list] = []
    for s in steps:
        if groups and s.turn is not None and groups[-1][-1].turn == s.turn:
            groups[-1].append(s)
        else:
            groups.append([s])
    return groups


def _call_id(step) -> str:
    return step.call_id or f"call_{step.index}"
