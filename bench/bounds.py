"""Seconds and peak memory of the calculator's slowest expressions, and of holding back a streamed reply
full of `<think>` fragments (docs/measurements.md, "Bounds"). Run it at two commits to compare.

    python bench/bounds.py [--fragments 600 1200]
"""

from __future__ import annotations

import argparse
import time
import tracemalloc

from tinyagent.format.prompts import STOP_WORDS
from tinyagent.text import StopHoldback
from tinyagent.tools.calculator import CalculatorError, evaluate

EXPRESSIONS = [
    "round(1, -4*10**6)",
    "pow(2**4000, 2**4000, 3**2500)",
    "pow(2**1024-1, 2**1024-1, 2**1024-3)",
    "round(2**4095, -1300)",
]


def calculator() -> None:
    for expression in EXPRESSIONS:
        tracemalloc.start()
        started = time.perf_counter()
        try:
            evaluate(expression)
            outcome = "answered"
        except CalculatorError:
            outcome = "refused"
        seconds, peak = time.perf_counter() - started, tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        print(f"{expression:40} {outcome:9} {seconds * 1000:10.2f} ms  peak {peak / 1024:8.1f} KiB")


def think_fragments(n: int) -> float:
    """Seconds to feed StopHoldback a reply of n `<think> a` fragments, one update per fragment."""
    holdback, text = StopHoldback(lambda _: None, list(STOP_WORDS)), ""
    started = time.perf_counter()
    for _ in range(n):
        text += "<think> a"
        holdback.update(text)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fragments", type=int, nargs="+", default=[600, 1200])
    args = parser.parse_args()
    calculator()
    for n in args.fragments:
        print(f"{n} <think> fragments streamed: {think_fragments(n):.2f} s")


if __name__ == "__main__":
    main()
