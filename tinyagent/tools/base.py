"""Tools: self-describing callables the agent offers to the model."""
from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Callable

Text = str | dict  # a plain string, or {"en": ..., "zh": ...}

_JSON_TYPES: dict[type, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    list: "array",
    tuple: "array",
    dict: "object",
}


class ToolError(Exception):
    """An expected failure of a tool (bad argument, service down): becomes an observation."""


class ToolArgumentError(ToolError):
    """The model's arguments do not fit the tool's parameters."""


def localized(text: Text, lang: str) -> str:
    """Pick the `lang` version of a possibly bilingual text, falling back to English."""
    if isinstance(text, dict):
        return text.get(lang) or text.get("en") or next(iter(text.values()), "")
    return text


class Tool:
    """A tool in TinyAgent's shape.

    Subclasses set `name_for_model`, `name_for_human`, `description_for_model`, `parameters`
    and implement `call(**kwargs) -> str`. `name_for_human` and `description_for_model` may
    be {"en": ..., "zh": ...} so the prompt matches the agent's language.
    `parameters` is a list of {"name", "description", "required", "schema": {"type": ...}}.
    """

    name_for_model: str = ""
    name_for_human: Text = ""
    description_for_model: Text = ""
    parameters: list[dict] = []
    #: True when the same arguments again can give a new result (e.g. `lookup` paging through
    #: matches), so the agent's repeated-call guard lets them through.
    repeatable: bool = False

    def call(self, **kwargs) -> str:
        raise NotImplementedError

    def __call__(self, **kwargs) -> str:
        return str(self.call(**self.validate(kwargs)))

    def human_name(self, lang: str = "en") -> str:
        return localized(self.name_for_human, lang) or self.name_for_model

    def description(self, lang: str = "en") -> str:
        return localized(self.description_for_model, lang)

    def parameters_for(self, lang: str = "en") -> list[dict]:
        """The parameter list with descriptions in `lang`, for the prompt."""
        return [{**p, "description": localized(p.get("description", ""), lang)} for p in self.parameters]

    def json_schema(self) -> dict:
        """The arguments as a JSON schema object (for constrained decoding and servers)."""
        props = {p["name"]: dict(p.get("schema") or {}) for p in self.parameters}
        required = [p["name"] for p in self.parameters if p.get("required")]
        return {"type": "object", "properties": props, "required": required, "additionalProperties": False}

    def validate(self, args: dict) -> dict:
        """Check the model's arguments against `parameters`; raise ToolArgumentError if they do not fit."""
        if not isinstance(args, dict):
            raise ToolArgumentError("the arguments must be a JSON object")
        known = {p["name"]: p for p in self.parameters}
        unknown = [k for k in args if k not in known]
        if unknown:
            raise ToolArgumentError(
                f"unknown parameter(s) {', '.join(map(repr, unknown))}; "
                f"{self.name_for_model} takes: {', '.join(known) or 'no parameters'}"
            )
        missing = [n for n, p in known.items() if p.get("required") and n not in args]
        if missing:
            raise ToolArgumentError(f"missing required parameter(s): {', '.join(map(repr, missing))}")
        out = {}
        for name, value in args.items():
            expected = (known[name].get("schema") or {}).get("type")
            out[name] = _check_type(name, value, expected)
        return out


def _check_type(name: str, value, expected: str | None):
    if expected is None:
        return value
    ok = {
        "string": lambda v: isinstance(v, str),
        "integer": lambda v: isinstance(v, int) and not isinstance(v, bool)
        or isinstance(v, float) and v.is_integer(),
        "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
        "boolean": lambda v: isinstance(v, bool),
        "array": lambda v: isinstance(v, list),
        "object": lambda v: isinstance(v, dict),
    }.get(expected, lambda v: True)
    if not ok(value):
        raise ToolArgumentError(
            f"parameter {name!r} must be of type {expected}, got {type(value).__name__} {value!r:.60}"
        )
    return int(value) if expected == "integer" else value


class FunctionTool(Tool):
    """A Tool wrapping a plain Python function; made by `@tool`."""

    def __init__(self, fn: Callable, name: str | None = None, name_for_human: Text | None = None,
                 description: Text | None = None):
        summary, arg_docs = _parse_docstring(inspect.getdoc(fn) or "")
        self.fn = fn
        self.name_for_model = name or fn.__name__
        self.name_for_human = name_for_human or self.name_for_model.replace("_", " ").title()
        self.description_for_model = description or summary
        self.parameters = _parameters_from_signature(fn, arg_docs)
        self.__doc__ = fn.__doc__

    def call(self, **kwargs) -> str:
        return self.fn(**kwargs)

    def __repr__(self) -> str:
        return f"<tool {self.name_for_model}>"


def tool(fn: Callable | None = None, *, name: str | None = None, name_for_human: Text | None = None,
         description: Text | None = None):
    """Turn a typed function with a docstring into a Tool.

    The name comes from the function, the description from the docstring's first part,
    the parameters from the signature (types, defaults) and the docstring's `Args:` section.
    Use bare (`@tool`) or with overrides (`@tool(name_for_human={"en": ..., "zh": ...})`).
    """
    def wrap(f: Callable) -> FunctionTool:
        return FunctionTool(f, name=name, name_for_human=name_for_human, description=description)

    return wrap(fn) if fn is not None else wrap


_SECTION = re.compile(r"^(Args|Arguments|Parameters|Returns|Raises|Yields|Examples?|Notes?)\s*:\s*$")


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into its summary and {arg: description}."""
    summary, args, section, current = [], {}, None, None
    for line in doc.splitlines():
        header = _SECTION.match(line.strip())
        if header:
            section, current = header.group(1), None
            continue
        if section is None:
            summary.append(line.strip())
        elif section in ("Args", "Arguments", "Parameters") and line.strip():
            m = re.match(r"^\s*(\*{0,2}\w+)\s*(\([^)]*\))?\s*:\s*(.*)$", line)
            if m and (current is None or _indent(line) <= args[current][1]):
                current = m.group(1).lstrip("*")
                args[current] = (m.group(3).strip(), _indent(line))
            elif current:
                text, indent = args[current]
                args[current] = (f"{text} {line.strip()}".strip(), indent)
    return " ".join(s for s in summary if s).strip(), {k: v[0] for k, v in args.items()}


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _json_type(annotation) -> str | None:
    """JSON schema type of a Python annotation (Optional[X] and X | None map to X)."""
    if annotation is inspect.Parameter.empty:
        return None
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _json_type(inner[0]) if len(inner) == 1 else None
    return _JSON_TYPES.get(origin or annotation)


def _parameters_from_signature(fn: Callable, arg_docs: dict[str, str]) -> list[dict]:
    params = []
    hints = typing.get_type_hints(fn)
    for p in inspect.signature(fn).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        json_type = _json_type(hints.get(p.name, p.annotation))
        params.append({
            "name": p.name,
            "description": arg_docs.get(p.name, ""),
            "required": p.default is inspect.Parameter.empty,
            "schema": {"type": json_type} if json_type else {},
        })
    return params


def invoke(tool: Tool, arguments: dict, timeout: float | None = None) -> str:
    """Run `tool` on validated `arguments` and return its output as text (placeholder; no timeout yet)."""
    return str(tool(**arguments))
