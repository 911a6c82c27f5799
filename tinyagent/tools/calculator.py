"""Safe arithmetic: walk the AST of an expression, never `eval` it.

Bounded by construction, not by a timeout: the input's length and nesting, every integer's size
(MAX_RESULT_BITS, checked after each operation, so operands stay small), and, checked before the
call, the arguments that make one C call run long on small numbers (`round`'s digits, a three-argument
`pow`). A call cannot be interrupted once CPython is in it, and it holds the GIL meanwhile.
"""

from __future__ import annotations

import ast
import math
import operator
import unicodedata

from .tool import Tool, ToolError

MAX_INPUT_CHARS = 500
MAX_RESULT_BITS = 4096  # about 1,200 decimal digits
MAX_DEPTH = 60
#: `round(x, n)` for an integer x computes 10**-n: |n| beyond the digits of MAX_RESULT_BITS means nothing.
MAX_ROUND_DIGITS = 1300
#: pow(base, exponent, modulus): the work grows with the exponent's bits times the modulus's bits squared.
MAX_MODULAR_POWER_BITS = 1024

_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_FUNCTIONS = {
    "sqrt": math.sqrt,
    "exp": math.exp,
    "log": math.log,
    "log2": math.log2,
    "log10": math.log10,
    "sin": math.sin,
    "cos": math.cos,
    "tan": math.tan,
    "asin": math.asin,
    "acos": math.acos,
    "atan": math.atan,
    "abs": abs,
    "round": round,
    "floor": math.floor,
    "ceil": math.ceil,
    "min": min,
    "max": max,
    "pow": pow,
}
_CONSTANTS = {"pi": math.pi, "e": math.e}
# What models write for arithmetic that Python spells differently.
_REPLACEMENTS = {"×": "*", "÷": "/", "^": "**", "−": "-", "–": "-", "·": "*"}


class CalculatorError(ToolError):
    """The expression cannot be evaluated safely; the message says why."""


class Calculator(Tool):
    name_for_model = "calculator"
    name_for_human = {"en": "Calculator", "zh": "计算器"}
    description_for_model = {
        "en": "Evaluates an arithmetic expression exactly and returns the number. "
        "Supports + - * / // % ** (or ^), parentheses and sqrt, log, exp, sin, cos, "
        "tan, abs, round, floor, ceil, min, max, pi, e.",
        "zh": "精确计算一个算术表达式并返回结果。支持 + - * / // % **（或 ^）、括号，"
        "以及 sqrt、log、exp、sin、cos、tan、abs、round、floor、ceil、min、max、pi、e。",
    }
    parameters = [
        {
            "name": "expression",
            "description": {
                "en": "the arithmetic expression, e.g. 2**10 or (3+6+9)*2+17",
                "zh": "算术表达式，例如 2**10 或 (3+6+9)*2+17",
            },
            "required": True,
            "schema": {"type": "string"},
        }
    ]

    def call(self, expression: str) -> str:
        return format_number(evaluate(expression))


def evaluate(expression: str) -> int | float:
    """Evaluate arithmetic in `expression`; raise CalculatorError with a clear message otherwise."""
    text = unicodedata.normalize("NFKC", expression).strip()
    for old, new in _REPLACEMENTS.items():
        text = text.replace(old, new)
    text = text.rstrip("=").strip()
    if not text:
        raise CalculatorError("the expression is empty")
    if len(text) > MAX_INPUT_CHARS:
        raise CalculatorError(f"the expression is too long ({len(text)} characters, limit {MAX_INPUT_CHARS})")
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise CalculatorError(f"not a valid arithmetic expression: {text[:80]!r}") from None
    try:
        return _eval(tree.body, 0)
    except ZeroDivisionError:
        raise CalculatorError("division by zero") from None
    except OverflowError:
        raise CalculatorError("the result is too large") from None
    except (ValueError, TypeError) as e:
        raise CalculatorError(f"math error: {e}") from None


def format_number(value: int | float) -> str:
    """Integers exactly; floats with 12 significant digits, integral floats without '.0'."""
    if isinstance(value, float):
        if math.isfinite(value) and value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        return f"{value:.12g}"
    return str(value)


def _eval(node: ast.AST, depth: int) -> int | float:
    if depth > MAX_DEPTH:
        raise CalculatorError("the expression is nested too deeply")
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.Name) and node.id in _CONSTANTS:
        return _CONSTANTS[node.id]
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand, depth + 1))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left, depth + 1), _eval(node.right, depth + 1)
        if isinstance(node.op, ast.Pow):
            _check_power(left, right)
        result = _BINARY[type(node.op)](left, right)
        _check_size(result)
        return result
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS:
        if node.keywords:
            raise CalculatorError("functions take positional arguments only")
        args = [_eval(a, depth + 1) for a in node.args]
        _check_arguments(node.func.id, args)
        result = _FUNCTIONS[node.func.id](*args)
        _check_size(result)
        return result
    raise CalculatorError(f"unsupported element in expression: {ast.dump(node)[:60]}")


def _check_power(base, exponent) -> None:
    if isinstance(base, complex) or isinstance(exponent, complex):
        raise CalculatorError("complex numbers are not supported")
    if abs(base) > 1 and exponent > 0 and exponent * math.log2(abs(base)) > MAX_RESULT_BITS:
        raise CalculatorError(f"the power is too large (over {MAX_RESULT_BITS} bits)")


def _check_arguments(name: str, args: list) -> None:
    """Refuse, before the call, arguments that would make one C call run long (see the module docstring)."""
    if name == "pow" and len(args) == 2:
        _check_power(*args)
    elif name == "pow" and len(args) == 3:
        if any(isinstance(a, int) and a.bit_length() > MAX_MODULAR_POWER_BITS for a in args[1:]):
            raise CalculatorError(
                f"pow(base, exponent, modulus) takes an exponent and a modulus of at most {MAX_MODULAR_POWER_BITS} bits"
            )
    elif name == "round" and len(args) == 2 and isinstance(args[1], int) and abs(args[1]) > MAX_ROUND_DIGITS:
        raise CalculatorError(f"round() takes at most {MAX_ROUND_DIGITS} digits, not {args[1]}")


def _check_size(value) -> None:
    if isinstance(value, complex):
        raise CalculatorError("the result is not a real number")
    if isinstance(value, float) and not math.isfinite(value):
        raise CalculatorError("the result is too large or undefined")
    if isinstance(value, int) and value.bit_length() > MAX_RESULT_BITS:
        raise CalculatorError(f"the result is too large (over {MAX_RESULT_BITS} bits)")
