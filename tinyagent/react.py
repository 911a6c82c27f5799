"""The ReAct text protocol: prompts (en / zh), stop markers and parsing. Pure text in, text out."""
from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass

import json5

# The model must stop before writing an observation itself.
STOP_WORDS = ["Observation:", "Observation：", "\nObservation :"]

TOOL_DESC = {
    "en": "{name_for_model}: Call this tool to use the {name_for_human} API. What is the "
          "{name_for_human} API for? {description_for_model} Parameters: {parameters} "
          "Give the arguments as a JSON object.",
    "zh": "{name_for_model}: 调用此工具来使用{name_for_human} API。{name_for_human} API 有什么用？"
          "{description_for_model} 参数：{parameters} 参数必须写成 JSON 对象。",
}

REACT_PROMPT = {
    "en": """Answer the user's questions as well as you can. You have access to these tools:

{tool_descs}

Use exactly this format:

Question: the question you must answer
Thought: think about what to do next
Action: the tool to call, exactly one of [{tool_names}]
Action Input: the tool's arguments as a JSON object
Observation: the result the tool returns
... (Thought / Action / Action Input / Observation can repeat several times)
Thought: I now know the final answer
Final Answer: the final answer to the original question

Write one Action at a time and wait for its Observation; never write an Observation yourself. \
When no tool is needed, write a Thought and then the Final Answer directly.

Begin!""",
    "zh": """请尽你所能回答用户的问题。你可以使用以下工具：

{tool_descs}

请严格使用以下格式：

Question: 你必须回答的问题
Thought: 思考下一步该做什么
Action: 要调用的工具，必须是 [{tool_names}] 之一
Action Input: 工具的参数，写成 JSON 对象
Observation: 工具返回的结果
...（Thought / Action / Action Input / Observation 可以重复多次）
Thought: 我现在知道最终答案了
Final Answer: 对原始问题的最终答案

每次只写一个 Action，然后等待它的 Observation；不要自己编写 Observation。\
如果不需要使用工具，请写出 Thought 后直接给出 Final Answer。

开始！""",
}

NO_TOOLS = {"en": "(no tools are available: answer directly)", "zh": "（没有可用的工具：请直接回答）"}

EXAMPLES_HEADER = {"en": "Here are examples of the format:", "zh": "以下是该格式的示例："}

# Appended to the scratchpad when the turn cap is reached, to ask for the answer from what is known.
FORCE_FINAL = {
    "en": "Thought: I have used all my steps, so I will answer now from what I know.\nFinal Answer:",
    "zh": "Thought: 我已经用完了所有步骤，现在根据已知信息给出答案。\nFinal Answer:",
}

# Observation distillation: condense a long tool result to what the current thought needs.
DISTILL_PROMPT = {
    "en": "Condense the tool result below to the facts that help answer the question. Keep names, "
          "numbers and dates exactly as written; leave out everything else. Reply with the facts only.\n\n"
          "Question: {question}\nCurrent thought: {thought}\n\nTool result:\n{observation}",
    "zh": "请把下面的工具结果压缩为有助于回答问题的事实。人名、数字和日期须照原文保留，其余内容一律省略。"
          "只回复这些事实。\n\n问题：{question}\n当前思考：{thought}\n\n工具结果：\n{observation}",
}
DISTILLED_LABEL = {"en": "(condensed from {n} characters) ", "zh": "（由 {n} 个字符压缩）"}

_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]")


def detect_lang(text: str) -> str:
    """'zh' when the text contains CJK characters, else 'en'."""
    return "zh" if _CJK.search(text or "") else "en"


def tool_description(tool, lang: str = "en") -> str:
    """One tool's line in the system prompt."""
    return TOOL_DESC[lang].format(
        name_for_model=tool.name_for_model,
        name_for_human=tool.human_name(lang),
        description_for_model=tool.description(lang),
        parameters=json.dumps(tool.parameters_for(lang), ensure_ascii=False),
    )


def build_system_prompt(tools, lang: str = "en", examples: list | None = None) -> str:
    """The ReAct system prompt: tool descriptions, the format, and optional worked examples."""
    descs = "\n\n".join(tool_description(t, lang) for t in tools) or NO_TOOLS[lang]
    names = ", ".join(t.name_for_model for t in tools)
    prompt = REACT_PROMPT[lang].format(tool_descs=descs, tool_names=names)
    if examples:
        shown = "\n\n".join(format_example(e) for e in examples)
        prompt = prompt.replace("\n\nBegin!", "").replace("\n\n开始！", "")
        prompt += f"\n\n{EXAMPLES_HEADER[lang]}\n\n{shown}\n\n" + ("开始！" if lang == "zh" else "Begin!")
    return prompt


def format_example(example: dict) -> str:
    """A worked example {"question", "steps": [{"thought", "action", "action_input", "observation"}],
    "final_thought"?, "answer"} as a ReAct transcript."""
    lines = [f"Question: {example['question']}"]
    for step in example.get("steps", []):
        args = step.get("action_input", {})
        args = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
        lines += [f"Thought: {step['thought']}", f"Action: {step['action']}",
                  f"Action Input: {args}", f"Observation: {step['observation']}"]
    lines += [f"Thought: {example.get('final_thought', 'I now know the final answer')}",
              f"Final Answer: {example['answer']}"]
    return "\n".join(lines)


def format_observation(observation: str) -> str:
    """The scratchpad text that follows a tool call."""
    return f"\nObservation: {observation.strip()}\n"


# --- constrained decoding: one reply as a pattern ----------------------------------------

#: One line of free text (a thought, an answer) that does not start with a space.
FREE_TEXT = r"[^ \n][^\n]*"
#: Each line of a constrained reply gets at most this many tokens; then the decoder ends the line.
MAX_LINE_TOKENS = 64
_REGEX_META = set("\\.+*?()|[]{}^$#&-~")


@dataclass(frozen=True)
class StepFormat:
    """What one constrained reply may be, as data; `step_pattern` turns it into a regex.

    `tools` holds (name_for_model, the JSON schema of its arguments as JSON text) pairs. Without
    `final_answer` the step must call one of them. With `answer_only` the reply is only the text
    after a forced `Final Answer:`. `max_line_tokens` caps each line, so a model cannot write one
    thought forever.
    """

    tools: tuple[tuple[str, str], ...] = ()
    final_answer: bool = True
    answer_only: bool = False
    max_line_tokens: int = MAX_LINE_TOKENS


#: The reply after the turn cap's `Final Answer:` (FORCE_FINAL): one line of answer text.
ANSWER_FORMAT = StepFormat(answer_only=True)


def step_format(tools, final_answer: bool = True) -> StepFormat:
    """One ReAct step over `tools`: a thought, then a call of one of them with valid arguments, or
    (when `final_answer`, or when there are no tools) the final answer."""
    described = tuple((t.name_for_model, json.dumps(t.json_schema(), ensure_ascii=False)) for t in tools)
    return StepFormat(tools=described, final_answer=final_answer or not described)


def next_step_format(tools, steps, forced: bool = False) -> StepFormat:
    """What the next reply of a constrained run may be, given the run's steps so far.

    After the turn cap (`forced`) only the answer's text. The first step calls a tool: a small model
    that answers unaided is guessing. After a repeated call the step gives the final answer: the
    model is stuck, and more turns would repeat the call. Otherwise a tool call or the answer.
    """
    if forced:
        return ANSWER_FORMAT
    if steps and steps[-1].kind == "repeated_call":
        return step_format([])
    return step_format(tools, final_answer=bool(steps))


def step_pattern(fmt: StepFormat, arguments_pattern: Callable[[str], str]) -> str:
    """The regular expression of one reply in `fmt`.

    A step is `Thought: <text>` and a newline, then either `Action: <tool>`, a newline and
    `Action Input: <arguments>`, or `Final Answer: <text>`. `arguments_pattern(schema_json)` is the
    regex of a JSON object valid for a tool's schema; it comes from a constrained-decoding library.
    """
    if fmt.answer_only:
        return " ?" + FREE_TEXT
    endings = [f"Action: {escape_pattern(name)}\\nAction Input: {arguments_pattern(schema)}"
               for name, schema in fmt.tools]
    if fmt.final_answer:
        endings.append("Final Answer: " + FREE_TEXT)
    return f"Thought: {FREE_TEXT}\\n(?:{'|'.join(endings)})"


def escape_pattern(text: str) -> str:
    """`text` as a literal in a regex that both Python and Rust (outlines-core) regex engines read."""
    return "".join("\\" + c if c in _REGEX_META else c for c in text)


# --- parsing -----------------------------------------------------------------------------

def _marker(word: str) -> re.Pattern:
    """`word` at a line start (spaces allowed), optional spaces, then an ASCII or full-width colon."""
    return re.compile(rf"(?:^|\n)[ \t>*#]*{word}[ \t*]*[:：]", re.IGNORECASE)


_OBSERVATION = _marker("Observation")
_ACTION = _marker("Action")
_ACTION_INPUT = _marker(r"Action[ \t]*Input")
_FINAL = re.compile(r"(?:^|\n)[ \t>*#]*(?:Final[ \t]*Answer|最终答案)[ \t*]*[:：]", re.IGNORECASE)
_THOUGHT = _marker("Thought")


def cut_at_observation(text: str) -> str:
    """Drop an observation the model invented and everything after it: it was never observed."""
    m = _OBSERVATION.search(text)
    return text[: m.start()] if m else text


def parse_latest_plugin_call(text: str) -> tuple[str, str, str]:
    """Scan a model reply for its tool call, as TinyAgent does.

    Returns (tool name, raw action-input text, the reply up to the end of the action input).
    Everything from the first `Observation:` on is ignored, so when a reply invents several
    rounds the first action is the one returned. With no action: ("", "", reply).
    """
    text = cut_at_observation(text)
    actions = list(_ACTION.finditer(text))
    if not actions:
        return "", "", text
    final = _FINAL.search(text)
    action = actions[-1]
    if final and final.start() < actions[0].start():
        return "", "", text  # the final answer came first; anything after it is noise
    if final and final.start() > action.start():
        text = text[: final.start()]  # an answer written before the observation is not grounded
    inputs = [m for m in _ACTION_INPUT.finditer(text) if m.start() > action.start()]
    if inputs:
        name_text, args = text[action.end(): inputs[0].start()], text[inputs[0].end():]
    else:
        name_text, args = text[action.end():], ""
    return clean_tool_name(name_text), args.strip(), text.rstrip()


def clean_tool_name(text: str) -> str:
    """A tool name as models write it: `calculator`, "calculator", [calculator], calculator."""
    first = text.strip().split("\n", 1)[0].strip()
    return first.strip("`'\"[]()<>*. \t").strip()


def parse_final_answer(text: str) -> str | None:
    """The text after `Final Answer:` in a reply (before any invented observation), or None."""
    text = cut_at_observation(text)
    m = _FINAL.search(text)
    if not m:
        return None
    action = _ACTION.search(text)
    if action and action.start() < m.start():
        return None  # an answer written after an unexecuted action was never grounded
    return text[m.end():].strip()


def parse_thought(text: str) -> str:
    """The reasoning before the action or final answer, without its `Thought:` label."""
    text = cut_at_observation(text)
    ends = [m.start() for m in (_ACTION.search(text), _FINAL.search(text)) if m]
    head = text[: min(ends)] if ends else text
    m = _THOUGHT.search(head)
    return (head[m.end():] if m else head).strip()


_ANY_MARKER = re.compile(r"(?:^|\n)[ \t>*#]*(?:Thought|Action|Action[ \t]*Input|Question|Final[ \t]*Answer)[ \t*]*[:：]",
                         re.IGNORECASE)


def parse_forced_answer(text: str) -> str:
    """The answer written after a forced `Final Answer:`: up to the next ReAct marker."""
    text = cut_at_observation(text)
    m = _ANY_MARKER.search(text)
    return (text[: m.start()] if m else text).strip()


class ActionInputError(ValueError):
    """The action input is not a JSON object; the message tells the model what to write."""


_FENCE = re.compile(r"```[a-zA-Z0-9]*\s*(.*?)\s*(?:```|$)", re.DOTALL)
_FULL_WIDTH = str.maketrans({"“": '"', "”": '"', "‘": "'", "’": "'", "：": ":", "，": ",",
                             "｛": "{", "｝": "}", "［": "[", "］": "]"})
MAX_ARGS_CHARS = 20_000


def parse_action_input(text: str) -> dict:
    """Parse the arguments a model wrote: JSON or json5, maybe fenced, maybe followed by prose."""
    text = (text or "").strip()
    fence = _FENCE.search(text)
    if fence:
        text = fence.group(1).strip()
    if not text:
        return {}
    if len(text) > MAX_ARGS_CHARS:
        raise ActionInputError(f"the Action Input is too long ({len(text)} characters)")
    for candidate in _candidates(text):
        try:
            value = json.loads(candidate)
        except ValueError:
            try:
                value = json5.loads(candidate)
            except Exception:  # json5 raises several types on malformed input
                continue
        except RecursionError:
            continue
        if isinstance(value, dict):
            return value
        raise ActionInputError(
            f"the Action Input must be a JSON object such as {{\"name\": \"value\"}}, not {type(value).__name__}")
    raise ActionInputError(
        f"the Action Input is not valid JSON: {text[:100]!r}. Write a JSON object such as "
        '{"name": "value"} with the parameter names of the tool')


def _candidates(text: str):
    """The balanced {...} at the start of the text, the text itself, and full-width-normalised forms."""
    seen = []
    for t in (text, text.translate(_FULL_WIDTH)):
        for c in (_balanced_object(t, t.find("{")), t):
            if c and c not in seen:
                seen.append(c)
                yield c


def _balanced_object(text: str, start: int) -> str | None:
    """The substring from `start` ('{') to its matching '}', respecting quoted strings."""
    if start < 0:
        return None
    depth, quote, escaped = 0, "", False
    for i in range(start, len(text)):
        ch = text[i]
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[start: i + 1]
    return None


# --- tool output is data -------------------------------------------------------------------

_CONTROL = re.compile(r"<\|[^<>|\n]{1,40}\|>|</?s>|\[/?INST\]|<</?SYS>>|<(?:start|end)_of_turn>|<\|?(?:eot_id|endoftext)\|?>")


def neutralize_control_tokens(text: str, extra: tuple[str, ...] = ()) -> str:
    """Break chat-template control tokens in untrusted text (`<|im_end|>` -> `<| im_end |>`)
    so a tokenizer cannot read them as special tokens."""
    for token in extra:
        if token and len(token) > 1:
            text = text.replace(token, token[0] + "\u200b" + token[1:])
    return _CONTROL.sub(lambda m: m.group(0)[0] + "\u200b" + m.group(0)[1:], text)
