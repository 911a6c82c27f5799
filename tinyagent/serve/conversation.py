"""A client's chat messages as the agent's conversation: the earlier turns become its history, the last user
message its question. Pure data in, data out; a request the agent cannot take is a `BadRequest` whose
message says why in one line.

The agent has its own system prompt and its own tools, so a client's system (or developer) messages are
left out, and messages about tools (role "tool", assistant `tool_calls`) are refused: the client's tools
are not the agent's. Consecutive messages of one role are joined, as one turn.
"""

from __future__ import annotations

from dataclasses import dataclass

IGNORED_ROLES = ("system", "developer")


class BadRequest(ValueError):
    """A request the server cannot answer; `param` names the field, as OpenAI's errors do."""

    def __init__(self, message: str, param: str | None = None, status: int = 400, code: str | None = None):
        super().__init__(message)
        self.message, self.param, self.status, self.code = message, param, status, code


@dataclass
class Conversation:
    history: list[tuple[str, str]]  # (question, answer) pairs, oldest first
    question: str


def text_of(content, where: str) -> str:
    """A message's content as text: a string, or a list of text parts (other parts are refused)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind != "text" or not isinstance(part.get("text"), str):
                raise BadRequest(
                    f"{where}: only text content is supported, not a {kind or type(part).__name__} part", param=where
                )
            texts.append(part["text"])
        return "\n".join(texts)
    raise BadRequest(f"{where}: content must be a string or a list of text parts", param=where)


def conversation_of(messages) -> Conversation:
    """The history and question of a `messages` list; the last message must be the user's."""
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages: a non-empty list of chat messages is required", param="messages")
    turns: list[list] = []  # [role, text] with consecutive roles joined
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        role = message.get("role") if isinstance(message, dict) else None
        if role in IGNORED_ROLES:
            continue
        if role == "tool" or role == "assistant" and message.get("tool_calls"):
            raise BadRequest(
                f"{where}: this agent runs its own tools; messages about a client's tool calls are not accepted",
                param=where,
            )
        if role not in ("user", "assistant"):
            raise BadRequest(f"{where}: role must be user, assistant or system, not {role!r}", param=where)
        text = text_of(message.get("content"), where)
        if turns and turns[-1][0] == role:
            turns[-1][1] += "\n\n" + text
        else:
            turns.append([role, text])
    if not turns or turns[-1][0] != "user":
        raise BadRequest("messages: the last message must be the user's question", param="messages")
    *earlier, (_, question) = turns
    if not question.strip():
        raise BadRequest("messages: the question (the last user message) is empty", param="messages")
    history, pending = [], ""  # roles alternate now, and the turn before the question is an answer
    for role, text in earlier:
        if role == "user":
            pending = text
        else:  # an answer before any question pairs with an empty one
            history.append((pending, text))
            pending = ""
    return Conversation(history, question)
