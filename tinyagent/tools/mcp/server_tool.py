"""One MCP tool as a `Tool`: its name, description and input schema for the prompt, the argument
check and constrained decoding; its `tools/call` result as the text of an observation.

What the server says about a tool is untrusted text, like its results: a tool whose name is not an MCP
tool name (`NAME`) is not used (server.py); titles and descriptions are one line without control
characters; chat-control tokens in names, descriptions and schemas are broken up, at any depth, before
they reach the prompt or `tools=`; descriptions are cut to `description_chars` wherever they are in a
schema, a schema nested past SCHEMA_DEPTH is cut there, and one still longer than SCHEMA_CHARS is
replaced by the compact schema of the ReAct prompt's parameter lines. A result is cut to
MAX_RAW_OBSERVATION_CHARS by the server (server.py), as the agent cuts every tool's."""

from __future__ import annotations

import json
import re
from typing import Protocol

from ...format.arguments import MAX_ARGS_DEPTH
from ...format.observations import neutralize_control_tokens
from ...text import clip
from ..tool import Tool

#: Tool and parameter descriptions longer than this are cut, so many tools still fit the prompt.
DESCRIPTION_CHARS = 300
#: A tool name as the MCP specification (2025-11-25) gives it: 1-128 ASCII letters, digits, `_`, `-` and `.`.
NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")
#: Containers nested deeper than this in an input schema are cut (any value) there: arguments nest at most
#: MAX_ARGS_DEPTH levels, and each level of an object schema is two (the object, its properties).
SCHEMA_DEPTH = 2 * MAX_ARGS_DEPTH + 2
#: An input schema longer than this (as JSON, once its descriptions are cut) is replaced by the compact one.
SCHEMA_CHARS = 8000
#: A tool's title, for people (and the human name the model may use), is cut to this.
TITLE_CHARS = 100
_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f]")


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
        title = next(
            (
                t
                for t in (spec.title, getattr(annotations, "title", None))
                if isinstance(t, str) and _shorten(t, TITLE_CHARS)
            ),
            spec.name,
        )
        self.name_for_human = neutralize_control_tokens(_shorten(title, TITLE_CHARS))
        self.description_for_model = neutralize_control_tokens(_shorten(_text(spec.description), description_chars))
        raw = spec.input_schema if isinstance(spec.input_schema, dict) else {}
        schema = bounded(raw, description_chars)
        properties = raw.get("properties") if isinstance(raw.get("properties"), dict) else {}
        self._server_keys = {neutralize_control_tokens(k): k for k in properties if isinstance(k, str)}
        self.parameters = _parameters(schema, description_chars)
        if len(json.dumps(schema, ensure_ascii=False)) > SCHEMA_CHARS:  # the compact one, from the parameter lines
            schema = {k: v for k, v in super().json_schema().items() if k != "additionalProperties"}
        self.input_schema = schema

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


def bounded(schema: dict, chars: int) -> dict:
    """`schema` as the model may see it: every text (keys too) with chat-control tokens broken up and control
    characters dropped, `description` and `title` texts cut to `chars`, containers nested past SCHEMA_DEPTH
    cut to an empty schema (any value); at any depth, walked without recursion."""
    root: dict = {}
    todo = [(schema, root, 1)]
    while todo:
        source, target, depth = todo.pop()
        items = source.items() if isinstance(source, dict) else enumerate(source)
        for key, value in items:
            key = _clean(key) if isinstance(key, str) else key
            if isinstance(value, str):
                value = _clean(_shorten(value, chars) if key in ("description", "title") else value)
            elif isinstance(value, (dict, list)):
                if depth >= SCHEMA_DEPTH:
                    value = {}
                else:
                    copy = {} if isinstance(value, dict) else [None] * len(value)
                    todo.append((value, copy, depth + 1))
                    value = copy
            target[key] = value
    return root


def _clean(text: str) -> str:
    return neutralize_control_tokens(_CONTROLS.sub("", text))


def _parameters(schema: dict, chars: int) -> list[dict]:
    """`Tool.parameters` from a JSON schema's properties, compact enough for the prompt."""
    required = (
        {r for r in schema.get("required") or [] if isinstance(r, str)}
        if isinstance(schema.get("required"), list)
        else set()
    )
    properties = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
    params = []
    for name, prop in properties.items():
        prop = prop if isinstance(prop, dict) else {}
        shown = {k: v for k, v in prop.items() if k not in ("title", "description")}
        if not isinstance(shown.get("type"), str):  # a list of types: left to the server to check
            shown.pop("type", None)
        if len(json.dumps(shown, ensure_ascii=False)) > chars:
            shown = {"type": shown["type"]} if "type" in shown else {}
        params.append(
            {
                "name": name,
                "description": _shorten(_text(prop.get("description")), chars),
                "required": name in required,
                "schema": shown,
            }
        )
    return params


def _text(value) -> str:
    return value if isinstance(value, str) else ""


def _shorten(text: str, chars: int) -> str:
    """One line without control characters, cut to `chars`."""
    return clip(" ".join(_CONTROLS.sub(" ", text).split()), chars, "...")
