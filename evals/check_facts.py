"""Check the fact suites (facts_dev.jsonl, facts_test.jsonl) against the corpus they are written over.

    python evals/check_facts.py [SUITE ...] [--corpus tinyagent/data/corpus.jsonl]

For every line: the keys the suites promise (lang, hops, needs, gold) hold allowed values; every gold title
is an entry of the corpus; a stated answer (a string, or the first of a list) is found in the gold entries'
text by the eval's own scorer, the gold text taken as if it were the prediction; a computed answer (a number)
has a `calc` expression whose numbers are all written in the gold texts and whose value is the answer; a
string answer is not already in the question. Across the suites: no id and no question is used twice; each
suite is about half Chinese and a third needs two searches or a search and a calculation (checked as at least
40% Chinese and at least 30% two-hop).
Prints one line per problem and exits 1 when there is any, else a one-line summary per suite.
"""

from __future__ import annotations

import argparse
import ast
import json
import operator
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tinyagent.eval.scoring import extract_numbers, load_suite, score  # noqa: E402

SUITES = [ROOT / "evals" / "facts_dev.jsonl", ROOT / "evals" / "facts_test.jsonl"]
CORPUS = ROOT / "tinyagent" / "data" / "corpus.jsonl"
NEEDS = {1: {"local_search", "local_search+calculator"}, 2: {"local_search", "local_search+calculator"}}
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def calc_value(expression: str) -> float:
    """The value of an arithmetic expression of numbers and + - * / (nothing else is evaluated)."""

    def walk(node):
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](walk(node.left), walk(node.right))
        raise ValueError(f"not plain arithmetic: {expression!r}")

    return walk(ast.parse(expression, mode="eval"))


def numbers_in(text: str) -> set[float]:
    """The numbers written in `text`, thousands commas read ("299,792,458")."""
    return set(extract_numbers(text)) | {float(x) for x in re.findall(r"\d+(?:\.\d+)?", text.replace(",", ""))}


def problems(path: Path, corpus: dict[str, str]) -> list[str]:
    found = []
    for item in load_suite(path):
        where = f"{path.name} {item.id}"
        extra = item.extra
        if extra.get("lang") not in ("en", "zh"):
            found.append(f"{where}: lang must be en or zh")
        if extra.get("hops") not in (1, 2):
            found.append(f"{where}: hops must be 1 or 2")
        elif extra.get("needs") not in NEEDS[extra["hops"]]:
            found.append(f"{where}: needs must be local_search or local_search+calculator")
        gold = extra.get("gold")
        if not isinstance(gold, list) or not gold:
            found.append(f"{where}: gold must be a non-empty list of corpus titles")
            continue
        missing = [t for t in gold if t not in corpus]
        if missing:
            found.append(f"{where}: gold titles not in the corpus: {missing}")
            continue
        texts = "\n".join(f"{t}\n{corpus[t]}" for t in gold)
        answer = item.answer
        if isinstance(answer, (int, float)):
            calc = extra.get("calc")
            if not calc:
                if float(answer) not in numbers_in(texts):
                    found.append(f"{where}: the number {answer} is neither in the gold texts nor given a calc")
                continue
            try:
                value = calc_value(calc)
            except (ValueError, SyntaxError, ZeroDivisionError) as e:
                found.append(f"{where}: calc {calc!r} cannot be evaluated ({e})")
                continue
            if abs(value - answer) > 1e-9 * max(1, abs(answer)):
                found.append(f"{where}: calc {calc} = {value}, not the answer {answer}")
            absent = [n for n in extract_numbers(calc) if abs(n) not in numbers_in(texts)]
            if absent:
                found.append(f"{where}: calc numbers not in the gold texts: {absent}")
            if extra.get("needs") != "local_search+calculator":
                found.append(f"{where}: a computed answer needs local_search+calculator")
            continue
        first = answer[0] if isinstance(answer, list) else answer
        if not score(texts, first):
            found.append(f"{where}: the answer {json.dumps(first, ensure_ascii=False)} is not in the gold texts")
        if score(item.question, answer):
            found.append(f"{where}: the question itself already scores as right")
    return found


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("suites", nargs="*", type=Path, default=SUITES)
    p.add_argument("--corpus", type=Path, default=CORPUS)
    args = p.parse_args(argv)
    corpus = {}
    for line in args.corpus.read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            corpus[row["title"]] = row["text"]
    found, seen_ids, seen_questions = [], {}, {}
    for path in args.suites:
        found += problems(path, corpus)
        items = load_suite(path)
        for item in items:
            for key, seen in ((item.id, seen_ids), (item.question.strip(), seen_questions)):
                if key in seen:
                    found.append(
                        f"{path.name} {item.id}: {'id' if seen is seen_ids else 'question'} also in {seen[key]}"
                    )
                seen[key] = path.name
        n = len(items)
        zh = sum(i.extra.get("lang") == "zh" for i in items)
        two = sum(i.extra.get("hops") == 2 for i in items)
        if zh < 0.4 * n or two < 0.3 * n:
            found.append(
                f"{path.name}: {zh}/{n} Chinese and {two}/{n} two-hop; the suites are about half Chinese "
                "and a third two-hop"
            )
        print(
            f"{path.name}: {n} questions, {zh} Chinese, {two} needing two searches or a search and a calculation, "
            f"{sum(i.extra.get('needs') == 'local_search+calculator' for i in items)} with the calculator"
        )
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
