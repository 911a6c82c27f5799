"""Reading a reply in the model's own tool-call format: the calls it makes (one or several), or its answer.

As forgiving as the ReAct reader, since small models rarely write the format exactly: the family's tags
or any other family's (`tool_formats`), half tags (a call cut short, a close tag without its open), fenced
or bare JSON call objects, a ReAct step written instead; tool names resolved as `names.find_tool` does and
arguments read by the one argument reader (`arguments.read_arguments`). Calls a server or a response
template already parsed (`structured`) are read the same way. Reasoning (`<think>`) is not read, except
for a family that writes its call there. Pure text in, `Reading`s out.
"""

from __future__ import annotations

import ast
import bisect
import json
import re

from ..text import mask_thinking
from .arguments import (
    FENCE,
    MAX_ARGS_CHARS,
    MAX_ARGS_DEPTH,
    ActionInputError,
    balanced_object,
    parse_object,
    read_arguments,
    skeleton,
)
from .extents import ObjectExtents
from .kinds import StepKind
from .names import find_tool
from .reading import Reading, answer_value, read_step
from .tool_formats import FORMATS, MARKERS, ToolFormat

_TAGS = {  # family -> a call's tagged span; group 1 is its body (its spaces stripped later: no `\s*` after a lazy
    # group, which would read a long run of spaces once per character of it)
    "hermes": re.compile(r"<tool_call>\s*(.*?)(?:</tool_call>|(?=<tool_call>)|$)", re.DOTALL),
    "internlm2": re.compile(r"<\|action_start\|>\s*(?:<\|plugin\|>)?\s*(.*?)(?:<\|action_end\|>|$)", re.DOTALL),
    "mistral": re.compile(r"\[TOOL_CALLS\]\s*(.*?)(?=\[TOOL_CALLS\]|$)", re.DOTALL),
    "llama3": re.compile(r"<\|python_tag\|>\s*(.*?)(?:<\|eom_id\|>|<\|eot_id\|>|$)", re.DOTALL),
}
_V11 = re.compile(r"([A-Za-z_][\w.\-]*)\s*(?:\[CALL_ID\]\s*\S+?\s*)?\[ARGS\]\s*(.*)", re.DOTALL)  # Mistral v11
_PY_CALL = re.compile(r"([A-Za-z_]\w*)\.call\((.*)\)\s*$", re.DOTALL)  # Llama 3 built-in tools
_NAME_KEYS = ("name", "action", "tool", "tool_name", "function")
_ARGS_KEYS = ("arguments", "parameters", "action_input", "args", "input", "tool_input")
_CALL_START = re.compile(r"(?:^|\n)[ \t]*(?:```[a-zA-Z]*[ \t]*\n?[ \t]*)?[\[{]")
_FINISH = {"final_answer", "final answer", "finish", "answer"}


def read_calls(
    reply: str, tools=(), fmt: ToolFormat | None = None, lang: str = "en", structured: list[dict] | None = None
) -> list[Reading]:
    """What one reply does: a Reading per call (ACTION, or UNKNOWN_TOOL / BAD_INPUT / MALFORMED), or one
    FINAL_ANSWER, EMPTY or MALFORMED Reading. The first Reading holds the reply as `text`; `thought` is
    the text beside the calls."""
    tools, fmt = list(tools), fmt or FORMATS["hermes"]
    visible = mask_thinking(reply)
    if structured:
        calls = [(c.get("name"), c.get("arguments"), c.get("id")) for c in structured]
        return _readings(reply, visible, calls, tools, fmt)
    calls, rest, tagged = _tagged_calls(visible, fmt)
    if not calls and not tagged:
        calls, rest = _bare_calls(visible)
    if not calls and not tagged and not rest.strip() and fmt.calls_in_thinking and reply.strip():
        calls, rest, tagged = _tagged_calls(reply, fmt)  # a call written inside the reasoning block
        rest = mask_thinking(rest)
    if calls:
        return _readings(reply, rest, [(n, a, None) for n, a in calls], tools, fmt)
    if tagged:
        return [_error(StepKind.MALFORMED, reply, "the tool call could not be read", tools, fmt)]
    if not visible.strip():
        if reply.strip():
            return [
                _error(
                    StepKind.MALFORMED,
                    reply,
                    "your reply had reasoning but no answer or tool call after it",
                    tools,
                    fmt,
                )
            ]
        return [_error(StepKind.EMPTY, reply, "your reply was empty", tools, fmt)]
    react = read_step(reply, tools, lang)
    if react.kind in (StepKind.ACTION, StepKind.BAD_INPUT, StepKind.UNKNOWN_TOOL, StepKind.FINAL_ANSWER):
        react.text = reply.rstrip()  # a ReAct step written instead: read as such
        return [react]
    return [Reading(StepKind.FINAL_ANSWER, reply.rstrip(), answer=_without_markers(visible).strip())]


def _readings(reply: str, rest: str, calls: list[tuple], tools, fmt: ToolFormat) -> list[Reading]:
    readings = [_call(name, args, tools, fmt, call_id) for name, args, call_id in calls]
    readings[0].text, readings[0].thought = reply.rstrip(), _without_markers(rest).strip()
    return readings


# --- finding calls --------------------------------------------------------------------------------


def _tagged_calls(text: str, fmt: ToolFormat) -> tuple[list[tuple], str, bool]:
    """Calls in tagged spans (the family's tags first): (calls, the text outside them, whether any tag was
    found). A close tag without its open is dropped, and the call object before it read as bare JSON."""
    order = [fmt.name, *(name for name in _TAGS if name != fmt.name)]
    for name in order:
        spans = list(_TAGS[name].finditer(text))
        if not spans:
            continue
        calls = [call for m in spans for call in _body_calls(m.group(1))]
        rest, at = "", 0
        for m in spans:
            rest, at = rest + text[at : m.start()], m.end()
        return calls, rest + text[at:], True
    if "</tool_call>" in text:
        calls, rest = _bare_calls(text.replace("</tool_call>", ""))
        return calls, rest, True
    return [], text, False


def _bare_calls(text: str) -> tuple[list[tuple], str]:
    """Call objects written without tags (fenced or bare JSON at a line start): (calls, the text before).

    In time linear in the reply: each line that opens an object is read once, as far as its object goes
    (`ObjectExtents`); one that never closes (a reply cut short), only as far as the next such line, so a
    reply of many unfinished lines is not read to its end once per line."""
    candidates = [(m, text.find("{", m.end() - 1)) for m in _CALL_START.finditer(text)]
    extents = ObjectExtents(text, [at for m, at in candidates if at >= 0 and "```" not in m.group(0)])
    unclosed = [at for at in extents.starts if extents.end(at) is None]
    tried: set[int] = set()
    for m, at in candidates:
        if at < 0:
            break  # no object after this line, nor after any later one
        if "```" in m.group(0):
            fence = FENCE.match(text, text.rfind("```", 0, at))
            calls = _body_calls(fence.group(1)) if fence else []  # a fence ends at the next one: read once
        elif at in tried or extents.depth(at) > MAX_ARGS_DEPTH and extents.end(at) is not None:
            continue  # read already (a list's lines share its first object), or refused as nested too deeply
        else:
            tried.add(at)
            later = bisect.bisect_right(unclosed, at)
            end = extents.end(at) or (unclosed[later] if later < len(unclosed) else len(text))
            calls = _object_calls(text, at, end)
        if calls:
            return calls, text[: m.start()]
    return [], text


def _object_calls(text: str, at: int, end: int) -> list[tuple]:
    """The calls in the object text[at:end] and in the objects that follow it (joined by `;`, in a list),
    up to the first that is not a call."""
    calls = []
    while True:
        try:
            value = parse_object(_without_markers(text[at:end]))
        except ActionInputError:
            break
        call = _as_call(value)
        if call is None:
            break
        calls.append(call)
        at = text.find("{", end)
        if at < 0:
            break
        end = at + len(balanced_object(text, at) or text[at:])
    return calls


def _body_calls(body: str) -> list[tuple]:
    """The (name, arguments) calls in one span's body: JSON objects (alone, in a list, joined by `;`),
    Mistral v11's `name[ARGS]{...}`, or Llama's `name.call(key=value)`."""
    fence = FENCE.match(body.strip())
    body = (fence.group(1) if fence else body).strip()
    v11 = _V11.match(body)
    if v11:
        return [(v11.group(1), v11.group(2).strip())]
    body = _without_markers(body)
    py = _PY_CALL.match(body)
    if py:
        return [(py.group(1), _keyword_arguments(py.group(2)))]
    calls, at = [], body.find("{")
    while at >= 0:
        text = balanced_object(body, at) or body[at:]
        try:
            value = parse_object(text)
        except ActionInputError:
            break
        call = _as_call(value)
        if call is None:
            break
        calls.append(call)
        at = body.find("{", at + len(text))
    return calls


def _as_call(value: dict) -> tuple | None:
    """(name, arguments) of a call object such as {"name": ..., "arguments": ...}, or None."""
    if isinstance(value.get("function"), dict):  # OpenAI's {"type": "function", "function": {...}}
        value = value["function"]
    lowered = {str(k).lower(): v for k, v in value.items()}
    name = next((lowered[k] for k in _NAME_KEYS if isinstance(lowered.get(k), str)), None)
    args_key = next((k for k in _ARGS_KEYS if k in lowered), None)
    if name is None or (args_key is None and len(lowered) > 1):
        return None
    return name, lowered[args_key] if args_key else {}


def _keyword_arguments(text: str) -> dict | str | ActionInputError:
    """Llama's `name.call(key=value, ...)` arguments as JSON values; the text itself when it is not a call's
    arguments (read as JSON then), or an ActionInputError for values that are Python but not JSON (bytes,
    sets, ...) or nest too deep."""
    if len(text) > MAX_ARGS_CHARS:
        return text  # refused as too long when read
    try:
        call = ast.parse(f"f({text})", mode="eval").body
        values = {k.arg: ast.literal_eval(k.value) for k in call.keywords if k.arg}
    except (SyntaxError, ValueError, TypeError):
        return text
    except (RecursionError, MemoryError):  # thousands of nested operators: Python's parser gives up
        return ActionInputError("the arguments nest too deeply; write them as a flat JSON object")
    for key, value in values.items():
        problem = _not_json(value)
        if problem:
            return ActionInputError(
                f"the value of {key} is {problem}; write JSON values (strings, numbers, "
                "true, false, null, lists, objects)"
            )
    return values


def _not_json(value) -> str | None:
    """What in a Python literal has no JSON form (bytes, a set, a complex number, a non-text key), or None;
    also past MAX_ARGS_DEPTH levels of nesting. Walked without recursion."""
    todo = [(value, 1)]
    while todo:
        item, depth = todo.pop()
        if depth > MAX_ARGS_DEPTH:
            return f"nested more than {MAX_ARGS_DEPTH} levels deep"
        if isinstance(item, (list, tuple)):
            todo += [(v, depth + 1) for v in item]
        elif isinstance(item, dict):
            if not all(isinstance(k, str) for k in item):
                return "an object with keys that are not text"
            todo += [(v, depth + 1) for v in item.values()]
        elif not (item is None or isinstance(item, (str, bool, int, float))):
            return f"a Python {type(item).__name__}, which JSON has no form for"
    return None


# --- one call -------------------------------------------------------------------------------------


def _call(name, args, tools, fmt: ToolFormat, call_id: str | None) -> Reading:
    if not isinstance(name, str) or not name.strip():
        return _error(StepKind.MALFORMED, "", "the tool call has no tool name", tools, fmt, call_id=call_id)
    tool = find_tool(name, tools)
    problem = args if isinstance(args, ActionInputError) else None  # Python values JSON has no form for
    args = None if problem is not None else args
    if tool is None and name.strip().lower() in _FINISH:
        return Reading(StepKind.FINAL_ANSWER, "", answer=answer_value(args))
    raw = args if isinstance(args, str) else json.dumps(args if args is not None else {}, ensure_ascii=False)
    if tool is None:
        valid = ", ".join(t.name_for_model for t in tools) or "none"
        return _error(
            StepKind.UNKNOWN_TOOL,
            "",
            f"unknown tool {name.strip()!r}. Valid tools: {valid}",
            tools,
            fmt,
            action=name.strip(),
            action_input=raw,
            call_id=call_id,
        )
    reading = Reading(StepKind.ACTION, "", action=tool.name_for_model, action_input=raw, call_id=call_id)
    if problem is not None:
        return _bad_arguments(reading, tool, problem, fmt)
    try:  # an object too: the reader drops what a model copied from the schema ("required": [...])
        reading.arguments = read_arguments(raw if args is not None else "", tool)
    except ActionInputError as e:
        return _bad_arguments(reading, tool, e, fmt)
    return reading


def _bad_arguments(reading: Reading, tool, error: ActionInputError, fmt: ToolFormat) -> Reading:
    example = fmt.write_call(tool.name_for_model, json.loads(skeleton(tool)))
    reading.kind, reading.error = (
        StepKind.BAD_INPUT,
        f"bad arguments for {tool.name_for_model}: {error}. Write: {example}",
    )
    return reading


def _error(kind: StepKind, text: str, message: str, tools, fmt: ToolFormat, **fields) -> Reading:
    """A format error whose message ends with a call to copy, in the family's format."""
    if tools:
        message += f". To call a tool, write for example:\n{fmt.write_call(tools[0].name_for_model, json.loads(skeleton(tools[0])))}"
        message += "\nTo answer, write the answer only"
    return Reading(kind, text.rstrip(), error=message, **fields)


def _without_markers(text: str) -> str:
    for marker in MARKERS:
        text = text.replace(marker, "")
    return text
