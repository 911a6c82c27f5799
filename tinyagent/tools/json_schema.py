"""Tool parameters as JSON schema: from Python type hints, and checking a model's arguments against it.

The schema subset used is what a prompt can show and constrained decoding can compile: `type`
(one name or a list of names), `enum`, and `items` for arrays. `check` raises ValueError with a
one-line message the agent shows the model; `converter` turns checked JSON values back into the
Python values a function asked for (Enum members).
"""

from __future__ import annotations

import enum
import inspect
import json
import types
import typing
from collections.abc import Callable

from ..text import clip

_JSON_TYPES: dict[type, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    list: "array",
    tuple: "array",
    set: "array",
    frozenset: "array",
    dict: "object",
    type(None): "null",
}
_SEQUENCES = (list, tuple, set, frozenset)


def schema_of(annotation) -> dict:
    """The JSON schema of a parameter annotation; {} (anything) for what JSON cannot express."""
    if annotation is inspect.Parameter.empty or annotation is typing.Any:
        return {}
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return schema_of(args[0])
    if origin in (typing.Union, types.UnionType):
        return _union_schema(args)
    if origin is typing.Literal:
        return _enum_schema(list(args))
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return _enum_schema([member.value for member in annotation])
    if origin in _SEQUENCES:
        schema = {"type": "array"}
        item = args[0] if args and (origin is not tuple or (len(args) == 2 and args[1] is Ellipsis)) else None
        items = schema_of(item) if item is not None else {}
        return {**schema, "items": items} if items else schema
    json_type = _JSON_TYPES.get(origin or annotation)
    return {"type": json_type} if json_type else {}


def _union_schema(args: tuple) -> dict:
    """X | None accepts null; int | float is a number; other unions of plain types list each type."""
    inner = [a for a in args if a is not type(None)]
    if len(inner) == 1:
        schema = schema_of(inner[0])
    elif all(a in (int, float) for a in inner):
        schema = {"type": "number"}
    else:
        parts = [schema_of(a) for a in inner]
        if not all(set(p) == {"type"} and isinstance(p["type"], str) for p in parts):
            return {}  # e.g. list[int] | dict: not expressible in this subset, so anything goes
        schema = {"type": list(dict.fromkeys(p["type"] for p in parts))}
    return _nullable(schema) if len(inner) < len(args) and schema else schema


def _nullable(schema: dict) -> dict:
    out = dict(schema)
    if "type" in out:
        kinds = out["type"] if isinstance(out["type"], list) else [out["type"]]
        out["type"] = [*kinds, "null"]
    if "enum" in out:
        out["enum"] = [*out["enum"], None]
    return out


def _enum_schema(values: list) -> dict:
    kinds = list(dict.fromkeys(_JSON_TYPES.get(type(v)) for v in values))
    if len(kinds) == 1 and kinds[0] is not None:
        return {"type": kinds[0], "enum": values}
    return {"enum": values}


def _fits(kind: str, value) -> bool:
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool) or isinstance(value, float) and value.is_integer()
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    expected = {"string": str, "boolean": bool, "array": list, "object": dict, "null": type(None)}.get(kind)
    return expected is None or isinstance(value, expected)


def check(name: str, value, schema: dict):
    """`value` if it fits `schema` (integral floats become ints); ValueError with a clear message if not."""
    if isinstance(value, enum.Enum):  # a Python caller passing the member itself
        value = value.value
    if "enum" in schema:
        for allowed in schema["enum"]:
            if value == allowed and isinstance(value, bool) == isinstance(allowed, bool):
                return allowed
        choices = ", ".join(json.dumps(v, ensure_ascii=False) for v in schema["enum"])
        raise ValueError(f"parameter {name!r} must be one of {choices}, got {_show(value)}")
    kinds = schema.get("type")
    if kinds is None:
        return value
    kinds = kinds if isinstance(kinds, list) else [kinds]
    kind = next((k for k in kinds if _fits(k, value)), None)
    if kind is None:
        raise ValueError(f"parameter {name!r} must be of type {' or '.join(kinds)}, got {_show(value)}")
    if kind == "integer":
        return int(value)
    if kind == "array" and schema.get("items"):
        return [check(f"{name}[{i}]", item, schema["items"]) for i, item in enumerate(value)]
    return value


def _show(value) -> str:
    return f"{type(value).__name__} {clip(repr(value), 60, '')}"


def converter(annotation) -> Callable | None:
    """A function turning a checked JSON value into what `annotation` asks for, or None if it is the same."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return converter(args[0])
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return lambda v: v if isinstance(v, annotation) else annotation(v)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        convert = converter(inner[0]) if len(inner) == 1 else None
        return (lambda v: None if v is None else convert(v)) if convert else None
    if origin is list and args:
        convert = converter(args[0])
        return (lambda v: [convert(x) for x in v]) if convert else None
    return None
