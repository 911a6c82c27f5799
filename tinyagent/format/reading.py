"""Reading a model's reply: what one ReAct step says, in every form real models write it.

Pure text in, data out. `read_step(reply, tools)` is the one path from a reply to what the agent
does with it: a tool call, a final answer, chit-chat taken as the answer, or a format error whose
message says exactly what to write. docs/reply-forms.md lists what is accepted.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from ..text import mask_thinking
from .arguments import (
    FENCE,
    ActionInputError,
    NestedTooDeeply,
    bad_input_message,
    balanced_object,
    parse_object,
    read_arguments,
)
from .kinds import StepKind
from .names import clean_tool_name, find_tool, mentioned_tools
from .observations import example_call

_START = r"(?:^|\n)[ \t>*#]*"  # a line start, maybe under markdown quote / heading / bold markers
_COLON = r"[ \t*]*[:：](?:[ \t]*\*\*)?"  # `Action:`, `Action :`, `Action：`, `**Action:**`


def _label(words: str) -> re.Pattern:
    return re.compile(_START + rf"(?:{words}){_COLON}", re.IGNORECASE)


OBSERVATION = _label("Observation")
THOUGHT = _label("Thought")
ACTION = _label(r"(?:Action|Tool)(?:[ \t]*\d+)?")
ACTION_INPUT = _label(r"(?:Action|Tool)[ \t]*Input(?:[ \t]*\d+)?")
FINAL = _label(r"Final[ \t]*Answer|最终答案|Answer")
QUESTION = _label("Question")
_ANY = _label(
    r"Thought|(?:Action|Tool)(?:[ \t]*Input)?(?:[ \t]*\d+)?|Final[ \t]*Answer|最终答案|Answer|Question|"
    r"Observation"
)

#: Kinds a reading can have (format errors among them: empty, malformed, unknown_tool, bad_input).
READING_KINDS = tuple(k for k in StepKind if k.readable)
_NO_TOOL = {"none", "n/a", "na", "no", "nothing", "no tool", "无", "没有", "不需要"}


@dataclass
class Reading:
    """What one reply says. `text` is the reply as it enters the scratchpad (it ends after the
    action input, so text the model wrote past its call is never shown back to it)."""

    kind: StepKind
    text: str
    thought: str = ""
    action: str | None = None  # the tool's name_for_model, or the name as written when unknown
    action_input: str | None = None  # the raw input text
    arguments: dict | None = None  # parsed arguments, not yet checked against the tool's types
    answer: str | None = None
    error: str | None = None  # for format errors: what went wrong and what to write
    call_id: str | None = None  # a native tool call's id, when the server gave one
    thought_only: bool = False  # reasoning with no Action and no Final Answer after it


# --- invented observations ----------------------------------------------------------------------


def observation_start(text: str) -> int | None:
    """Where an `Observation:` the model wrote itself begins (outside reasoning), or None."""
    m = OBSERVATION.search(mask_thinking(text))
    return m.start() if m else None


def cut_at_observation(text: str) -> str:
    """Drop an observation the model invented and everything after it: it was never observed."""
    cut = observation_start(text)
    return text if cut is None else text[:cut]


# --- reading a step -----------------------------------------------------------------------------


def read_step(reply: str, tools=(), lang: str = "en") -> Reading:
    """Resolve a reply against `tools` (objects with name_for_model, human_name, parameters)."""
    tools = list(tools)
    cut = cut_at_observation(reply)
    visible = mask_thinking(cut)
    if not visible.strip():
        if reply.strip():
            return _error(
                StepKind.MALFORMED,
                cut.rstrip(),
                "your reply had reasoning but no step after it. "
                "After </think>, write Thought, then Action and Action Input, or Final Answer",
                tools,
            )
        return _error(
            StepKind.EMPTY,
            "",
            "your reply was empty. Write Thought, then Action and Action Input, or the Final Answer",
            tools,
        )
    final, action, given = FINAL.search(visible), ACTION.search(visible), ACTION_INPUT.search(visible)
    blob_at = _blob_start(visible)
    thought = _thought(
        visible,
        min(
            [m.start() for m in (action, given, final) if m] + ([blob_at] if blob_at is not None else []),
            default=len(visible),
        ),
    )
    first_call = min((m.start() for m in (action, given) if m), default=None)
    if blob_at is not None and (first_call is None or blob_at < first_call) and not action:
        first_call = blob_at
    if final and (first_call is None or final.start() < first_call):
        return _final(visible, final, thought, cut)
    if action or given:
        reading = _read_labelled_call(cut, visible, action, given, final, tools)
    elif blob_at is not None:
        reading = _read_blob(cut, visible[blob_at:], tools)
    elif THOUGHT.search(visible) or QUESTION.search(visible):
        reading = _error(
            StepKind.MALFORMED,
            cut.rstrip(),
            "your reply has no Action and no Final Answer. Write "
            "Action and Action Input to call a tool, or Final Answer: followed by the answer",
            tools,
            thought=thought,
        )
        reading.thought_only = bool(thought) and not QUESTION.search(visible)
        return reading
    else:  # no ReAct labels at all: chit-chat, taken as the answer
        return Reading(StepKind.NO_ACTION, cut.rstrip(), thought=thought, answer=visible.strip())
    reading.thought = thought
    return reading


#: An answer that is only a placeholder copied from the prompt's format or an error's example.
_PLACEHOLDER_ANSWER = re.compile(
    r"[<\[(（【]\s*(?:the |your |final )*(?:final )?(?:answer|答案|最终答案)[^>\])）】]{0,20}"
    r"[>\])）】]\.?",
    re.IGNORECASE,
)


def _final(visible: str, final: re.Match, thought: str, reply: str) -> Reading:
    answer = _until_next_label(visible, final.end())
    if not answer:
        return _error(
            StepKind.MALFORMED,
            reply.rstrip(),
            "the Final Answer was empty. Write the answer on the same line: Final Answer: <your answer>",
            (),
            thought=thought,
        )
    if _PLACEHOLDER_ANSWER.fullmatch(answer):
        return _error(
            StepKind.MALFORMED,
            reply.rstrip(),
            f"the Final Answer {answer!r} is the example's placeholder. Write the answer itself after Final Answer:",
            (),
            thought=thought,
        )
    return Reading(StepKind.FINAL_ANSWER, reply.rstrip(), thought=thought, answer=answer)


def _until_next_label(text: str, start: int) -> str:
    """The text from `start` to the next ReAct label at a line start (a trailing Action block is not
    part of an answer)."""
    m = _ANY.search(text, start)
    return text[start : m.start() if m else len(text)].strip()


def _thought(visible: str, end: int) -> str:
    """The reasoning before `end` (where the action or answer begins), without its `Thought:` label."""
    head = visible[:end]
    m = THOUGHT.search(head)
    return (head[m.end() :] if m else head).strip()


def _read_labelled_call(reply: str, visible: str, action, given, final, tools) -> Reading:
    if action is None or (given and given.start() < action.start()):
        return _error(
            StepKind.MALFORMED, reply.rstrip(), "Action Input came without an Action line naming the tool", tools
        )
    inputs = [m for m in ACTION_INPUT.finditer(visible) if m.start() > action.start()]
    given = inputs[0] if inputs else None
    later = [m for m in ACTION.finditer(visible, action.end()) if not given or m.start() < given.start()]
    action = later[-1] if later else action  # the last Action label before its input
    if given:
        name_text = visible[action.end() : given.start()]
        end = _next_label_start(visible, given.end())
        input_text = visible[given.end() : end].strip()
    else:
        end = _next_label_start(visible, action.end())
        name_text, input_text = visible[action.end() : end], None
    text = reply[:end].rstrip()
    inline = _INLINE_INPUT.search(name_text) if given is None else None
    if inline:  # `Tool: X Tool Input: Y` on one line
        name_text, input_text = name_text[: inline.start()], name_text[inline.end() :].strip()
    stripped = name_text.strip()
    by_keys = _tool_by_parameters(stripped, tools) if stripped.startswith("{") else None
    if stripped.startswith(("{", "```")) and input_text is None and by_keys is None:
        return _read_blob(reply[:end], stripped, tools, text=text)
    if by_keys is not None:  # the arguments written on the Action line: the tool whose parameters they are
        given = input_text and _with_arguments(Reading(StepKind.ACTION, text, action_input=input_text), by_keys)
        chosen = input_text if given and given.kind == StepKind.ACTION else stripped
        return _with_arguments(
            Reading(StepKind.ACTION, text, action=by_keys.name_for_model, action_input=chosen), by_keys
        )
    line = stripped.split("\n", 1)[0].strip()
    bracket = re.fullmatch(r"([^\[\]\n]*?)\s*\[(.*)\]\s*\.?", stripped, re.DOTALL)
    if (
        bracket and bracket.group(1).strip() and input_text is None
    ):  # the ReAct paper's one-line form: Search[Jay Chou], Finish[1979]
        name = clean_tool_name(bracket.group(1))
        if name.lower() == "finish" and not find_tool(name, tools):
            return (
                Reading(StepKind.FINAL_ANSWER, text, answer=bracket.group(2).strip())
                if bracket.group(2).strip()
                else _error(StepKind.MALFORMED, text, "Finish[] was empty: write Final Answer: <your answer>", tools)
            )
        line, input_text = bracket.group(1), bracket.group(2).strip()
    name = clean_tool_name(line)
    if final and (not name or name.lower() in _NO_TOOL):
        return _final(visible, final, "", reply)  # "Action: None" then an answer
    if not name:
        return _error(StepKind.MALFORMED, text, "the Action line did not name a tool", tools)
    tool = find_tool(line, tools)
    listed = mentioned_tools(line, tools)
    if len(listed) > 1 and input_text and input_text.startswith("{"):  # the format's list of tools, copied:
        tool = _tool_by_parameters(input_text, listed) or tool  # the one its arguments are for
    if tool is None and " " in name and input_text and input_text.startswith("{"):
        tool = _tool_by_parameters(input_text, tools)  # a phrase copied from the format ("the tool's name")
    if tool is None:
        reading = _unknown_tool(name, text, tools)
        reading.action_input = input_text or ""
        return reading
    if input_text is None:  # the input written on the action line itself: `调用 calculator，传入参数 {...}`
        obj = balanced_object(line, line.find("{"))
        input_text = obj or ""
    return _with_arguments(Reading(StepKind.ACTION, text, action=tool.name_for_model, action_input=input_text), tool)


_INLINE_INPUT = re.compile(r"[ \t]+(?:Action|Tool)[ \t]*Input[ \t]*[:：]", re.IGNORECASE)
_STEP_END = _label(r"Thought|Final[ \t]*Answer|最终答案|Answer|Question|(?:Action|Tool)(?:[ \t]*\d+)?")


def _next_label_start(text: str, start: int) -> int:
    """Where the text of a label that starts before `start` ends: at the next label other than an input."""
    m = _STEP_END.search(text, start)
    return m.start() if m else len(text)


def _tool_by_parameters(text: str, tools):
    """The one tool whose required parameters are exactly the keys of the JSON object `text`, or None."""
    try:
        keys = set(parse_object(text))
    except (ActionInputError, NestedTooDeeply):
        return None
    fits = [
        t
        for t in tools
        if keys and keys == {p["name"] for p in getattr(t, "parameters", None) or [] if p.get("required")}
    ]
    return fits[0] if len(fits) == 1 else None


def _with_arguments(reading: Reading, tool) -> Reading:
    try:
        reading.arguments = read_arguments(reading.action_input or "", tool)
    except ActionInputError as e:
        reading.kind, reading.error = StepKind.BAD_INPUT, bad_input_message(tool, e)
        return reading
    copied = [k for k, v in (reading.arguments or {}).items() if isinstance(v, str) and v.strip() in ("...", "…")]
    if copied:
        reading.kind, reading.error = (
            StepKind.BAD_INPUT,
            (f"{', '.join(map(repr, copied))} was the example's placeholder \"...\": write the real value"),
        )
    return reading


# --- JSON blob actions: {"action": ..., "action_input": ...} ------------------------------------

_ACTION_KEY = re.compile(r"[\"']action[\"']\s*:", re.IGNORECASE)
_CALL_KEYS = (re.compile(r"[\"']name[\"']\s*:"), re.compile(r"[\"'](?:arguments|parameters)[\"']\s*:"))


def _blob_start(visible: str) -> int | None:
    """Where a JSON action object (fenced or bare, at a line start) begins, or None."""
    for m in re.finditer(r"(?:^|\n)[ \t]*(```[a-zA-Z]*[ \t]*\n?[ \t]*\{|\{)", visible):
        head = visible[m.start(1) : m.start(1) + 200]
        if _ACTION_KEY.search(head) or all(k.search(head) for k in _CALL_KEYS):
            return m.start(1)
    return None


def _read_blob(reply: str, blob_text: str, tools, text: str | None = None) -> Reading:
    text = (text if text is not None else reply).rstrip()
    fence = FENCE.match(blob_text.strip())
    body = fence.group(1) if fence else blob_text
    try:
        value = parse_object(body[body.find("{") :] if "{" in body else body)
    except NestedTooDeeply as e:
        return _error(StepKind.MALFORMED, text, str(e), tools)
    except ActionInputError:
        return _error(
            StepKind.MALFORMED,
            text,
            'the JSON action could not be read. Write it as Action: <tool> and Action Input: {...} on two lines',
            tools,
        )
    lowered = {str(k).lower(): v for k, v in value.items()}
    name = lowered.get("action", lowered.get("name"))
    args = lowered.get("action_input", lowered.get("arguments", lowered.get("parameters", lowered.get("args"))))
    if not isinstance(name, str) or not name.strip():
        return _error(StepKind.MALFORMED, text, 'the JSON action has no "action" naming a tool', tools)
    if name.strip().lower() in ("final answer", "final_answer", "finish", "answer"):
        return Reading(StepKind.FINAL_ANSWER, text, answer=answer_value(args))
    tool = find_tool(name, tools)
    if tool is None:
        return _unknown_tool(name.strip(), text, tools)
    raw = args if isinstance(args, str) else json.dumps(args if args is not None else {}, ensure_ascii=False)
    reading = Reading(StepKind.ACTION, text, action=tool.name_for_model, action_input=raw)
    if isinstance(args, dict):
        reading.arguments = args
        return reading
    return _with_arguments(reading, tool)


def answer_value(args) -> str:
    """The answer a JSON "final answer" call gives: a string, the one value of an object such as
    {"answer": ...}, or the JSON text of anything else."""
    if isinstance(args, dict) and len(args) == 1:
        args = next(iter(args.values()))
    return (args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)).strip()


def _unknown_tool(name: str, text: str, tools) -> Reading:
    valid = ", ".join(t.name_for_model for t in tools) or "none"
    return _error(
        StepKind.UNKNOWN_TOOL,
        text,
        f"unknown tool {name!r}. Valid tools: {valid}. Write only the tool's name on the Action line",
        tools,
        action=name,
    )


def _error(kind: StepKind, text: str, message: str, tools, thought: str = "", action: str | None = None) -> Reading:
    tools = list(tools)
    if tools:
        message += f". Write, for example:\n{example_call(tools[0])}"
    return Reading(kind, text, thought=thought, action=action, error=message)


# --- the forced answer ----------------------------------------------------------------------------


def read_forced_answer(reply: str) -> str:
    """The answer after the turn cap's `Final Answer:` prefill: the text up to the next label, or the
    text after a restated `Final Answer:` (what a model writes when the prefill is not continued)."""
    visible = mask_thinking(cut_at_observation(reply))
    first = _ANY.search(visible)
    head = visible[: first.start() if first else len(visible)].strip()
    final = FINAL.search(visible)
    return head or (_until_next_label(visible, final.end()) if final else "")
