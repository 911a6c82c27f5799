"""The calculator reading a worked answer: the arithmetic the text writes out ("3 + 6 + 9 = 20",
"\\[ 465 \\times 321 = 1500035 \\]", "(10 + 6 + 9) * 2 + 17 = 36 + 18 + 17 = 71") found line by line and
computed again, so the agent can tell the model which of its steps are wrong (`Agent(check_arithmetic=True)`).

Careful before complete: a line is read only where it is plainly arithmetic. An expression needs a number
first and an operator between numbers; words, units, percentages and variables end it, and a word that makes it
part of a larger one ("half of 24 + 6") drops it, so "2x + 3 = 11", "20% of 50 = 10", "3/4 = 75%" and "x = 5"
claim nothing. A whole value must be written exactly; any other within one unit of its last written digit
("260 / 3 = 86.67", "2 / 3 = 0.66"); with ≈, or an expression on the right, also within 1%; steps written in order
("3 + 4 × 2 = 14") are right when their running total is.
"""

from __future__ import annotations

import math
import re
import unicodedata
from dataclasses import dataclass, replace

from .calculator import CalculatorError, evaluate, format_number

MAX_LINE_CHARS = 400  # longer lines are prose, not a step of working
#: expression = expression ("36 + 18 = 50 + 4"), or anything with ≈: the values may also differ by 1%
LOOSE = 1e-2

_LATEX = [  # (pattern, replacement), in order
    (re.compile(r"\\(?:times|cdot|ast)(?![a-zA-Z])"), "*"),
    (re.compile(r"\\div(?![a-zA-Z])"), "/"),
    (re.compile(r"\\approx(?![a-zA-Z])"), "≈"),
    (re.compile(r"\\[$%]"), lambda m: m.group(0)[1]),
    (re.compile(r"\\[,;:! ]"), ""),  # thin spaces, also used between thousands
    (re.compile(r"\\(?:left|right)(?![a-zA-Z])"), ""),
    (re.compile(r"\\[()\[\]]"), " "),  # \( \) \[ \]
]
_FRAC = re.compile(r"\\[dt]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}")
_SHORT_FRAC = re.compile(r"\\[dt]?frac(\d)(\d)")  # \\frac12
_MIXED = re.compile(r"(\d+)\s*\\[dt]?frac\s*\{(\d+)\}\s*\{(\d+)\}")  # 2\frac{1}{2}: two and a half
_COMMAND = re.compile(r"\\[a-zA-Z]+(?:\{[^{}]*\})?")  # \text{...}, \quad, \mathrm{...}: a word
# markdown bold ("**Step 2:**", "**Step 2** (3 + 4)"), not a power ("2**3", "2 ** 3")
_BOLD = re.compile(r"(?<![\d)\s])\*\*|\*\*(?![\d(\s-])|(?<=[\d)])\*\*(?=\s)")
_TIMES_X = re.compile(r"(?<=[\d)])\s*[xX×]\s*(?=[\d(])")  # 3 x 4
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_IMPLICIT = re.compile(r"(?<=[\d)])\(")  # 2(3+4); not "Step 2 (3 + 4)" nor "(2)3"
_SUPERSCRIPT = re.compile("[⁰¹²³⁴⁵⁶⁷⁸⁹]+")
_SUPERSCRIPT_DIGITS = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹", "0123456789")
#: a word before an expression that makes it part of a larger one ("half of 24 + 6", "3 times 4 + 2")
_OPERATOR_WORD = re.compile(
    r"(?:\b(?:of|times|twice|half|minus|plus|double[ds]?|triple[ds]?|by|divided|multiplied|per"
    r"|over|less|more|than|from|between|x)|[的乘除加减倍√])\s*$",
    re.IGNORECASE,
)  # "from 1990-2023 = 33"
_LIST_MARK = re.compile(r"^\s*(?:[-*+•]|\d{1,2}[.)]|\(\d{1,2}\)|[a-zA-Z][.)])\s+")
_SPAN = re.compile(r"[\d.\s+\-*/^()=≈]+")  # a run of plain arithmetic
_BETWEEN = re.compile(r"[\d.)]\s*(?:\*\*|[+\-*/^])\s*[\d.(]")  # an operator between two operands
_SIGN = re.compile(r"[=≈]")
_RAW_SIGN = re.compile(r"\\approx(?![a-zA-Z])|[=＝≈]")  # the same signs before `_normalise`
_RESULT_LEAD = re.compile(r"[ \t]*(?:\\?\$)?[ \t]*")  # " ", " $", " \\$" before a result
_RAW_NUMBER = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")
#: what ends a result on its line: a unit written onto it ("8kg", "20元", "\\text{ apples}"), brackets, stops
_CLOSERS = re.compile(
    r"(?:[A-Za-z\u4e00-\u9fff]{1,10}|\\text\{[^{}]*\})?(?:[ \t]*(?:\\[)\]]|[)\]}$.,;:!?*%，。；]))*[ \t]*"
)
_MATH_CLOSE = re.compile(r"[ \t]*(?:\\\]|\\\)|\$\$?)[ \t]*$")  # a line's closing \\] \\) $ $$
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
    approx: bool = False  # written with ≈

    def __str__(self) -> str:
        return f"{self.expression} {'≈' if self.approx else '='} {self.written}"

    @property
    def computed(self) -> str:
        """The value as a working writes it: whole numbers whole, others to 4 decimals (below 1: 4 digits)."""
        value = self.value
        if isinstance(value, float) and 0 < abs(value) < 1:
            return f"{value:.4g}"
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
    if len(_SIGN.findall(_normalise(line[: sign.start()]))) != claim.sign:
        return None  # the line's signs do not line up with the normalised line's (an `=` inside \\text{})
    lead = _RESULT_LEAD.match(line, sign.end()).group(0)
    number = _RAW_NUMBER.match(line, sign.end() + len(lead)) if _NUMBER.fullmatch(claim.written) else None
    if number is None:  # an expression as the result: the line ends with the value (and its closing \\])
        closing = _MATH_CLOSE.search(line.rstrip("\n"))
        close, rest = (closing.group(0) if closing else ""), ""
    else:
        close = _CLOSERS.match(line, number.end()).group(0)
        rest = line[number.end() + len(close) :]
    return (
        "".join(lines[: claim.line])
        + line[: sign.end()]
        + lead
        + claim.computed
        + close
        + ("\n" if not rest.strip() else "")
    )


def _normalise(line: str) -> str:
    """LaTeX and typography as the calculator writes them: `\\frac{a}{b}` as (a/b), `\\times` as *, no
    thousands separators, no currency signs or markdown; anything else LaTeX spells as a word."""
    s = "".join(
        unicodedata.normalize("NFKC", c) if "\uff01" <= c <= "\uff5e" or c == "\u3000" else c for c in line
    )  # full-width forms only: NFKC would make ② and ² plain digits
    s = _SUPERSCRIPT.sub(lambda m: "^" + m.group(0).translate(_SUPERSCRIPT_DIGITS), s)
    s = _LIST_MARK.sub(" ", s)
    for pattern, new in _LATEX:
        s = pattern.sub(new, s)
    s = _MIXED.sub(r"(\1+\2/\3)", _SHORT_FRAC.sub(r"\\frac{\1}{\2}", s))
    while (framed := _FRAC.sub(lambda m: f"({_grouped(m.group(1))}/{_grouped(m.group(2))})", s)) != s:
        s = framed
    s = _COMMAND.sub(" word ", s)
    s = s.replace("{", "(").replace("}", ")").replace("$", "")
    s = _BOLD.sub(" ", s)
    s = _TIMES_X.sub("*", s)
    s = s.replace("−", "-").replace("–", "-").replace("÷", "/").replace("·", "*").replace("×", "*")
    s = _THOUSANDS.sub("", s)
    return _IMPLICIT.sub("*(", s)


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
        words_before = _OPERATOR_WORD.search(line, 0, span.start()) is not None  # "half of 24 + 6 = 18"
        exprs = [None if words_before else _longest(segments[0], suffix=True, whole=not glued)]  # "12:30 + 1"
        for seg in segments[1:-1]:
            exprs.append(_parse(seg.strip()))
        unit_after = line[span.end() : span.end() + 1] in ("%", ":")  # "= 75%", "= 3:4"
        exprs.append(None if unit_after else _longest(segments[-1], suffix=False))
        for i, sign in enumerate(signs):
            left, right = exprs[i], exprs[i + 1]
            if left is None or right is None or not _BETWEEN.search(left[0]):
                continue  # "x = 5", "18 = 18": nothing computed
            try:
                expression_right = _BETWEEN.search(right[0]) is not None
                if expression_right and _leads_with(right[0], left[1]):
                    continue  # a running total, "2 + 3 = 5 * 2 = 10": the next step, not a claim of equality
                claim = _claim(left, right, approx=sign == "≈", expression_right=expression_right)
            except OverflowError:  # a whole number too large to compare with a float
                continue
            out.append(replace(claim, sign=before + i))
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
        piece, rest = (segment[k:], segment[:k]) if suffix else (segment[: n - k], segment[n - k :])
        cut = rest[-1:] if suffix else rest[:1]
        if cut.isdigit() or cut == ".":
            continue  # not from the middle of a number
        parsed = _parse(piece)
        if parsed is not None:
            beside = rest.strip()[-1:] if suffix else rest.strip()[:1]
            # an operator cut off, or a number beside it ("2 1/2 * 4", "12 345 + 655", "= 13 000")
            return None if _OPERATOR.search(rest) or beside.isdigit() else parsed
    return None


def _leads_with(expression: str, value: int | float) -> bool:
    """Whether the expression begins with `value` as written ("17 / 5 = 3 * 5": 3.4 written as 3)."""
    first = _NUMBER.match(expression)  # not "(1/12)": a bracket first is a value of its own
    return first is not None and _agrees(value, float(first.group(0)), first.group(0).strip(), approx=True)


def _claim(
    left: tuple[str, int | float], right: tuple[str, int | float], approx: bool, expression_right: bool
) -> Claim:
    (expression, value), (written, claimed) = left, right
    if expression_right:
        ok = math.isclose(value, claimed, rel_tol=LOOSE, abs_tol=1e-9)
    else:
        ok = _agrees(value, claimed, written, approx)
        in_order = None if ok else _left_to_right(expression)
        ok = ok or (in_order is not None and _agrees(in_order, claimed, written, approx))
    return Claim(expression, written, value, ok, approx=approx)


_TERM = re.compile(r"\s*([+\-*/])?\s*(\d+(?:\.\d+)?)")


def _left_to_right(expression: str) -> int | float | None:
    """The expression worked out in the order written, as a running total ("3 + 4 * 2" as 14): what a
    working means by it when it writes the steps one after another. None with brackets or powers."""
    if any(c in expression for c in "()^") or "**" in expression:
        return None
    terms = _TERM.findall(expression)
    if not terms or terms[0][0] or "".join(op + n for op, n in terms) != expression.replace(" ", ""):
        return None
    in_order = "(" * (len(terms) - 1) + terms[0][1] + "".join(f"{op}{n})" for op, n in terms[1:])
    try:
        return evaluate(in_order)  # "((3+4)*2)": the calculator, bracketed step by step
    except CalculatorError:
        return None


def _agrees(value: int | float, claimed: int | float, written: str, approx: bool) -> bool:
    """A written number against the exact value: equal when the value is whole and written whole, else within
    one unit of the last digit written ("260 / 3 = 86.67", "2 / 3 = 0.66"); with ≈ also within 1%."""
    decimals = len(written.split(".")[1]) if "." in written else 0
    if abs(value - round(value)) < 1e-9 and decimals == 0 and not approx:
        return claimed == round(value)
    return abs(value - claimed) <= 10**-decimals + 1e-9 or (approx and math.isclose(value, claimed, rel_tol=LOOSE))
