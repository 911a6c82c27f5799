"""Reading a model's reply: what one ReAct step says, in every form real models write it.

Pure text in, data out. `read_step(reply, tools)` is the one path from a reply to what the agent
does with it: a tool call, a final answer, chit-chat taken as the answer, or a format error whose
message says exactly what to write. The README's "Reply forms" table lists what is accepted.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass

from .arguments import FENCE, ActionInputError, balanced_object, parse_object, read_arguments, skeleton
from .arguments import bad_input_message  # noqa: F401  (re-exported with the protocol's names)

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
_ANY = _label(r"Thought|(?:Action|Tool)(?:[ \t]*Input)?(?:[ \t]*\d+)?|Final[ \t]*Answer|最终答案|Answer|Question|"
              r"Observation")
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)

#: Kinds a reading can have. Format errors: empty, malformed, unknown_tool, bad_input.
READING_KINDS = ("action", "final_answer", "no_action", "empty", "malformed", "unknown_tool", "bad_input")
_NO_TOOL = {"none", "n/a", "na", "no", "nothing", "no tool", "无", "没有", "不需要"}


@dataclass
class Reading:
    """What one reply says. `text` is the reply as it enters the scratchpad (it ends after the
    action input, so text the model wrote past its call is never shown back to it)."""

    kind: str
    text: str
    thought: str = ""
    action: str | None = None         # the tool's name_for_model, or the name as written when unknown
    action_input: str | None = None   # the raw input text
    arguments: dict | None = None     # parsed arguments, not yet checked against the tool's types
    answer: str | None = None
    error: str | None = None          # for format errors: what went wrong and what to write


# --- think blocks and invented observations -----------------------------------------------------

def mask_thinking(text: str) -> str:
    """`text` with every reasoning block (`<think>…</think>`, an unclosed `<think>…`, or everything
    before a lone `</think>`) blanked to spaces of the same length, so positions still line up."""
    def blank(s: str) -> str:
        return " " * len(s)

    text = _THINK.sub(lambda m: blank(m.group(0)), text)
    close = text.lower().rfind("</think>")
    if close >= 0:  # the template opened the block in the prompt (DeepSeek-R1 distills)
        text = blank(text[: close + len("</think>")]) + text[close + len("</think>"):]
    start = text.lower().find("<think>")
    if start >= 0:
        text = text[:start] + blank(text[start:])
    return text


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
            return _error("malformed", cut.rstrip(), "your reply had reasoning but no step after it. "
                          "After </think>, write Thought, then Action and Action Input, or Final Answer", tools)
        return _error("empty", "", "your reply was empty. Write Thought, then Action and Action Input, "
                      "or the Final Answer", tools)
    final, action, given = FINAL.search(visible), ACTION.search(visible), ACTION_INPUT.search(visible)
    blob_at = _blob_start(visible)
    thought = _thought(visible, min([m.start() for m in (action, given, final) if m]
                                    + ([blob_at] if blob_at is not None else []), default=len(visible)))
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
        return _error("malformed", cut.rstrip(), "your reply has no Action and no Final Answer. Write "
                      "Action and Action Input to call a tool, or Final Answer: followed by the answer", tools,
                      thought=thought)
    else:  # no ReAct labels at all: chit-chat, taken as the answer
        return Reading("no_action", cut.rstrip(), thought=thought, answer=visible.strip())
    reading.thought = thought
    return reading


def _final(visible: str, final: re.Match, thought: str, reply: str) -> Reading:
    answer = _until_next_label(visible, final.end())
    if not answer:
        return _error("malformed", reply.rstrip(), "the Final Answer was empty. Write the answer on the same "
                      "line: Final Answer: <your answer>", (), thought=thought)
    return Reading("final_answer", reply.rstrip(), thought=thought, answer=answer)


def _until_next_label(text: str, start: int) -> str:
    """The text from `start` to the next ReAct label at a line start (a trailing Action block is not
    part of an answer)."""
    m = _ANY.search(text, start)
    return text[start: m.start() if m else len(text)].strip()


def _thought(visible: str, end: int) -> str:
    """The reasoning before `end` (where the action or answer begins), without its `Thought:` label."""
    head = visible[:end]
    m = THOUGHT.search(head)
    return (head[m.end():] if m else head).strip()


def _read_labelled_call(reply: str, visible: str, action, given, final, tools) -> Reading:
    if action is None or (given and given.start() < action.start()):
        return _error("malformed", reply.rstrip(), "Action Input came without an Action line naming the tool",
                      tools)
    inputs = [m for m in ACTION_INPUT.finditer(visible) if m.start() > action.start()]
    given = inputs[0] if inputs else None
    later = [m for m in ACTION.finditer(visible, action.end()) if not given or m.start() < given.start()]
    action = later[-1] if later else action  # the last Action label before its input
    if given:
        name_text = visible[action.end(): given.start()]
        end = _next_label_start(visible, given.end())
        input_text = visible[given.end(): end].strip()
    else:
        end = _next_label_start(visible, action.end())
        name_text, input_text = visible[action.end(): end], None
    text = reply[:end].rstrip()
    stripped = name_text.strip()
    if stripped.startswith(("{", "```")) and input_text is None:
        return _read_blob(reply[:end], stripped, tools, text=text)
    line = stripped.split("\n", 1)[0].strip()
    bracket = re.fullmatch(r"([^\[\]\n]*?)\s*\[(.*)\]\s*\.?", stripped, re.DOTALL)
    if bracket and bracket.group(1).strip() and input_text is None:  # the ReAct paper's one-line form: Search[Jay Chou], Finish[1979]
        name = clean_tool_name(bracket.group(1))
        if name.lower() == "finish" and not _find_tool(name, tools):
            return Reading("final_answer", text, answer=bracket.group(2).strip()) if bracket.group(2).strip() \
                else _error("malformed", text, "Finish[] was empty: write Final Answer: <your answer>", tools)
        line, input_text = bracket.group(1), bracket.group(2).strip()
    name = clean_tool_name(line)
    if final and (not name or name.lower() in _NO_TOOL):
        return _final(visible, final, "", reply)  # "Action: None" then an answer
    if not name:
        return _error("malformed", text, "the Action line did not name a tool", tools)
    tool = _find_tool(line, tools)
    if tool is None:
        reading = _unknown_tool(name, text, tools)
        reading.action_input = input_text or ""
        return reading
    if input_text is None:  # the input written on the action line itself: `调用 calculator，传入参数 {...}`
        obj = balanced_object(line, line.find("{"))
        input_text = obj or ""
    return _with_arguments(Reading("action", text, action=tool.name_for_model, action_input=input_text), tool)


_STEP_END = _label(r"Thought|Final[ \t]*Answer|最终答案|Answer|Question|(?:Action|Tool)(?:[ \t]*\d+)?")


def _next_label_start(text: str, start: int) -> int:
    """Where the text of a label that starts before `start` ends: at the next label other than an input."""
    m = _STEP_END.search(text, start)
    return m.start() if m else len(text)


def _with_arguments(reading: Reading, tool) -> Reading:
    try:
        reading.arguments = read_arguments(reading.action_input or "", tool)
    except ActionInputError as e:
        reading.kind, reading.error = "bad_input", bad_input_message(tool, e)
    return reading


# --- JSON blob actions: {"action": ..., "action_input": ...} ------------------------------------

_ACTION_KEY = re.compile(r"[\"']action[\"']\s*:", re.IGNORECASE)
_CALL_KEYS = (re.compile(r"[\"']name[\"']\s*:"), re.compile(r"[\"'](?:arguments|parameters)[\"']\s*:"))


def _blob_start(visible: str) -> int | None:
    """Where a JSON action object (fenced or bare, at a line start) begins, or None."""
    for m in re.finditer(r"(?:^|\n)[ \t]*(```[a-zA-Z]*[ \t]*\n?[ \t]*\{|\{)", visible):
        head = visible[m.start(1): m.start(1) + 200]
        if _ACTION_KEY.search(head) or all(k.search(head) for k in _CALL_KEYS):
            return m.start(1)
    return None


def _read_blob(reply: str, blob_text: str, tools, text: str | None = None) -> Reading:
    text = (text if text is not None else reply).rstrip()
    fence = FENCE.match(blob_text.strip())
    body = fence.group(1) if fence else blob_text
    try:
        value = parse_object(body[body.find("{"):] if "{" in body else body)
    except ActionInputError:
        return _error("malformed", text, 'the JSON action could not be read. Write it as Action: <tool> and '
                      'Action Input: {...} on two lines', tools)
    lowered = {str(k).lower(): v for k, v in value.items()}
    name = lowered.get("action", lowered.get("name"))
    args = lowered.get("action_input", lowered.get("arguments", lowered.get("parameters", lowered.get("args"))))
    if not isinstance(name, str) or not name.strip():
        return _error("malformed", text, 'the JSON action has no "action" naming a tool', tools)
    if name.strip().lower() in ("final answer", "final_answer", "finish", "answer"):
        answer = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
        return Reading("final_answer", text, answer=answer.strip())
    tool = _find_tool(name, tools)
    if tool is None:
        return _unknown_tool(name.strip(), text, tools)
    raw = args if isinstance(args, str) else json.dumps(args if args is not None else {}, ensure_ascii=False)
    reading = Reading("action", text, action=tool.name_for_model, action_input=raw)
    if isinstance(args, dict):
        reading.arguments = args
        return reading
    return _with_arguments(reading, tool)


# --- tool names ---------------------------------------------------------------------------------

def clean_tool_name(text: str) -> str:
    """A tool name as models write it: `calculator`, "calculator", [calculator], calculator."""
    first = text.strip().split("\n", 1)[0].strip()
    return first.strip("`'\"[]()<>*.:： \t").strip()


def _find_tool(written: str, tools):
    """The tool a model meant on its Action line: exact name, any case, the human name (en / zh),
    the name before a note (`add (add two numbers)`), or the one tool the line mentions."""
    name = clean_tool_name(written)
    if not name:
        return None
    key = name.casefold()
    for match in (lambda t: t.name_for_model == name,
                  lambda t: t.name_for_model.casefold() == key,
                  lambda t: _norm(t.name_for_model) == _norm(name),
                  lambda t: _norm(name) in {_norm(h) for h in _human_names(t)}):
        found = [t for t in tools if match(t)]
        if len(found) == 1:
            return found[0]
    lead = re.match(r"[\w.\-]+", name)
    if lead and lead.group(0) != name:
        found = [t for t in tools if _norm(t.name_for_model) == _norm(lead.group(0))]
        if len(found) == 1:
            return found[0]
    mentioned = [t for t in tools if _mentions(written, t)]
    return mentioned[0] if len(mentioned) == 1 else None


def _norm(name: str) -> str:
    name = re.sub(r"[\s\-]+", "_", name.strip().casefold())
    return re.sub(r"_?(api|tool|工具)$", "", name) or name


def _human_names(tool) -> list[str]:
    human = getattr(tool, "human_name", None)
    return [h for h in (human("en"), human("zh")) if h] if callable(human) else []


def _mentions(line: str, tool) -> bool:
    for name in [tool.name_for_model, *_human_names(tool)]:
        if re.search(r"[\u4e00-\u9fff]", name):
            if name in line:
                return True
        elif re.search(rf"(?<![\w]){re.escape(name)}(?![\w])", line, re.IGNORECASE):
            return True
    return False


def _unknown_tool(name: str, text: str, tools) -> Reading:
    valid = ", ".join(t.name_for_model for t in tools) or "none"
    return _error("unknown_tool", text, f"unknown tool {name!r}. Valid tools: {valid}. Write only the tool's "
                  "name on the Action line", tools, action=name)


# --- what to write instead ---

def example_call(tool) -> str:
    """`Action: name` and `Action Input: {...}` for `tool`, as two lines."""
    return f"Action: {tool.name_for_model}\nAction Input: {skeleton(tool)}"


def worked_step(tool) -> str:
    """A complete step for `tool`, shown when a model makes the same format mistake twice."""
    return (f"Thought: I need {tool.name_for_model} for this.\n{example_call(tool)}\n"
            "Then stop and wait for the Observation. When you know the answer, write:\n"
            "Thought: I now know the final answer\nFinal Answer: <the answer>")


def _error(kind: str, text: str, message: str, tools, thought: str = "", action: str | None = None) -> Reading:
    tools = list(tools)
    if tools:
        message += f". Write, for example:\n{example_call(tools[0])}"
    return Reading(kind, text, thought=thought, action=action, error=message)


# --- the forced answer, and the TinyAgent vocabulary ------------------------------------------

def read_forced_answer(reply: str) -> str:
    """The answer after the turn cap's `Final Answer:` prefill: the text up to the next label, or the
    text after a restated `Final Answer:` (what a model writes when the prefill is not continued)."""
    visible = mask_thinking(cut_at_observation(reply))
    first = _ANY.search(visible)
    head = visible[: first.start() if first else len(visible)].strip()
    final = FINAL.search(visible)
    return head or (_until_next_label(visible, final.end()) if final else "")


def parse_latest_plugin_call(text: str) -> tuple[str, str, str]:
    """TinyAgent's scan: (tool name as written, raw action input, the reply up to the end of the input),
    or ("", "", reply) when the reply calls no tool."""
    reading = read_step(text)
    if reading.kind in ("unknown_tool", "action", "bad_input") and reading.action:
        return clean_tool_name(reading.action), reading.action_input or "", reading.text
    return "", "", cut_at_observation(text)
