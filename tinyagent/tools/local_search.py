"""Offline search: BM25 over a JSONL corpus of {"title", "text"} records, in English and Chinese.

The corpus is indexed once, paragraph by paragraph, when the tool is built. `Corpus` is shared
with the docstore tools (docstore.py), which rank whole documents with the same index.
"""
from __future__ import annotations

import json
import logging
import math
import re
import unicodedata
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

from .tool import Tool, ToolError

log = logging.getLogger(__name__)

DEFAULT_CORPUS = Path(__file__).resolve().parent.parent / "data" / "corpus.jsonl"

_CJK_CHARS = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_TOKENS = re.compile(rf"([{_CJK_CHARS}]+)|([^\W_{_CJK_CHARS}]+)")
_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")
_EN_STOPWORDS = frozenset(
    "a an the of in on at to for from by with and or is are was were be been being it its this that "
    "these those what which who whom whose when where why how do does did has have had i you he she "
    "we they his her their our my your me him them s as into about than then there".split())
_ZH_STOP_SPLIT = re.compile("[的了是在和与吗呢吧啊哪什么谁]+")  # function characters: no unigram, no bigram


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


def normalize(text: str) -> str:
    """NFKC (full-width letters and digits to ASCII) and case folding: the form that is compared."""
    return unicodedata.normalize("NFKC", text).casefold()


def tokenize(text: str) -> list[str]:
    """Index terms: lower-cased Latin words (plural `s` dropped, stop words removed) and,
    for Chinese / Japanese / Korean runs, which have no spaces, character unigrams and bigrams."""
    terms: list[str] = []
    for cjk, word in _TOKENS.findall(normalize(text)):
        if cjk:
            for piece in _ZH_STOP_SPLIT.split(cjk):
                terms += list(piece) + [piece[i:i + 2] for i in range(len(piece) - 1)]
        elif word not in _EN_STOPWORDS:
            terms.append(word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word)
    return terms


def load_corpus(path: str | Path) -> list[Document]:
    """Read one {"title": ..., "text": ...} JSON object per line; blank lines are skipped."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise CorpusError(f"corpus file not found: {path}" if not path.exists() else f"corpus path is not a file: {path}")
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
        raise CorpusError(f"{path}: the corpus is empty (expected one JSON object with \"title\" and \"text\" per line)")
    return documents


def _parse_record(line: str, path: Path, number: int) -> Document:
    try:
        record = json.loads(line)
    except ValueError as e:
        raise CorpusError(f"{path}, line {number}: not valid JSON ({getattr(e, 'msg', e)})") from None
    except RecursionError:
        raise CorpusError(f"{path}, line {number}: JSON nested too deeply to read") from None
    if not isinstance(record, dict):
        raise CorpusError(f"{path}, line {number}: expected a JSON object with \"title\" and \"text\", "
                          f"got {type(record).__name__}")
    bad = [key for key in ("title", "text") if not isinstance(record.get(key), str) or not record[key].strip()]
    if bad:
        raise CorpusError(f"{path}, line {number}: the record needs a non-empty string "
                          f"{' and '.join(repr(k) for k in bad)}")
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


class LocalSearch(Tool):
    """Search an offline corpus; same interface as GoogleSearch, no network, no key.

    Stateless after construction, so one instance can serve many agents at once.
    """

    name_for_model = "local_search"
    name_for_human = {"en": "Local Search", "zh": "本地搜索"}
    description_for_model = {
        "en": "Searches an offline collection of short encyclopedia articles (people, places, science, "
              "history, in English and Chinese). Returns the best-matching passages with their titles.",
        "zh": "在离线的简短百科文章集合（人物、地点、科学、历史，中英文）中搜索，返回最相关的段落及其标题。",
    }
    parameters = [{
        "name": "search_query",
        "description": {"en": "the search keywords or question", "zh": "搜索关键词或问题"},
        "required": True,
        "schema": {"type": "string"},
    }]

    def __init__(self, corpus_path: str | Path | None = None, top_k: int = 3, max_chars: int | None = 400,
                 min_score_ratio: float = 0.25, corpus: Corpus | None = None):
        """`corpus_path`: a JSONL file of {"title", "text"} records (None: the shipped corpus).
        `min_score_ratio`: passages scoring below this share of the best one are left out, as noise.
        `corpus`: an already loaded Corpus to share (then `corpus_path` is not read)."""
        if top_k < 1:
            raise ValueError(f"top_k must be at least 1, not {top_k}")
        self.top_k, self.max_chars, self.min_score_ratio = top_k, max_chars, min_score_ratio
        self.corpus = corpus if corpus is not None else Corpus.load(corpus_path)

    def __repr__(self) -> str:
        return f"LocalSearch(corpus={self.corpus.source!r}, documents={len(self.corpus.documents)})"

    def call(self, search_query: str) -> str:
        if not search_query.strip():
            raise ToolError("the search query is empty")
        hits = self.corpus.search(search_query, self.top_k)
        hits = [h for h in hits if h.score >= hits[0].score * self.min_score_ratio]
        if not hits:
            return f"No results for {search_query.strip()!r} in the local corpus. Try other keywords."
        return "\n\n".join(
            f"[{i}] {self.corpus.documents[h.doc].title}\n{shorten(self.corpus.paragraph(h), self.max_chars)}"
            for i, h in enumerate(hits, 1))
