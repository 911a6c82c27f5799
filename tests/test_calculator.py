"""The calculator: exact arithmetic, and clear refusals for anything unsafe or huge."""

from __future__ import annotations

import itertools
import time
import tracemalloc

import pytest

from tinyagent.tools import Calculator
from tinyagent.tools.calculator import _FUNCTIONS, CalculatorError, evaluate


@pytest.mark.parametrize(
    "expression,result",
    [
        ("2**10", "1024"),
        ("2^10", "1024"),
        ("(3+6+9)*2+17", "53"),
        ("12*6", "72"),
        ("12 × 6", "72"),
        ("465*321+95297/13.2", "156484.469697"),
        ("7/2", "3.5"),
        ("7//2", "3"),
        ("-7 % 3", "2"),
        ("6/2", "3"),
        ("sqrt(16)", "4"),
        ("round(pi, 2)", "3.14"),
        ("max(1, 5, 3)", "5"),
        ("（１＋２）＊３", "9"),  # full-width input
        ("2**100", "1267650600228229401496703205376"),
        ("1+1=", "2"),
    ],
)
def test_arithmetic(expression, result):
    assert Calculator()(expression=expression) == result


@pytest.mark.parametrize(
    "expression,message",
    [
        ("9**9**9", "too large"),
        ("10**10**10", "too large"),
        ("2**100000", "too large"),
        ("1/0", "division by zero"),
        ("__import__('os').system('echo hi')", "unsupported"),
        ("open('/etc/passwd')", "unsupported"),
        ("(1).__class__", "unsupported"),
        ("x + 1", "unsupported"),
        ("lambda: 1", "unsupported"),
        ("2 +", "not a valid"),
        ("", "empty"),
        ("1" * 1000, "too long"),
        ("-(" * 100 + "1" + ")" * 100, "nested too deeply"),
        ("sqrt(-1)", "math error"),
        ("1e308 * 10", "too large"),
        ("(-8) ** 0.5", "not a real number"),
        ("'a' * 3", "unsupported"),
        ("[1, 2]", "unsupported"),
    ],
)
def test_refusals_are_clear(expression, message):
    with pytest.raises(CalculatorError, match=message):
        evaluate(expression)


def test_refusals_are_fast():
    start = time.perf_counter()
    for expression in ("9**9**9", "10**10**10", "(2**4000)**(2**4000)", "2**4096*2**4096*2**4096"):
        with pytest.raises(CalculatorError):
            evaluate(expression)
    assert time.perf_counter() - start < 5  # a bound on work done, not a benchmark


def test_tool_interface():
    calc = Calculator()
    assert calc.name_for_model == "calculator"
    assert calc.human_name("zh") == "计算器"
    assert [p["name"] for p in calc.parameters] == ["expression"]


def peak_bytes(expression: str) -> int:
    """The most memory evaluating `expression` held at once (a refusal counts too)."""
    tracemalloc.start()
    try:
        try:
            evaluate(expression)
        except CalculatorError:
            pass
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize(
    "expression",
    [
        "round(1, -10**7)",  # 15 characters: CPython would build 10**(10**7) in one C call
        "round(2**4000, -10**5)",
        "pow(2**4000, 2**4000, 3**2500)",
        "(2**4000)**(2**4000)",
        "2**4096*2**4096*2**4096",
    ],
)
def test_hostile_expressions_stay_within_a_megabyte(expression):
    assert peak_bytes(expression) < 1_000_000


EXTREMES = ["2**4095", "-(2**4095)", "10**7", "-(10**7)", "1.5e300", "0.5"]


@pytest.mark.parametrize("name", sorted(_FUNCTIONS))
def test_every_function_is_bounded_for_its_largest_arguments(name):
    """Each function, with every combination of the largest numbers an expression can hold, is
    refused or answered within a megabyte: no argument makes one C call grow without bound."""
    for arity in (1, 2, 3):
        for args in itertools.product(EXTREMES, repeat=arity):
            expression = f"{name}({', '.join(args)})"
            assert peak_bytes(expression) < 1_000_000, expression


def test_round_digits_and_modular_powers_are_refused_before_the_call():
    with pytest.raises(CalculatorError, match="round\\(\\) takes at most"):
        evaluate("round(1, -10**7)")
    with pytest.raises(CalculatorError, match="exponent and a modulus of at most"):
        evaluate("pow(3, 2**2000, 2**2000 + 1)")
    assert evaluate("round(123456, -3)") == 123000 and evaluate("round(2.675, 2)") == 2.67
    assert evaluate("pow(3, 200, 1000)") == pow(3, 200, 1000)
