"""A JSONL corpus of {"title", "text"} records in memory, ranked with a hand-written BM25.

The docstore tools (docstore.py) rank whole documents with it, and the search benchmark measures the
on-disk index (search_index.py) against it. `load_corpus` also reads JSONL files for LocalSearch.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

from .terms import normalize, tokenize

log = logging.getLogger(__name__)

DEFAULT_CORPUS = Path(__file__).resolve().parent.parent / "data" / "corpus.jsonl"
_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")


class CorpusError(ValueError):
    """The corpus cannot be used; the one-line message names the file and, where it helps, the line."""


@dataclass(frozen=True)
class Document:
    title: str
    text: str

    def paragraphs(self) -> list[str]:
        """The text split at blank lines; a text without blank lines is one paragraph."""
        return [p.strip() for p in _PARAGRAPH_BREAK.split(self.text) if p.strip()]


@dataclass(frozen=True)
class Hit:
    """One ranked paragraph: `documents[doc].paragraphs()[paragraph]`."""

    doc: int
    paragraph: int
    score: float


def load_corpus(path: str | Path) -> list[Document]:
    """Read one {"title": ..., "text": ...} JSON object per line; blank lines are skipped."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise CorpusError(
            f"corpus file not found: {path}" if not path.exists() else f"corpus path is not a file: {path}"
        )
    documents: list[Document] = []
    with path.open("rb") as f:
        for number, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8").lstrip("\ufeff")
            except UnicodeDecodeError:
                raise CorpusError(f"{path}, line {number}: not UTF-8 text") from None
            if line.strip():
                documents.append(_parse_record(line, path, number))
    if not documents:
        raise CorpusError(
            f"{path}: the corpus is empty (expected one JSON object with \"title\" and \"text\" per line)"
        )
    return documents


def _parse_record(line: str, path: Path, number: int) -> Document:
    try:
        record = json.loads(line)
    except ValueError as e:
        raise CorpusError(f"{path}, line {number}: not valid JSON ({getattr(e, 'msg', e)})") from None
    except RecursionError:
        raise CorpusError(f"{path}, line {number}: JSON nested too deeply to read") from None
    if not isinstance(record, dict):
        raise CorpusError(
            f"{path}, line {number}: expected a JSON object with \"title\" and \"text\", got {type(record).__name__}"
        )
    bad = [key for key in ("title", "text") if not isinstance(record.get(key), str) or not record[key].strip()]
    if bad:
        raise CorpusError(
            f"{path}, line {number}: the record needs a non-empty string {' and '.join(repr(k) for k in bad)}"
        )
    return Document(record["title"].strip(), record["text"].strip())


class BM25:
    """Okapi BM25 over pre-tokenised units, with postings so a query only scores units that share a term."""

    def __init__(self, units: list[list[str]], k1: float = 1.5, b: float = 0.75):
        self.k1, self.b = k1, b
        self.tf = [Counter(terms) for terms in units]
        self.lengths = [len(terms) for terms in units]
        self.avg_length = (sum(self.lengths) / len(units)) if units else 0.0
        self.postings: dict[str, list[int]] = defaultdict(list)
        for i, counts in enumerate(self.tf):
            for term in counts:
                self.postings[term].append(i)
        n = len(units)
        self.idf = {t: math.log(1 + (n - len(p) + 0.5) / (len(p) + 0.5)) for t, p in self.postings.items()}
        self.unseen_idf = math.log(1 + (n + 0.5) / 0.5)

    def idf_of(self, term: str) -> float:
        return self.idf.get(term, self.unseen_idf)

    def scores(self, terms: list[str]) -> dict[int, float]:
        """{unit index: score} for the units containing at least one of `terms`."""
        out: dict[int, float] = defaultdict(float)
        for term in set(terms):
            idf = self.idf.get(term)
            for i in self.postings.get(term, ()):
                tf = self.tf[i][term]
                norm = self.k1 * (1 - self.b + self.b * self.lengths[i] / (self.avg_length or 1))
                out[i] += idf * tf * (self.k1 + 1) / (tf + norm)
        return out


class Corpus:
    """Documents and one BM25 index over their paragraphs (each paragraph also indexed under its title)."""

    def __init__(self, documents: list[Document], source: str = "<memory>"):
        if not documents:
            raise CorpusError(f"{source}: the corpus is empty")
        self.documents = list(documents)
        self.source = source
        self.units: list[tuple[int, int]] = []
        unit_terms: list[list[str]] = []
        self.doc_terms: list[set[str]] = []
        for d, doc in enumerate(self.documents):
            title_terms = tokenize(doc.title)
            doc_terms = set(title_terms)
            for p, paragraph in enumerate(doc.paragraphs()):
                terms = tokenize(paragraph)
                doc_terms.update(terms)
                self.units.append((d, p))
                unit_terms.append(title_terms * 2 + terms)  # a title match counts for more
            self.doc_terms.append(doc_terms)
        self.index = BM25(unit_terms)
        self._titles = {}
        for d, doc in enumerate(self.documents):
            self._titles.setdefault(_title_key(doc.title), d)

    @classmethod
    def load(cls, path: str | Path | None = None) -> Corpus:
        """The corpus in `path`, or the one shipped with TinyAgent when `path` is None."""
        path = Path(path) if path is not None else DEFAULT_CORPUS
        corpus = cls(load_corpus(path), source=str(path))
        log.debug("indexed %d documents (%d paragraphs) from %s", len(corpus.documents), len(corpus.units), path)
        return corpus

    def search(self, query: str, top_k: int = 3) -> list[Hit]:
        """The best `top_k` paragraphs for `query`, best first."""
        scores = self.index.scores(tokenize(query))
        ranked = sorted(scores.items(), key=lambda item: (-item[1], item[0]))[:top_k]
        return [Hit(*self.units[u], score) for u, score in ranked]

    def rank_documents(self, query: str) -> list[tuple[int, float]]:
        """(document index, its best paragraph's score) for every matching document, best first."""
        best: dict[int, float] = {}
        for u, score in self.index.scores(tokenize(query)).items():
            d = self.units[u][0]
            best[d] = max(best.get(d, 0.0), score)
        return sorted(best.items(), key=lambda item: (-item[1], item[0]))

    def coverage(self, query: str, doc: int, title_only: bool = False) -> float:
        """The share of the query's terms (weighted by rarity) found in document `doc`, or only in
        its title: 0 to 1. Unlike a BM25 score it is comparable between queries."""
        terms = set(tokenize(query))
        present = set(tokenize(self.documents[doc].title)) if title_only else self.doc_terms[doc]
        total = sum(self.index.idf_of(t) for t in terms)
        found = sum(self.index.idf_of(t) for t in terms if t in present)
        return found / total if total else 0.0

    def find_title(self, title: str) -> int | None:
        """The document whose title equals `title`, ignoring case, width and surrounding quotes."""
        return self._titles.get(_title_key(title))

    def paragraph(self, hit: Hit) -> str:
        return self.documents[hit.doc].paragraphs()[hit.paragraph]


def _title_key(title: str) -> str:
    return " ".join(normalize(title).strip(" \t\"'`《》「」“”‘’[]").split())


def shorten(text: str, max_chars: int | None) -> str:
    return text if max_chars is None or len(text) <= max_chars else text[:max_chars].rstrip() + "…"
