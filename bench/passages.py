"""Generated passages for the search benchmarks: the shipped corpus's paragraphs, with distractors made up to
any size, and the same as a folder of Markdown files.

Distractors are written from a fixed seed: English ones draw half their words from the shipped corpus's own
words (as often as the corpus uses them) and the rest from a Zipf-distributed vocabulary of 20,000 made-up words;
Chinese ones draw four in five words from jieba's dictionary of real Chinese words (as often as it counts them:
the bench needs `pip install jieba`) and the rest from the corpus's characters. So a question's words also turn
up in the noise, the more the commoner they are, which is what makes ranking matter. No distractor is gold:
recall counts only the shipped corpus's titles.
"""

from __future__ import annotations

import itertools
import json
import random
import re
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tinyagent" / "data" / "corpus.jsonl"
QUESTIONS = Path(__file__).resolve().parent / "search_dev.jsonl"
_CJK = re.compile(r"[\u4e00-\u9fff]")
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]*|\d+")
_SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in ("a", "e", "i", "o", "u", "ai", "ou", "an", "er")]


def shipped() -> list[tuple[str, str]]:
    """(title, paragraph) for every paragraph of the shipped corpus."""
    out = []
    for line in CORPUS.read_text(encoding="utf-8").splitlines():
        if line.strip():
            record = json.loads(line)
            out += [(record["title"], p.strip()) for p in record["text"].split("\n\n") if p.strip()]
    return out


def questions(path: Path = QUESTIONS) -> list[dict]:
    """{"question", "gold": [titles]} per line."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def chinese_words(top: int = 60_000) -> tuple[list[str], list[float]]:
    """The `top` most frequent words of jieba's dictionary and their cumulative counts."""
    import jieba

    rows = []
    with open(Path(jieba.__file__).parent / "dict.txt", encoding="utf-8") as f:
        for line in f:
            word, count, *_ = line.split()
            if _CJK.fullmatch(word[0]) and all(_CJK.fullmatch(c) for c in word):
                rows.append((int(count), word))
    rows.sort(reverse=True)
    rows = rows[:top]
    return [w for _, w in rows], list(itertools.accumulate(c for c, _ in rows))


class Distractors:
    """Made-up passages, the same ones for the same seed."""

    def __init__(self, seed: int = 38):
        self.rng = random.Random(seed)
        english = Counter(w.lower() for _, p in shipped() if not _CJK.search(p) for w in _WORD.findall(p))
        chinese = Counter(c for _, p in shipped() for c in _CJK.findall(p))
        self.corpus_words, self.corpus_word_weights = list(english), list(english.values())
        self.corpus_chars, self.corpus_char_weights = list(chinese), list(chinese.values())
        made_up = set()
        while len(made_up) < 20_000:
            made_up.add("".join(self.rng.choices(_SYLLABLES, k=self.rng.randint(1, 4))))
        self.words = sorted(made_up)
        self.rng.shuffle(self.words)
        self.word_weights = list(itertools.accumulate(1 / (rank + 1) for rank in range(len(self.words))))
        self.zh_words, self.zh_word_weights = chinese_words()

    def english(self) -> str:
        rng, n = self.rng, self.rng.randint(30, 120)
        own = rng.choices(self.corpus_words, self.corpus_word_weights, k=n)
        made = rng.choices(self.words, cum_weights=self.word_weights, k=n)
        words = [a if rng.random() < 0.5 else b for a, b in zip(own, made)]
        return " ".join(words).capitalize() + "."

    def chinese(self) -> str:
        rng, n = self.rng, self.rng.randint(15, 70)
        own = rng.choices(self.corpus_chars, self.corpus_char_weights, k=n)
        made = rng.choices(self.zh_words, cum_weights=self.zh_word_weights, k=n)
        pieces = [b if rng.random() < 0.8 else a for a, b in zip(own, made)]
        return "".join(p + ("，" if rng.random() < 0.12 else "") for p in pieces) + "。"

    def passage(self, i: int) -> tuple[str, str]:
        """(title, text): two in three English."""
        if self.rng.random() < 2 / 3:
            return f"Note {i}", self.english()
        return f"笔记 {i}", self.chinese()


def passages(size: int, seed: int = 38) -> list[tuple[str, str]]:
    """The shipped corpus's paragraphs, then distractors up to `size` passages in all."""
    out = shipped()
    made = Distractors(seed)
    out += [made.passage(i) for i in range(size - len(out))]
    return out[: max(size, len(shipped()))]


def write_folder(folder: Path, size: int, per_file: int = 20, seed: int = 38) -> int:
    """`passages(size)` as Markdown files of `per_file` sections (a `## title` heading and its paragraph
    each) under `folder`, in subfolders of 100 files. Returns the number of files."""
    items = passages(size, seed)
    files = 0
    for start in range(0, len(items), per_file):
        path = folder / f"part{files // 100:03d}" / f"file{files:05d}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            "".join(f"## {title}\n\n{text}\n\n" for title, text in items[start : start + per_file]), encoding="utf-8"
        )
        files += 1
    return files
