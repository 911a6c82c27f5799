"""A tool's arguments from what a model wrote after `Action Input:`, and the form to copy instead.

Pure text in, data out: JSON objects that are almost right are repaired; a plain string goes to a
tool's one parameter; anything else raises ActionInputError with a message for the model.
"""
from __future__ import annotations

import json
import re

import json5

from ..text import clip

FENCE = re.compile(r"```[a-zA-Z0-9_-]*[ \t]*\n?(.*?)(?:```|$)", re.DOTALL)


class ActionInputError(ValueError):
    """The action input cannot be read as this tool's arguments; the message tells the model what to write."""


class NestedTooDeeply(ActionInputError):
    """The action input nests objects or lists past MAX_ARGS_DEPTH."""


# --- reading arguments ----------------------------------------------------------------------------------

MAX_ARGS_CHARS = 20_000
#: Objects and lists nested deeper than this are refused: no tool needs it, and the copies a run makes of
#: its arguments (traces, the repeated-call guard) recurse once per level.
MAX_ARGS_DEPTH = 20
_FULL_WIDTH = str.maketrans({"“": '"', "”": '"', "‘": "'", "’": "'", "：": ":", "，": ",",
                             "｛": "{", "｝": "}", "［": "[", "］": "]"})


def read_arguments(text: str, tool=None) -> dict:
    """A tool's arguments from what the model wrote after `Action Input:`.

    A JSON object (json5, fenced, full-width punctuation, prose after it, a missing closing brace, raw
    newlines in strings) is the arguments. Anything else is a plain string, accepted when `tool` has
    exactly one required parameter (or exactly one parameter).
    """
    text = (text or "").strip()
    fence = FENCE.match(text)
    if fence:
        text = fence.group(1).strip()
    if not text:
        return {}
    if len(text) > MAX_ARGS_CHARS:
        raise ActionInputError(f"the Action Input is too long ({len(text)} characters)")
    if text[0] in "{｛":
        return _from_parameter_format(parse_object(text), tool)
    if text[0] in "[［":
        raise ActionInputError('the Action Input must be a JSON object such as {"name": "value"}, not a list')
    param = _single_parameter(tool)
    if param is None:
        names = ", ".join(p["name"] for p in getattr(tool, "parameters", [])) or "none"
        raise ActionInputError(f"the Action Input is not valid JSON: {clip(text, 100)!r}; write a JSON object with "
                               f"the parameter names ({names})")
    return {param["name"]: _plain_value(text, _json_type(param.get("schema") or {}))}


def bad_input_message(tool, error: Exception) -> str:
    """What a model is told when its arguments do not fit `tool`, with the form to copy."""
    return f"bad Action Input for {tool.name_for_model}: {error}. Write: Action Input: {skeleton(tool)}"


def _single_parameter(tool) -> dict | None:
    params = list(getattr(tool, "parameters", None) or [])
    required = [p for p in params if p.get("required")]
    if len(required) == 1:
        return required[0]
    return params[0] if len(params) == 1 else None


def _json_type(schema: dict) -> str | None:
    """A parameter's JSON type; of a list such as ["integer", "null"] (an optional one), the first that is not null."""
    kind = schema.get("type")
    return next((k for k in kind if k != "null"), None) if isinstance(kind, list) else kind


def _plain_value(text: str, json_type: str | None):
    """A plain-string input as the value of its one parameter: quotes removed; numbers kept as
    numbers for a numeric parameter."""
    try:
        value = json.loads(text)
    except ValueError:
        value = text
    if isinstance(value, str):
        return value
    if json_type in ("integer", "number", "boolean") or (json_type is None and not isinstance(value, (dict, list))):
        return value
    return text


_SPEC_KEYS = {"name", "description", "required", "schema", "type"}


def _from_parameter_format(value: dict, tool) -> dict:
    """Arguments written in the shape of the prompt's parameter list, read as a reader would.

    `{"expression": "2+2", "required": true, "schema": {...}}` keeps the parameters and drops the copied
    keys; `{"name": "expression", "description": "2+2", ...}` puts the value where the description was.
    A description copied unchanged from the tool is not a value: that raises.
    """
    params = {p["name"]: p for p in getattr(tool, "parameters", None) or []}
    copied = (set(value) & _SPEC_KEYS) - set(params)
    if not params or len(copied) < 2 and not (copied and set(value) - copied):
        return value
    if set(value) - _SPEC_KEYS:
        return {k: v for k, v in value.items() if k not in copied}
    name, given = value.get("name"), value.get("description")
    if name in params and given not in (None, "") and not _is_tool_description(given, params[name]):
        return {name: given}
    raise ActionInputError("that is the tool's parameter description, not its arguments; write the values "
                           "instead")


def _is_tool_description(text, param: dict) -> bool:
    described = param.get("description") or ""
    texts = described.values() if isinstance(described, dict) else [described]
    return isinstance(text, str) and text.strip().casefold() in {t.strip().casefold() for t in texts}


def parse_object(text: str) -> dict:
    """A JSON object from `text`: JSON or json5, maybe followed by prose, with full-width
    punctuation, raw newlines inside strings, or missing closing brackets; not nested past MAX_ARGS_DEPTH."""
    _check_nesting(text_depth(text))
    for candidate in _candidates(text):
        for load in (lambda s: json.loads(s, strict=False), json5.loads):
            try:
                value = load(candidate)
            except Exception:  # json / json5 raise several types on malformed or deeply nested input
                continue
            if isinstance(value, dict):
                return value
            raise ActionInputError('the Action Input must be a JSON object such as {"name": "value"}, '
                                   f"not {type(value).__name__}")
    raise ActionInputError(f"the Action Input is not valid JSON: {clip(text, 100)!r}. Write a JSON object such as "
                           '{"name": "value"} with the parameter names of the tool')


def text_depth(text: str) -> int:
    """How deep the brackets outside quoted strings of `text` nest."""
    depth = deepest = 0
    for _, ch in _Unquoted(text):
        if ch in "{[｛［":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "}]｝］":
            depth = max(0, depth - 1)
    return deepest


def value_depth(value) -> int:
    """How deep dicts and lists nest in `value` (1 for a flat object), counted without recursion."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, depth = todo.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, depth)
            if depth <= MAX_ARGS_DEPTH:  # deeper is refused anyway: no need to walk it all
                todo += [(v, depth + 1) for v in (item.values() if isinstance(item, dict) else item)]
    return deepest


def check_arguments_depth(arguments) -> None:
    """ActionInputError when `arguments` nest past MAX_ARGS_DEPTH."""
    _check_nesting(value_depth(arguments))


def _check_nesting(depth: int) -> None:
    if depth > MAX_ARGS_DEPTH:
        raise NestedTooDeeply(f"the Action Input is nested {depth} levels deep (the limit is {MAX_ARGS_DEPTH}); "
                               "write a flatter JSON object")


def _candidates(text: str):
    seen = []
    for t in (text, text.translate(_FULL_WIDTH)):
        start = t.find("{")
        for c in (balanced_object(t, start), t, _closed(t[start:]) if start >= 0 else None):
            if c and c not in seen:
                seen.append(c)
                yield c


class _Unquoted:
    """Iterates (index, character) over `text` from `start`, skipping quoted strings (JSON or json5
    quotes, with backslash escapes); afterwards `quote` is the quote still open ('' when none)."""

    def __init__(self, text: str, start: int = 0):
        self.text, self.start, self.quote = text, start, ""

    def __iter__(self):
        escaped = False
        for i in range(self.start, len(self.text)):
            ch = self.text[i]
            if self.quote:
                if escaped:
                    escaped = False
                elif ch == "\\":
                    escaped = True
                elif ch == self.quote:
                    self.quote = ""
            elif ch in "\"'":
                self.quote = ch
            else:
                yield i, ch


def balanced_object(text: str, start: int) -> str | None:
    """The substring from `start` ('{') to its matching '}', respecting quoted strings."""
    if start < 0:
        return None
    depth = 0
    for i, ch in _Unquoted(text, start):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[start: i + 1]
    return None


def _closed(text: str) -> str | None:
    """`text` (an object cut short) with its open string and brackets closed, or None."""
    stack, scan = [], _Unquoted(text)
    for _, ch in scan:
        if ch in "{[":
            stack.append("}" if ch == "{" else "]")
        elif ch in "}]":
            if not stack:
                return None
            stack.pop()
    if not stack or len(stack) > 8:
        return None
    return text.rstrip().rstrip(",") + scan.quote + "".join(reversed(stack))


# --- the form to copy ----------------------------------------------------------------------

_PLACEHOLDER = {"string": "...", "integer": 1, "number": 1, "boolean": True, "array": [], "object": {}}


def skeleton(tool) -> str:
    """A tool's Action Input as a literal JSON object with placeholder values, for a model to copy."""
    params = list(getattr(tool, "parameters", None) or [])
    shown = [p for p in params if p.get("required")] or params
    values = {}
    for p in shown:
        schema = p.get("schema") or {}
        values[p["name"]] = schema["enum"][0] if schema.get("enum") else _PLACEHOLDER.get(_json_type(schema), "...")
    return json.dumps(values, ensure_ascii=False)
