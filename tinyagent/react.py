"""The ReAct text protocol: prompts (en / zh), stop markers and parsing. Pure text in, text out."""
from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass

from .replies import (  # noqa: F401  (the protocol's public names)
    OBSERVATION as _OBSERVATION,
    ActionInputError,
    Reading,
    bad_input_message,
    clean_tool_name,
    cut_at_observation,
    example_call,
    parse_latest_plugin_call,
    read_arguments,
    read_forced_answer,
    read_step,
    skeleton,
    worked_step,
)

# The model must stop before writing an observation itself: at a line start (a stop string that
# starts with a newline also matches at the very start of a reply), never inside a <think> block.
STOP_WORDS = ["\nObservation:", "\nObservation：", "\nObservation :"]

TOOL_DESC = {
    "en": "{name_for_model}: Call this tool to use the {name_for_human} API. What is the "
          "{name_for_human} API for? {description_for_model} Parameters: {parameters} "
          "Give the arguments as a JSON object: Action Input: {example}",
    "zh": "{name_for_model}: 调用此工具来使用{name_for_human} API。{name_for_human} API 有什么用？"
          "{description_for_model} 参数：{parameters} 参数必须写成 JSON 对象：Action Input: {example}",
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

_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002fa1f]")
_KANA_HANGUL = re.compile(r"[\u3040-\u30ff\u31f0-\u31ff\uff66-\uff9f\u1100-\u11ff\u3130-\u318f\uac00-\ud7af]")
_LATIN_WORD = re.compile(r"[A-Za-z\u00c0-\u024f]+")


def detect_lang(text: str) -> str:
    """'zh' for Chinese text, else 'en' (the prompt for every other language).

    Chinese means Han characters that are not Japanese or Korean (those carry kana / hangul: at
    least one for every four Han characters) and that make up the text rather than a quote in
    it: at least as many Han characters as Latin words, so "What does 水 mean?" stays English.
    """
    han = len(_HAN.findall(text or ""))
    if not han or 4 * len(_KANA_HANGUL.findall(text)) >= han:
        return "en"
    return "zh" if han >= len(_LATIN_WORD.findall(text)) else "en"


def tool_description(tool, lang: str = "en") -> str:
    """One tool's line in the system prompt."""
    return TOOL_DESC[lang].format(
        name_for_model=tool.name_for_model,
        name_for_human=tool.human_name(lang),
        description_for_model=tool.description(lang),
        parameters=json.dumps(tool.parameters_for(lang), ensure_ascii=False),
        example=skeleton(tool),
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


# --- parsing: tinyagent/replies.py reads replies; these are the names the tutorial and tests use ---

def parse_final_answer(text: str) -> str | None:
    """The final answer a reply gives (before any invented observation), or None."""
    reading = read_step(text)
    return reading.answer if reading.kind == "final_answer" else None


def parse_thought(text: str) -> str:
    """The reasoning before the action or final answer, without its `Thought:` label."""
    return read_step(text).thought


def parse_action_input(text: str, tool=None) -> dict:
    """The arguments a model wrote (see `replies.read_arguments`)."""
    return read_arguments(text, tool)


parse_forced_answer = read_forced_answer


# --- tool output is data -------------------------------------------------------------------

_CONTROL = re.compile(r"<\|[^<>|\n]{1,40}\|>|</?s>|\[/?INST\]|<</?SYS>>|<(?:start|end)_of_turn>|<\|?(?:eot_id|endoftext)\|?>")


def neutralize_control_tokens(text: str, extra: tuple[str, ...] = ()) -> str:
    """Break chat-template control tokens in untrusted text (`<|im_end|>` -> `<| im_end |>`)
    so a tokenizer cannot read them as special tokens."""
    for token in extra:
        if token and len(token) > 1:
            text = text.replace(token, token[0] + "\u200b" + token[1:])
    return _CONTROL.sub(lambda m: m.group(0)[0] + "\u200b" + m.group(0)[1:], text)
