"""One MCP tool as a `Tool`: its name, description and input schema for the prompt, the argument
check and constrained decoding; its `tools/call` result as the text of an observation.

What the server says about a tool is untrusted text, like its results: chat-control tokens in names,
descriptions and schemas are broken up before they reach the prompt; a result is cut to
MAX_RAW_OBSERVATION_CHARS by the server (server.py), as the agent cuts every tool's."""
from __future__ import annotations

import json
from typing import Protocol

from ...format.observations import neutralize_control_tokens, neutralized
from ...text import clip
from ..tool import Tool

#: Tool and parameter descriptions longer than this are cut, so many tools still fit the prompt.
DESCRIPTION_CHARS = 300


class ToolServer(Protocol):
    """What an MCP tool needs of its server (`MCPServer` is one)."""

    label: str

    def call_tool(self, name: str, arguments: dict) -> str:
        """Run the tool; the result as text, or ToolError."""


class MCPTool(Tool):
    """One tool of an MCP server, described by the server's name, description and input schema."""

    def __init__(self, server: ToolServer, spec, description_chars: int = DESCRIPTION_CHARS):
        self.server = server
        self.server_name = spec.name  # what `tools/call` is sent; the prompt's names are neutralised
        self.name_for_model = neutralize_control_tokens(spec.name)
        annotations = getattr(spec, "annotations", None)
        self.name_for_human = neutralize_control_tokens(spec.title or getattr(annotations, "title", None) or spec.name)
        self.description_for_model = neutralize_control_tokens(_shorten(spec.description or "", description_chars))
        self.input_schema = neutralized(dict(spec.input_schema or {}))
        self._server_keys = {neutralize_control_tokens(k): k for k in (spec.input_schema or {}).get("properties") or {}
                             if isinstance(k, str)}
        self.parameters = _parameters(self.input_schema, description_chars)

    def call(self, **kwargs) -> str:
        arguments = {self._server_keys.get(k, k): v for k, v in kwargs.items()}
        return self.server.call_tool(self.server_name, arguments)

    def json_schema(self) -> dict:
        """The server's own input schema (richer than `parameters`), closed to other keys unless it says so."""
        schema = {k: v for k, v in self.input_schema.items() if k not in ("title", "description", "$schema")}
        return {"type": "object", "properties": {}, "additionalProperties": False, **schema}

    def __repr__(self) -> str:
        return f"<tool {self.name_for_model} of MCP server {self.server.label}>"


def result_text(result) -> str:
    """A `tools/call` result as text: its text parts joined, structured content as JSON when there is no text."""
    parts = []
    for block in result.content or []:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind == "resource":
            resource = block.resource
            parts.append(getattr(resource, "text", None) or f"[resource {resource.uri}]")
        elif kind == "resource_link":
            parts.append(f"[resource {block.uri}]")
        else:  # image, audio: the model reads text only
            parts.append(f"[{kind} {getattr(block, 'mime_type', '')}]".replace(" ]", "]"))
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts)


def _parameters(schema: dict, chars: int) -> list[dict]:
    """`Tool.parameters` from a JSON schema's properties, compact enough for the prompt."""
    required = set(schema.get("required") or [])
    params = []
    for name, prop in (schema.get("properties") or {}).items():
        prop = prop if isinstance(prop, dict) else {}
        shown = {k: v for k, v in prop.items() if k not in ("title", "description")}
        if not isinstance(shown.get("type"), str):  # a list of types: left to the server to check
            shown.pop("type", None)
        if len(json.dumps(shown, ensure_ascii=False)) > chars:
            shown = {"type": shown["type"]} if "type" in shown else {}
        params.append({"name": name, "description": _shorten(prop.get("description") or "", chars),
                       "required": name in required, "schema": shown})
    return params


def _shorten(text: str, chars: int) -> str:
    return clip(" ".join(text.split()), chars, "...")
