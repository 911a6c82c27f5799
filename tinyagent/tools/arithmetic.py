"""The calculator reading a worked answer: the arithmetic the text writes out ("3 + 6 + 9 = 20",
"\\[ 465 \\times 321 = 1500035 \\]", "(10 + 6 + 9) * 2 + 17 = 36 + 18 + 17 = 71") found line by line and
computed again, so the agent can tell the model which of its steps are wrong (`Agent(check_arithmetic=True)`).

Careful before complete: a line is read only where it is plainly arithmetic. An expression needs a number
first and an operator between numbers; words, units, percentages and variables end it, so "2x + 3 = 11",
"20% of 50 = 10" and "x = 5" claim nothing. A result is right within one unit of its last written digit
when the exact value is not whole ("260 / 3 = 86.67", "2 / 3 = 0.66"), exactly when it is.
"""
from __future__ import annotations

import math
import re
import unicodedata
from dataclasses import dataclass, replace

from .calculator import CalculatorError, evaluate, format_number

MAX_LINE_CHARS = 400  # longer lines are prose, not a step of working
#: expression = expression ("36 + 18 = 50 + 4"), or anything with ≈: the values agree to 1%
LOOSE = 1e-2

_LATEX = [  # (pattern, replacement), in order
    (re.compile(r"\\(?:times|cdot|ast)(?![a-zA-Z])"), "*"),
    (re.compile(r"\\div(?![a-zA-Z])"), "/"),
    (re.compile(r"\\approx(?![a-zA-Z])"), "≈"),
    (re.compile(r"\\[$%]"), lambda m: m.group(0)[1]),
    (re.compile(r"\\[,;:! ]"), ""),                         # thin spaces, also used between thousands
    (re.compile(r"\\(?:left|right)(?![a-zA-Z])"), ""),
    (re.compile(r"\\[()\[\]]"), " "),                      # \( \) \[ \]
]
_FRAC = re.compile(r"\\[dt]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}")
_COMMAND = re.compile(r"\\[a-zA-Z]+(?:\{[^{}]*\})?")     # \text{...}, \quad, \mathrm{...}: a word
_BOLD = re.compile(r"(?<![\d)])\*\*|\*\*(?![\d(])")        # markdown bold, not a power between numbers
_TIMES_X = re.compile(r"(?<=[\d)])\s*[xX×]\s*(?=[\d(])")  # 3 x 4
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_IMPLICIT = [(re.compile(r"(?<=[\d)])\s*\("), "*("), (re.compile(r"\)(?=\d)"), ")*")]  # 2 (3+4), (3+4)2; not "(2) 3"
_LIST_MARK = re.compile(r"^\s*(?:[-*+•]|\d{1,2}[.)]|\(\d{1,2}\)|[a-zA-Z][.)])\s+")
_SPAN = re.compile(r"[\d.\s+\-*/^()=≈]+")  # a run of plain arithmetic
_BETWEEN = re.compile(r"[\d.)]\s*(?:\*\*|[+\-*/^])\s*[\d.(]")  # an operator between two operands
_SIGN = re.compile(r"[=≈]")
_RAW_SIGN = re.compile(r"\\approx(?![a-zA-Z])|[=＝≈]")  # the same signs before `_normalise`
_RESULT_LEAD = re.compile(r"[ \t]*(?:\\?\$)?[ \t]*")  # " ", " $", " \\$" before a result
_RAW_NUMBER = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")
_CLOSERS = re.compile(r"[ \t]*(?:\\[)\]]|[)\]}$.,;:!?*%]|[ \t])*")  # what ends a result on its line
_OPERATOR = re.compile(r"[+\-*/^]")
_CONTINUED = re.compile(r"[^\d=\n]{1,40}?[*/+^]\s*[\d(]")
_NUMBER = re.compile(r"\s*-?\d+(?:\.\d+)?\s*")


@dataclass(frozen=True)
class Claim:
    """One `expression = written` the text claims, and the calculator's `value` of the expression; where:
    the text's `line` (0-based) and which `=` or `≈` of that line (`sign`, 0-based)."""
    expression: str
    written: str
    value: int | float
    right: bool
    line: int = 0
    sign: int = 0

    def __str__(self) -> str:
        return f"{self.expression} = {self.written}"

    @property
    def computed(self) -> str:
        """The value as a working writes it: whole numbers whole, others to at most 4 decimals."""
        value = self.value
        return format_number(round(value, 4) if isinstance(value, float) else value)


def claims(text: str) -> list[Claim]:
    """Every arithmetic claim of the text, in order."""
    found: list[Claim] = []
    for i, line in enumerate(text.splitlines()):
        if len(line) <= MAX_LINE_CHARS:
            found += [replace(c, line=i) for c in _line_claims(_normalise(line))]
    return found


def wrong_claims(text: str) -> list[Claim]:
    """The claims the calculator finds wrong, each once, in order."""
    seen, wrong = set(), []
    for c in claims(text):
        if not c.right and (c.expression, c.written) not in seen:
            seen.add((c.expression, c.written))
            wrong.append(c)
    return wrong


def corrected(text: str, claim: Claim) -> str | None:
    """The text up to the claim's result, that result set to the calculator's value, and what closes it on
    its line (" \\]", ")", "."), ending in a newline where the line's text ends: a working set right at its
    first wrong step, for the model to continue from after it (never inside the number). None when the sign
    cannot be found again in the line as written."""
    lines = text.splitlines(keepends=True)
    line = lines[claim.line]
    signs = list(_RAW_SIGN.finditer(line))
    if claim.sign >= len(signs):
        return None
    sign = signs[claim.sign]
    if len(_SIGN.findall(_normalise(line[:sign.start()]))) != claim.sign:
        return None  # the line's signs do not line up with the normalised line's (an `=` inside \\text{})
    lead = _RESULT_LEAD.match(line, sign.end()).group(0)
    number = _RAW_NUMBER.match(line, sign.end() + len(lead)) if _NUMBER.fullmatch(claim.written) else None
    close = _CLOSERS.match(line, number.end()).group(0) if number else ""
    rest = line[number.end() + len(close):] if number else ""
    return "".join(lines[:claim.line]) + line[:sign.end()] + lead + claim.computed + close + \
        ("\n" if not rest.strip() or not number else "")


def _normalise(line: str) -> str:
    """LaTeX and typography as the calculator writes them: `\\frac{a}{b}` as (a/b), `\\times` as *, no
    thousands separators, no currency signs or markdown; anything else LaTeX spells as a word."""
    s = unicodedata.normalize("NFKC", line)
    s = _LIST_MARK.sub(" ", s)
    for pattern, new in _LATEX:
        s = pattern.sub(new, s)
    while (framed := _FRAC.sub(lambda m: f"({_grouped(m.group(1))}/{_grouped(m.group(2))})", s)) != s:
        s = framed
    s = _COMMAND.sub(" word ", s)
    s = s.replace("{", "(").replace("}", ")").replace("$", "")
    s = _BOLD.sub(" ", s)
    s = s.replace("−", "-").replace("÷", "/").replace("·", "*")
    s = _TIMES_X.sub("*", s)
    s = _THOUSANDS.sub("", s)
    for pattern, new in _IMPLICIT:
        s = pattern.sub(new, s)
    return s


def _grouped(term: str) -> str:
    term = term.strip()
    return term if _NUMBER.fullmatch(term) else f"({term})"


def _line_claims(line: str) -> list[Claim]:
    out = []
    for span in _SPAN.finditer(line):
        if _CONTINUED.match(line, span.end()):
            continue  # "= 400 m/s × 1.10": its last result is cut off by a unit
        before = len(_SIGN.findall(line, 0, span.start()))
        parts = re.split(r"(=|≈)", span.group(0))
        if len(parts) < 3:
            continue
        segments, signs = parts[0::2], parts[1::2]
        glued = span.start() > 0 and not line[span.start() - 1].isspace() and not segments[0][:1].isspace()
        exprs = [_longest(segments[0], suffix=True, whole=not glued)]  # "12:30 + 1": not from 30
        for seg in segments[1:-1]:
            exprs.append(_parse(seg.strip()))
        exprs.append(_longest(segments[-1], suffix=False))
        for i, sign in enumerate(signs):
            left, right = exprs[i], exprs[i + 1]
            if left is None or right is None:
                continue
            if not _BETWEEN.search(left[0]):
                continue  # "x = 5", "18 = 18": nothing computed
            expression_right = _BETWEEN.search(right[0]) is not None
            if expression_right and _leads_with(right[0], left[1]):
                continue  # a running total, "2 + 3 = 5 * 2 = 10": the next step, not a claim of equality
            out.append(replace(_claim(left, right, loose=sign == "≈" or expression_right), sign=before + i))
    return out


def _parse(text: str) -> tuple[str, int | float] | None:
    """(text, value) when `text` is an expression that begins with a number or a bracket, else None."""
    text = text.strip().rstrip(".")
    if not text or not (text[0].isdigit() or text[0] == "(" or (text[0] == "-" and text[1:2].isdigit())):
        return None
    if text.count("(") != text.count(")"):
        return None
    try:
        value = evaluate(text)
    except CalculatorError:
        return None
    return (" ".join(text.split()), value)


def _longest(segment: str, suffix: bool, whole: bool = True) -> tuple[str, int | float] | None:
    """The longest expression at the segment's end (the left of an `=`) or start (its right); None when
    an operator is cut off from it ("400 m/s × (1 + 0.10) = ...": the left side is not all arithmetic).
    `whole=False`: not the whole segment (it is glued to the word before it)."""
    n = len(segment)
    for k in range(0 if whole else 1, n):
        piece, rest = (segment[k:], segment[:k]) if suffix else (segment[: n - k], segment[n - k:])
        cut = rest[-1:] if suffix else rest[:1]
        if cut.isdigit() or cut == ".":
            continue  # not from the middle of a number
        parsed = _parse(piece)
        if parsed is not None:
            return None if _OPERATOR.search(rest) else parsed
    return None


def _leads_with(expression: str, value: int | float) -> bool:
    first = _NUMBER.match(expression.lstrip("("))
    return first is not None and math.isclose(float(first.group(0)), value, rel_tol=LOOSE, abs_tol=1e-9)


def _claim(left: tuple[str, int | float], right: tuple[str, int | float], loose: bool) -> Claim:
    (expression, value), (written, claimed) = left, right
    if loose:
        ok = math.isclose(value, claimed, rel_tol=LOOSE, abs_tol=1e-9)
    elif _NUMBER.fullmatch(written):
        decimals = len(written.split(".")[1]) if "." in written else 0
        whole = abs(value - round(value)) < 1e-9
        ok = claimed == round(value) if whole and decimals == 0 else abs(value - claimed) <= 10 ** -decimals + 1e-9
    else:
        ok = math.isclose(value, claimed, rel_tol=1e-9, abs_tol=1e-9)
    return Claim(expression, written, value, ok)
