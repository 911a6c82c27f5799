"""The tool calls of an OpenAI-compatible reply: whole in a JSON body, or in pieces in a stream."""

from __future__ import annotations

import json

#: The message fields sent: the tools protocol's turns carry tool_calls, results their call id and name.
MESSAGE_KEYS = ("role", "content", "tool_calls", "tool_call_id", "name")


class ToolCallPieces:
    """The `tool_calls` of a reply, whole (a JSON body) or in streamed pieces: each delta names its
    call's `index`, and its `function.arguments` text continues the call's earlier pieces."""

    def __init__(self):
        self.calls: dict[int, dict] = {}

    def add(self, pieces) -> None:
        for n, piece in enumerate(pieces if isinstance(pieces, list) else []):
            if not isinstance(piece, dict):
                continue
            index = piece.get("index") if isinstance(piece.get("index"), int) else n
            call = self.calls.setdefault(index, {"id": None, "name": "", "arguments": ""})
            function = piece.get("function") if isinstance(piece.get("function"), dict) else {}
            call["id"] = piece.get("id") or call["id"]
            name = function.get("name")
            if isinstance(name, str) and name != call["name"]:  # a server may repeat the whole name
                call["name"] += name
            arguments = function.get("arguments")
            if isinstance(arguments, dict):  # some servers send the object itself
                arguments = json.dumps(arguments, ensure_ascii=False)
            call["arguments"] += arguments if isinstance(arguments, str) else ""

    def result(self) -> list[dict] | None:
        """The calls in order, or None when the reply made none."""
        return [self.calls[i] for i in sorted(self.calls)] or None
