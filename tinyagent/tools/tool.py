"""Tools: self-describing callables the agent offers to the model."""

from __future__ import annotations

import contextvars
import inspect
import json
import re
import threading
import typing
from collections.abc import Callable

from . import json_schema

Text = str | dict  # a plain string, or {"en": ..., "zh": ...}


class ToolError(Exception):
    """An expected failure of a tool (bad argument, service down): becomes an observation."""


class ToolArgumentError(ToolError):
    """The model's arguments do not fit the tool's parameters."""


class ToolTimeout(ToolError):
    """The tool did not answer within the agent's `tool_timeout`."""


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
    #: True for a search engine's tool (a query in, passages out): the one the ReAct search policy and
    #: retrieve-then-answer search the question with when none is named (`tools.search_tool`).
    searches: bool = False
    #: True when the same arguments again can give a new result (e.g. `lookup` paging through
    #: matches), so the agent's repeated-call guard lets them through.
    repeatable: bool = False
    #: True when calls of one model reply (parallel tool calls) may run at the same time as other
    #: calls; False runs this tool's calls one after another.
    concurrent: bool = True

    def call(self, **kwargs) -> str:
        """Do the work with validated arguments; may return str, dict / list (sent as JSON) or an awaitable."""
        raise NotImplementedError

    def __call__(self, **kwargs) -> str:
        return run(self, self.validate(kwargs))

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
        try:
            return {
                name: json_schema.check(name, value, known[name].get("schema") or {}) for name, value in args.items()
            }
        except ValueError as e:
            raise ToolArgumentError(str(e)) from None


# --- calling -----------------------------------------------------------------------------------


def run(tool: Tool, arguments: dict) -> str:
    """Call `tool` with already validated `arguments`: await an async result, serialise it as text."""
    result = tool.call(**arguments)
    if inspect.isawaitable(result):
        result = _wait_for(result, tool.name_for_model)
    return serialise(result)


def serialise(result) -> str:
    """A tool result as observation text: str as is, dict / list / tuple as JSON, anything else str()."""
    if isinstance(result, str):
        return result
    if isinstance(result, (dict, list, tuple)):
        return json.dumps(result, ensure_ascii=False, default=str)
    return str(result)


def _wait_for(awaitable, tool_name: str):
    """The result of `awaitable`, in a fresh event loop; in a thread of its own if this one runs a loop."""
    import asyncio  # here, not at the top: `import tinyagent` stays free of asyncio

    async def main():
        return await awaitable

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(main())
    return _in_thread(lambda: asyncio.run(main()), None, tool_name)


def invoke(tool: Tool, arguments: dict, timeout: float | None = None) -> str:
    """`run(tool, arguments)`, giving up after `timeout` seconds (None: wait as long as it takes).

    The call runs in a daemon worker thread, so a tool that hangs costs that thread, not the run
    (Python cannot stop a thread); ToolTimeout says so. The tool's own exceptions pass through.
    """
    if timeout is None:
        return run(tool, arguments)
    if timeout <= 0:
        raise ValueError(f"timeout must be a positive number of seconds or None, not {timeout}")
    return _in_thread(lambda: run(tool, arguments), timeout, tool.name_for_model)


def _in_thread(fn: Callable, timeout: float | None, tool_name: str):
    """fn() in a daemon thread; its result or its exception, or ToolTimeout after `timeout` seconds."""
    done = threading.Event()
    outcome: dict = {}

    def work() -> None:
        try:
            outcome["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the caller, who re-raises it
            outcome["error"] = e
        finally:
            done.set()

    context = contextvars.copy_context()  # the caller's context variables, as a direct call would see
    threading.Thread(target=context.run, args=(work,), name=f"tinyagent tool {tool_name}", daemon=True).start()
    if not done.wait(timeout):
        raise ToolTimeout(f"the tool {tool_name} did not answer within {timeout:g} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


class FunctionTool(Tool):
    """A Tool wrapping a plain Python function; made by `@tool`."""

    def __init__(
        self, fn: Callable, name: str | None = None, name_for_human: Text | None = None, description: Text | None = None
    ):
        summary, arg_docs = _parse_docstring(inspect.getdoc(fn) or "")
        self.fn = fn
        self.name_for_model = name or fn.__name__
        self.name_for_human = name_for_human or self.name_for_model.replace("_", " ").title()
        self.description_for_model = description or summary
        self.parameters, self._converters = _parameters_from_signature(fn, arg_docs)
        self.__doc__ = fn.__doc__

    def call(self, **kwargs):
        """The function with its arguments as it typed them (Enum members, not their values)."""
        for name, convert in self._converters.items():
            if name in kwargs:
                kwargs[name] = convert(kwargs[name])
        return self.fn(**kwargs)

    def __repr__(self) -> str:
        return f"<tool {self.name_for_model}>"


def tool(
    fn: Callable | None = None,
    *,
    name: str | None = None,
    name_for_human: Text | None = None,
    description: Text | None = None,
):
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


def _parameters_from_signature(fn: Callable, arg_docs: dict[str, str]) -> tuple[list[dict], dict[str, Callable]]:
    """The parameter list for the prompt, and a converter for each parameter that needs one."""
    params, converters = [], {}
    hints = typing.get_type_hints(fn)
    for p in inspect.signature(fn).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        annotation = hints.get(p.name, p.annotation)
        params.append(
            {
                "name": p.name,
                "description": arg_docs.get(p.name, ""),
                "required": p.default is inspect.Parameter.empty,
                "schema": json_schema.schema_of(annotation),
            }
        )
        convert = json_schema.converter(annotation)
        if convert is not None:
            converters[p.name] = convert
    return params, converters
