"""One ReAct reply as a pattern: what a constrained reply may be, and its regular expression.

Shared by the local engine's constrained decoding (which compiles the pattern into a token
automaton) and by servers with regex-guided decoding (the OpenAI backend sends it as is). The JSON
schema of a tool's arguments becomes a regex through outlines-core, the optional `constrained`
extra; it is a pure function of the schema text, imported only when a pattern is built.
"""

from __future__ import annotations

import functools
import importlib.util
import json
from collections.abc import Callable
from dataclasses import dataclass, replace

from .kinds import StepKind

#: One line of free text (a thought, an answer) that does not start with a space.
FREE_TEXT = r"[^ \n][^\n]*"
#: Each line of a constrained reply gets at most this many tokens; then the decoder ends the line.
MAX_LINE_TOKENS = 64
#: Between JSON tokens of constrained arguments: at most one space, never a newline.
JSON_WHITESPACE = r"[ ]?"
INSTALL_HINT = "constrained decoding needs outlines: pip install 'tinyagent[constrained]'"
_REGEX_META = set("\\.+*?()|[]{}^$#&-~")


@dataclass(frozen=True)
class StepFormat:
    """What one constrained reply may be, as data; `step_pattern` turns it into a regex.

    `tools` holds (name_for_model, the JSON schema of its arguments as JSON text) pairs. Without
    `final_answer` the step must call one of them. With `answer_only` the reply is only the text
    after a forced `Final Answer:`. `max_line_tokens` caps each line, so a model cannot write one
    thought forever. With `calls` the reply is free text, or text then calls in that family's format
    (`ToolFormat.reply_pattern`).
    """

    tools: tuple[tuple[str, str], ...] = ()
    final_answer: bool = True
    answer_only: bool = False
    max_line_tokens: int = MAX_LINE_TOKENS
    calls: object = None  # a tool_formats.ToolFormat: the model's own call format instead of ReAct text
    answer_schema: str | None = None  # JSON Schema text: the final answer is JSON that fits it


#: The reply after the turn cap's `Final Answer:` (react.force_final in data/prompts/react.yaml): one line of answer text.
ANSWER_FORMAT = StepFormat(answer_only=True)


def step_format(tools, final_answer: bool = True, calls=None) -> StepFormat:
    """One step over `tools`: a thought, then a call of one of them with valid arguments, or (when
    `final_answer`, or when there are no tools) the final answer; in ReAct text, or in `calls`' format."""
    described = tuple((t.name_for_model, json.dumps(t.json_schema(), ensure_ascii=False)) for t in tools)
    return StepFormat(tools=described, final_answer=final_answer or not described, calls=calls)


def next_step_format(tools, steps, forced: bool = False, calls=None, answer_schema: str | None = None) -> StepFormat:
    """What the next reply of a constrained run may be, given the run's steps so far.

    After the turn cap (`forced`) only the answer's text. The first step calls a tool: a small model
    that answers unaided is guessing. After a repeated call the step gives the final answer: the
    model is stuck, and more turns would repeat the call. Otherwise a tool call or the answer. With
    `answer_schema` (JSON Schema text) the answer is JSON that fits it.
    """
    if forced:
        return StepFormat(answer_only=True, calls=calls, answer_schema=answer_schema)
    if steps and steps[-1].kind == StepKind.REPEATED_CALL:
        return replace(step_format([], calls=calls), answer_schema=answer_schema)
    return replace(step_format(tools, final_answer=bool(steps), calls=calls), answer_schema=answer_schema)


def step_pattern(fmt: StepFormat, arguments_pattern: Callable[[str], str]) -> str:
    """The regular expression of one reply in `fmt`.

    A step is `Thought: <text>` and a newline, then either `Action: <tool>`, a newline and
    `Action Input: <arguments>`, or `Final Answer: <text>`. `arguments_pattern(schema_json)` is the
    regex of a JSON object valid for a tool's schema.
    """
    if fmt.calls is not None:
        return fmt.calls.reply_pattern(fmt, arguments_pattern)
    answer = FREE_TEXT if fmt.answer_schema is None else arguments_pattern(fmt.answer_schema)
    if fmt.answer_only:
        return " ?" + answer
    endings = [
        f"Action: {escape_pattern(name)}\\nAction Input: {arguments_pattern(schema)}" for name, schema in fmt.tools
    ]
    if fmt.final_answer:
        endings.append("Final Answer: " + answer)
    return f"Thought: {FREE_TEXT}\\n(?:{'|'.join(endings)})"


def escape_pattern(text: str) -> str:
    """`text` as a literal in a regex that both Python and Rust (outlines-core) regex engines read."""
    return "".join("\\" + c if c in _REGEX_META else c for c in text)


# --- JSON arguments as a regex (outlines-core) ----------------------------------------------------


def outlines_available() -> bool:
    """Whether outlines' engine (outlines-core) is installed, without importing it."""
    return importlib.util.find_spec("outlines_core") is not None


def require_outlines() -> None:
    """Raise ImportError with the install command when outlines (and so outlines-core) is missing."""
    if not outlines_available():
        raise ImportError(INSTALL_HINT)


@functools.lru_cache(maxsize=256)
def arguments_pattern(schema_json: str) -> str:
    """The regex of a JSON value valid for `schema_json` (an object: required keys, types, no other keys)."""
    require_outlines()
    from outlines_core.json_schema import build_regex_from_schema  # the optional extra

    try:
        return build_regex_from_schema(schema_json, JSON_WHITESPACE)
    except (ValueError, TypeError) as e:  # an unsupported or malformed schema
        raise ValueError(f"cannot constrain arguments with the schema {schema_json[:120]}: {e}") from None


def pattern_of(fmt: StepFormat) -> str:
    """The regex of one reply in `fmt`, arguments included."""
    return step_pattern(fmt, arguments_pattern)
