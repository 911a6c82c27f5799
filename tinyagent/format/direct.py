"""The no-agent baseline as text: one plain prompt (en / zh, data/prompts/direct.yaml) asking the model for its
working and a last line with the answer, and reading that line back. Pure text; no tools, no ReAct labels.

The eval harness asks the same model the same questions this way (`--baseline direct`) to tell whether
the agent around it is why it is right.
"""

from __future__ import annotations

import re

from ..text import mask_thinking
from .templates import Prompts, shipped

# "The answer is 18.", "**Final answer is: $18**", "答案是 18。", "答案为：18": the line's start may carry
# markdown markers, the answer runs to the end of the line.
_ANSWER_LINE = re.compile(
    r"^[ \t>*#_-]*(?:(?:so|therefore|thus|hence)[, ]+)?(?:the[ \t]+)?(?:final[ \t]+)?answer"
    r"[ \t]*(?:is|:)[ \t]*:?"
    r"|^[ \t>*#_-]*(?:所以|因此)?[，,]?(?:最终)?答案(?:是|为|[:：])[ \t]*[:：]?",
    re.IGNORECASE | re.MULTILINE,
)
_TRIM = " \t*_`.。!！"


def direct_messages(question: str, lang: str = "en", prompts: Prompts | None = None) -> list[dict]:
    """The baseline's whole conversation: one user message holding the instruction and the question
    (data/prompts/direct.yaml)."""
    return [{"role": "user", "content": (prompts or shipped()).fill("direct.question", lang, question=question)}]


def read_direct_answer(reply: str) -> str | None:
    """The answer on the reply's last answer line ("The answer is X." / "答案是 X。"), or None when the
    reply has none. Text inside a reasoning block (`<think>`) does not count."""
    visible = mask_thinking(reply)
    found = list(_ANSWER_LINE.finditer(visible))
    for m in reversed(found):
        end = visible.find("\n", m.end())
        answer = visible[m.end() : end if end >= 0 else len(visible)].strip(_TRIM)
        if answer:
            return answer
    return None


_BOXED = re.compile(r"\\boxed\{((?:[^{}]|\{[^{}]*\})*)\}")


def working_answer(reply: str) -> str | None:
    """The answer a worked reply ends on, as people read it (`plain_answer`): its answer line, else its last
    `\\boxed{...}` (where models trained on maths put it), else None."""
    line = read_direct_answer(reply)
    if line is None:
        found = _BOXED.findall(mask_thinking(reply))
        line = found[-1] if found else None
    return (plain_answer(line) or None) if line is not None else None


def last_line(reply: str) -> str | None:
    """A reply's last non-empty visible line, as an answer read without an answer line: what retrieve-then-answer
    takes when a grounded reply answers ("春节是农历的正月初一。") without writing "The answer is"."""
    lines = [line for line in mask_thinking(reply).splitlines() if line.strip(_TRIM)]
    return (plain_answer(lines[-1]) or None) if lines else None


_DELIMITERS = re.compile(r"\\[()\[\]]")
_PLACEHOLDER = re.compile(r"^X\s*[=:]\s*(?=\S)")  # "X = 1994": the prompt's X copied before the answer


def plain_answer(answer: str) -> str:
    """An answer without the LaTeX around it: `\\(\\boxed{28}\\)` as 28, `\\boxed{18} liters` as 18 liters, and
    without the prompt's placeholder ("X = 1994" as 1994). Currency signs and fractions stay."""
    text = _DELIMITERS.sub("", _BOXED.sub(lambda m: m.group(1), answer)).strip()
    if len(text) > 2 and text[0] == text[-1] == "$":
        text = text.strip("$")  # $18$: inline maths, not a currency sign
    return _PLACEHOLDER.sub("", text).strip(_TRIM)


# "The answer to the question is 1889.", "So the final answer is: Michael Collins", "问题的答案是 1979年": a lead-in
# a model writes before the answer itself.
_LEAD_IN = re.compile(
    r"^(?:(?:so|therefore|thus|hence)[, ]+)?(?:the )?(?:final )?answer(?: to (?:the|this|your) "
    r"(?:original )?question)?(?: is|:)\s*:?\s*|^(?:所以|因此)?[，,]?(?:这个|该)?(?:问题的)?(?:最终)?答案(?:是|为|[:：])\s*",
    re.IGNORECASE,
)
# A question that asks for a year, and a year in an answer.
_ASKS_YEAR = re.compile(r"\b(?:which|what) year\b|\bin what year\b|哪一年|哪年|何年|什么年份", re.IGNORECASE)
_YEAR = re.compile(r"(?<![\d.,])(1\d{3}|20\d{2})(?!\d|[.,]\d)(年)?")


def short_answer(answer: str, question: str = "") -> str:
    """The answer itself, where a model wrote it inside a sentence: a lead-in dropped ("The answer to the question
    is 1889." as 1889), and, when the question asks for a year and the answer names exactly one, that year ("Jay
    Chou was born in 1979." as 1979; 年 kept in Chinese). Anything else is returned as written."""
    text = answer.strip()
    rest = _LEAD_IN.sub("", text, count=1).strip()
    text = (rest.strip(_TRIM + "\"'“”「」") or text) if rest != text else text
    years = {m.group(0) for m in _YEAR.finditer(text)}
    if _ASKS_YEAR.search(question) and len(years) == 1 and len(text) > len(next(iter(years))):
        return next(iter(years))
    return text
