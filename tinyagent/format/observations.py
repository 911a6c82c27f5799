"""What the model reads after a step: observations, error observations with the form to copy, and the
markers of text cut to fit (an observation's length cap, the context window). Pure text."""

from __future__ import annotations

import re

from .arguments import skeleton
from .kinds import StepKind
from .templates import Prompts, shipped

#: The most of a tool's output kept anywhere (the step's raw observation, traces, --json, eval results).
MAX_RAW_OBSERVATION_CHARS = 64 * 1024
RAW_MARKER = "\n[... {n} more characters not kept ...]"
#: Tool output past `max_observation_chars` is cut with this marker.
TRUNCATION_MARKER = {"en": "\n[... {n} more characters cut ...]", "zh": "\n[……已截去 {n} 个字符……]"}
#: Markers of what context fitting shortened (agent/context.py).
OBSERVATION_MARK = {"en": "\n[... shortened to fit the context window ...]", "zh": "\n[……为适应上下文窗口已缩短……]"}
QUESTION_MARK = {
    "en": "\n[... {n} characters omitted to fit the context window ...]\n",
    "zh": "\n[……为适应上下文窗口省略了 {n} 个字符……]\n",
}
HISTORY_MARK = {
    "en": "\n\n[{n} earlier conversation turn(s) omitted to fit the context window.]",
    "zh": "\n\n[为适应上下文窗口，省略了之前的 {n} 轮对话。]",
}
#: HISTORY_MARK at the end of a system prompt, in either language; group 1 is the count.
HISTORY_MARK_RE = re.compile(r"\n\n\[(?=[^\[\]]*(?:context window|上下文窗口))[^\[\]\d]*(\d+)[^\[\]]*\]$")


def format_observation(observation: str) -> str:
    """The scratchpad text that follows a tool call."""
    return f"\nObservation: {observation.strip()}\n"


def observation_line(step) -> str | None:
    """A step's observation (or its error, when it has none) as a transcript line, for people to read; none
    for the model's own working (its observation is the agent's request to check it, kept in the trace)."""
    if step.kind == StepKind.WORKING:
        return None
    if step.observation is not None:
        return f"Observation: {step.observation}"
    return f"Error: {step.error}" if step.error else None


def kept(text: str, limit: int = MAX_RAW_OBSERVATION_CHARS) -> str:
    """Tool output as it is stored: at most `limit` characters and a marker saying how many were dropped.
    Text already kept is left as it is (its marker fits the room left for one)."""
    if len(text) <= limit + len(RAW_MARKER) + 10:
        return text
    return text[:limit] + RAW_MARKER.format(n=len(text) - limit)


def cut(text: str, limit: int, lang: str) -> str:
    """`text` cut to `limit` characters, with a marker saying how many more there were."""
    return text if len(text) <= limit else text[:limit] + TRUNCATION_MARKER[lang].format(n=len(text) - limit)


# --- what to write instead ----------------------------------------------------------------------


def example_call(tool) -> str:
    """`Action: name` and `Action Input: {...}` for `tool`, as two lines."""
    return f"Action: {tool.name_for_model}\nAction Input: {skeleton(tool)}"


def error_observation(message: str, worked_for=None, prompts: Prompts | None = None) -> str:
    """The observation of a format error; with a tool, also a complete step to copy (a repeated mistake)."""
    prompts = prompts or shipped()
    text = prompts.fill("react.error", "en", message=message)
    if worked_for is None:
        return text
    return (
        text + "\n" + prompts.fill("react.worked", "en", tool=worked_for.name_for_model, call=example_call(worked_for))
    )


def repeated_call_observation(tool_name: str, step_number: int, prompts: Prompts | None = None) -> str:
    """What a model is told when it calls a tool again with the arguments of an earlier step."""
    return (prompts or shipped()).fill("react.repeated_call", "en", tool=tool_name, step=step_number)


def refused_observation(tool_name: str, reason: str, lang: str = "en", prompts: Prompts | None = None) -> str:
    """The observation of a call that was refused, with the reason it was given."""
    return (prompts or shipped()).fill("common.refused", lang, tool=tool_name, reason=reason.rstrip("."))


def tool_failure(tool_name: str, error: BaseException) -> str:
    """The observation of a tool that raised something other than ToolError (a bug in the tool)."""
    return f"Error: {tool_name} failed: {type(error).__name__}: {error}"


# --- tool output is data ------------------------------------------------------------------------

#: Chat-template control tokens of the model families TinyAgent knows, as they appear in text.
_CONTROL = re.compile(
    r"<\|[^<>|\n]{1,40}\|>"  # ChatML, Llama 3, Phi, GLM, InternLM2: <|im_end|>
    r"|<｜[^<>｜\n]{1,40}｜>"  # DeepSeek: <｜User｜>, <｜end▁of▁sentence｜>
    r"|</?s>|<</?SYS>>|\[/?INST\]"  # Llama 2, Mistral
    r"|\[/?(?:SYSTEM_PROMPT|TOOL_RESULTS|TOOL_CALLS|AVAILABLE_TOOLS|TOOL_CONTENT|THINK)\]"  # Mistral's later ones
    r"|\[[gs]?MASK\]|<[se]op>"  # GLM
    r"|<(?:start|end)_of_\w{1,20}>|</?(?:bos|eos|pad|unk)>"  # Gemma, and the generic ones
    r"|</?(?i:think)>|</?tool_(?:call|response)>"  # reasoning blocks, Qwen's tool blocks
    r"|<\|?(?:eot_id|endoftext)\|?>"
)
#: A zero-width space after a token's first character: it reads the same and tokenises as plain text.
_BREAK = "\u200b"


def neutralize_control_tokens(text: str, extra: tuple[str, ...] = ()) -> str:
    """Break chat-template control tokens in untrusted text (`<|im_end|>` -> `<\u200b|im_end|>`), the known
    families' and the `extra` ones a model declares, so a tokenizer cannot read them as special tokens."""
    for token in extra:
        if token and len(token) > 1 and token in text:
            text = text.replace(token, token[0] + _BREAK + token[1:])
    return _CONTROL.sub(lambda m: m.group(0)[0] + _BREAK + m.group(0)[1:], text)
