"""The fact suites over the shipped corpus (evals/facts_dev.jsonl, evals/facts_test.jsonl): every answer is in
its gold passages (or computed from their numbers), and the scorer's {"text", "not_within"} answer that lets
"Jay" (Jay Chou's first album) be asked at all."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from tinyagent.eval import SuiteError, load_suite, score

ROOT = Path(__file__).resolve().parent.parent
SUITES = [ROOT / "evals" / "facts_dev.jsonl", ROOT / "evals" / "facts_test.jsonl"]
JAY = {"text": "Jay", "not_within": ["Jay Chou"]}


def checker():
    spec = importlib.util.spec_from_file_location("check_facts", ROOT / "evals" / "check_facts.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_shipped_suites_pass_their_check(capsys):
    assert checker().main([]) == 0
    printed = capsys.readouterr().out
    assert "facts_dev.jsonl: 44 questions, 22 Chinese, 16 needing two searches" in printed


def test_the_suites_have_the_promised_mix_and_share_no_question():
    dev, test = (load_suite(p) for p in SUITES)
    assert len(dev) >= 44 and len(test) >= 30
    for items in (dev, test):
        assert sum(i.extra["lang"] == "zh" for i in items) * 2 >= len(items) - 1
        assert sum(i.extra["hops"] == 2 for i in items) * 3 >= len(items)
    assert not {i.question for i in dev} & {i.question for i in test}
    questions = {i.question: i.answer for i in dev}
    assert questions["Which year was Jay Chou born?"] == "1979"  # the tutorial's pair, in both languages
    assert questions["What was Jay Chou's first album?"] == JAY
    assert questions["周杰伦哪一年出生的？"] == "1979" and questions["周杰伦的第一张专辑叫什么？"] == JAY


def write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


GOOD = {
    "id": "a",
    "question": "Who created Python?",
    "answer": "Guido van Rossum",
    "lang": "en",
    "hops": 1,
    "needs": "local_search",
    "gold": ["Python (programming language)"],
}


@pytest.mark.parametrize(
    "change, message",
    [
        ({"gold": ["Python"]}, "gold titles not in the corpus: ['Python']"),
        ({"answer": "Larry Wall"}, 'the answer "Larry Wall" is not in the gold texts'),
        (
            {"answer": 26, "calc": "2017 - 1991", "needs": "local_search+calculator"},
            "calc numbers not in the gold texts: [2017.0]",
        ),
        (
            {"answer": 26, "calc": "1991 - 1966", "needs": "local_search+calculator"},
            "calc 1991 - 1966 = 25, not the answer 26",
        ),
        ({"answer": 1992}, "the number 1992 is neither in the gold texts nor given a calc"),
        ({"answer": "Python"}, "the question itself already scores as right"),
        ({"lang": "fr"}, "lang must be en or zh"),
    ],
)
def test_a_wrong_line_is_reported(tmp_path, capsys, change, message):
    suite = write(tmp_path / "s.jsonl", [{**GOOD, **change}])
    assert checker().main([str(suite)]) == 1
    printed = capsys.readouterr().out
    assert message in printed, printed


def test_the_good_line_passes(tmp_path, capsys):
    rows = [
        {
            **GOOD,
            "id": str(i),
            "question": f"{GOOD['question']} ({i})",
            "lang": "zh" if i % 2 else "en",
            "hops": 2 if i < 2 else 1,
        }
        for i in range(4)
    ]
    rows[0].update(answer=21, calc="2000 - 1979", needs="local_search+calculator", gold=["Jay Chou"])
    assert checker().main([str(write(tmp_path / "s.jsonl", rows))]) == 0, capsys.readouterr().out


@pytest.mark.parametrize(
    "prediction, right",
    [
        ("Jay", True),
        ("Jay Chou's first album was Jay.", True),
        ('The album "Jay" by Jay Chou', True),
        ("Jay (album)", True),
        ("周杰伦的第一张专辑是《Jay》", True),
        ("Jay Chou", False),
        ("Jay Chou's first album was Fantasy.", False),
        ("Jay Chou (周杰伦)", False),
        ("Jay Chou's debut", False),
    ],
)
def test_an_answer_not_counted_inside_a_longer_name(prediction, right):
    assert score(prediction, JAY) is right
    assert score(prediction, [JAY, "Fantasy"]) is (right or "Fantasy" in prediction)


@pytest.mark.parametrize("answer", [{"text": "Jay"}, JAY, [JAY, "J"]])
def test_a_mapping_answer_loads(tmp_path, answer):
    path = write(tmp_path / "s.jsonl", [{"id": "x", "question": "q", "answer": answer}])
    assert load_suite(path)[0].answer == answer


@pytest.mark.parametrize(
    "answer",
    [
        {"text": ""},
        {"text": "Jay", "not_within": "Jay Chou"},
        {"not_within": ["x"]},
        {"text": "Jay", "other": 1},
        {"text": 5},
        {"text": "Jay", "not_within": [""]},
    ],
)
def test_a_bad_mapping_answer_is_a_suite_error(tmp_path, answer):
    path = write(tmp_path / "s.jsonl", [{"id": "x", "question": "q", "answer": answer}])
    with pytest.raises(SuiteError, match=r"s.jsonl:1: answer must be .*mapping"):
        load_suite(path)
