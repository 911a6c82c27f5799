"""Eval suites and how their answers are judged: normalised text match and tolerant numeric match.
Whether each model reply followed the ReAct format is its step's kind (`StepKind.format_valid`).

The rules, and why:
- A gold answer that is a JSON number (int / float) is scored numerically: the LAST number in
  the prediction must be within relative tolerance 1e-4 of it (absolute 1e-9 when the gold is 0).
  The last number is the GSM8K convention: models restate the question's numbers and show
  their working before the result ("16 - 3 - 4 = 9 eggs, at $2 each: 18"), so "any number"
  would reward a restated input; the result is almost always written last.
- A gold answer that is a string is scored as text: both sides are normalised (NFKC, so
  full-width becomes half-width; lower case; ASCII and CJK punctuation removed; English
  articles dropped; whitespace collapsed) and succeed when equal, or when the gold appears in
  the prediction as a whole phrase (not glued to a Latin letter or digit on either side), so
  "1979" is found in "Jay Chou was born in 1979." and in "周杰伦出生于1979年", but "art" is not
  found in "party" nor "1979" in "19790". Write numbers as strings when the answer is a year
  or a name that should be found anywhere in the text.
- A list of accepted answers succeeds when any of them does.
- A mapping {"text": "Jay", "not_within": ["Jay Chou"]} is a string answer that does not count where it is
  part of one of the `not_within` phrases: those are taken out of the prediction first. Jay Chou's first
  album is "Jay"; without this, any answer naming the singer would be right.
"""

from __future__ import annotations

import json
import math
import re
import string
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

from ..agent import Step, StepKind

Gold = str | int | float | list | dict

REL_TOL = 1e-4
ABS_TOL_AT_ZERO = 1e-9

_CJK_PUNCT = "，。！？、：；“”‘’《》（）【】「」『』〈〉…—～·"
_PUNCT = re.compile("[" + re.escape(string.punctuation + _CJK_PUNCT) + "]")
_ARTICLES = re.compile(r"\b(?:a|an|the)\b")
_SPACES = re.compile(r"\s+")
# A number: optional sign, digits with optional thousands commas, optional decimals / exponent.
# Not glued to a Latin letter or digit before it (CJK text around numbers is fine), so a hyphen
# between words or numbers ("3-4", "COVID-19") is not read as a minus sign.
_NUMBER = re.compile(r"(?<![A-Za-z0-9_.])-?(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?")
# Letters that make a word continue (Latin, Greek, Cyrillic) and digits; CJK characters are not
# among them, since CJK text has no spaces between words.
_WORD_CHARS = "0-9a-z\u00c0-\u024f\u0370-\u03ff\u0400-\u04ff"
_MINUS = str.maketrans({"\u2212": "-", "\u2013": "-", "\uff0d": "-"})


def normalize_text(text: str) -> str:
    """Text as it is compared: NFKC, lower case, no punctuation or articles, single spaces."""
    text = unicodedata.normalize("NFKC", str(text)).lower()
    text = _PUNCT.sub(" ", text)
    text = _ARTICLES.sub(" ", text)
    return _SPACES.sub(" ", text).strip()


def extract_numbers(text: str) -> list[float]:
    """Every number in `text`, in order: 1,000 -> 1000.0, -3.5, 2e3; full-width digits too."""
    text = unicodedata.normalize("NFKC", str(text)).translate(_MINUS)
    numbers = []
    for m in _NUMBER.finditer(text):
        try:
            numbers.append(float(m.group(0).replace(",", "")))
        except ValueError:
            continue
    return numbers


def numbers_match(predicted: float, gold: float) -> bool:
    """Equal within relative tolerance 1e-4 (absolute 1e-9 when the gold is 0)."""
    if gold == 0:
        return abs(predicted) <= ABS_TOL_AT_ZERO
    return math.isfinite(predicted) and abs(predicted - gold) <= REL_TOL * abs(gold)


def _phrase(text: str) -> str:
    """A regex for normalised `text` as a whole phrase: not glued to a Latin letter or digit."""
    return rf"(?<![{_WORD_CHARS}])" + re.escape(text) + rf"(?![{_WORD_CHARS}])"


def text_match(prediction: str, gold: str, not_within: tuple[str, ...] | list[str] = ()) -> bool:
    """Normalised equality, or the normalised gold as a whole phrase inside the prediction, once each
    `not_within` phrase is taken out of the prediction."""
    pred, want = normalize_text(prediction), normalize_text(gold)
    for phrase in not_within:
        if normalize_text(phrase):
            pred = _SPACES.sub(" ", re.sub(_phrase(normalize_text(phrase)), " | ", pred)).strip()
    if not want:
        return not pred
    if pred == want:
        return True
    return re.search(_phrase(want), pred) is not None


def score(prediction: str | None, gold: Gold) -> bool:
    """Whether `prediction` answers `gold` (a string, a number, or a list of accepted answers)."""
    if prediction is None:
        return False
    if isinstance(gold, list):
        return any(score(prediction, g) for g in gold)
    if isinstance(gold, bool):
        raise TypeError(
            "a gold answer must be a string, a number, a list or a {text, not_within} mapping, not a boolean"
        )
    if isinstance(gold, (int, float)):
        numbers = extract_numbers(prediction)
        return bool(numbers) and numbers_match(numbers[-1], float(gold))
    if isinstance(gold, str):
        return text_match(prediction, gold)
    if isinstance(gold, dict) and is_valid_gold(gold):
        return text_match(prediction, gold["text"], gold.get("not_within", ()))
    raise TypeError(
        f"a gold answer must be a string, a number, a list or a {{text, not_within}} mapping, not {type(gold).__name__}"
    )


def is_valid_gold(gold) -> bool:
    """A gold answer the scorer accepts: a non-empty string, a finite number, or a non-empty list of those."""
    if isinstance(gold, list):
        return bool(gold) and all(is_valid_gold(g) and not isinstance(g, list) for g in gold)
    if isinstance(gold, dict):
        phrases = gold.get("not_within", [])
        return (
            set(gold) <= {"text", "not_within"}
            and is_valid_gold(gold.get("text"))
            and isinstance(gold.get("text"), str)
            and isinstance(phrases, list)
            and all(isinstance(x, str) and normalize_text(x) for x in phrases)
        )
    if isinstance(gold, bool):
        return False
    if isinstance(gold, (int, float)):
        return math.isfinite(gold)
    return isinstance(gold, str) and bool(normalize_text(gold))


# --- format validity of model replies ------------------------------------------------------------

#: Reply kinds that followed the ReAct format, and those that did not (`StepKind` says which is which).
VALID_KINDS = tuple(k for k in StepKind if k.format_valid)
FORMAT_ERROR_KINDS = tuple(k for k in StepKind if k.format_error)


def tool_error(step: Step) -> str | None:
    """The runtime error of a well-formed tool call (network down, bad arithmetic), or None.

    Format errors and repeated calls are not tool errors: the tool never ran.
    """
    return step.error if step.kind == StepKind.TOOL_ERROR else None


# --- suites -------------------------------------------------------------------------------------


class SuiteError(ValueError):
    """A suite file that cannot be used; the message is one line naming the file (and line)."""


@dataclass
class SuiteItem:
    """One question of a suite; `extra` holds its other keys (e.g. "source")."""

    id: str
    question: str
    answer: Gold
    extra: dict = field(default_factory=dict)


def load_suite(path: str | Path) -> list[SuiteItem]:
    """Read and check a JSONL suite; raise SuiteError with the file and line of the first problem."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SuiteError(f"{path}: no such suite file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise SuiteError(f"{path}: cannot read the suite ({type(e).__name__}: {e})") from None
    items: list[SuiteItem] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            row = json.loads(line)
        except ValueError as e:
            raise SuiteError(f"{where}: not valid JSON ({e})") from None
        if not isinstance(row, dict):
            raise SuiteError(f"{where}: each line must be a JSON object with id, question and answer")
        missing = [k for k in ("id", "question", "answer") if k not in row]
        if missing:
            raise SuiteError(f"{where}: missing key{'s' if len(missing) > 1 else ''} {', '.join(missing)}")
        item_id, question, answer = row.pop("id"), row.pop("question"), row.pop("answer")
        if not isinstance(item_id, (str, int)) or isinstance(item_id, bool) or str(item_id).strip() == "":
            raise SuiteError(f"{where}: id must be a non-empty string or an integer")
        if not isinstance(question, str) or not question.strip():
            raise SuiteError(f"{where}: question must be a non-empty string")
        if not is_valid_gold(answer):
            raise SuiteError(
                f"{where}: answer must be a non-empty string, a finite number, a "
                f"{{\"text\", \"not_within\"}} mapping, or a list of those, not {json.dumps(answer, ensure_ascii=False)[:60]}"
            )
        item_id = str(item_id)
        if item_id in seen:
            raise SuiteError(f"{where}: id {item_id!r} is already used on line {seen[item_id]}")
        seen[item_id] = number
        items.append(SuiteItem(item_id, question, answer, row))
    if not items:
        raise SuiteError(f"{path}: the suite has no questions")
    return items
