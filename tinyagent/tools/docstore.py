"""Docstore tools in the style of the ReAct paper: `search[entity]` opens a document, `lookup[keyword]`
reads on in it. Both work on LocalSearch's corpus and index (`Corpus`).

The two tools share one `DocstoreState` (the last document found and the lookup cursor), so the
state belongs to one conversation: build a fresh pair with `docstore_tools()` for each agent that
runs concurrently.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from .corpus import Corpus, Document, shorten
from .terms import normalize
from .tool import Tool, ToolError

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[。！？])")


def sentences(document: Document) -> list[str]:
    """The document's sentences, paragraph by paragraph (English and Chinese punctuation)."""
    return [s.strip() for p in document.paragraphs() for s in _SENTENCE_END.split(p) if s.strip()]


@dataclass
class DocstoreState:
    """What a search / lookup pair remembers between calls."""

    document: Document | None = None
    keyword: str | None = None  # normalised keyword of the current lookup run
    results: list[str] = field(default_factory=list)
    shown: int = 0  # how many of `results` lookup has returned

    def open(self, document: Document | None) -> None:
        self.document, self.keyword, self.results, self.shown = document, None, [], 0


class DocstoreSearch(Tool):
    """`search`: the first paragraph of the best-matching document, which `lookup` then reads in.

    A document whose title equals the entity is a sure match. Otherwise the best-ranked document is
    shown, and when the match is weak (`match_strength` below `weak_below`) the answer also lists
    similar titles to search for instead.
    """

    name_for_model = "search"
    searches = True
    name_for_human = {"en": "Search", "zh": "搜索"}
    description_for_model = {
        "en": "Searches the offline encyclopedia for an entity (a person, place, thing or topic) and returns "
        "the first paragraph of its article; if there is no exact match, it suggests similar titles. "
        "Use lookup afterwards to find a keyword in that article.",
        "zh": "在离线百科中搜索一个实体（人物、地点、事物或主题），返回其文章的第一段；若没有完全匹配，"
        "会给出相近的标题。之后可用 lookup 在这篇文章中查找关键词。",
    }
    parameters = [
        {
            "name": "entity",
            "description": {"en": "the name of the entity, e.g. Jay Chou", "zh": "实体名称，例如 周杰伦"},
            "required": True,
            "schema": {"type": "string"},
        }
    ]
    repeatable = True  # a repeated search re-opens its document for lookup: not a wasted call

    def __init__(
        self,
        corpus: Corpus,
        state: DocstoreState,
        similar: int = 5,
        weak_below: float = 0.75,
        max_chars: int | None = 600,
    ):
        self.corpus, self.state = corpus, state
        self.similar, self.weak_below, self.max_chars = similar, weak_below, max_chars

    def __repr__(self) -> str:
        return f"DocstoreSearch(corpus={self.corpus.source!r})"

    def match_strength(self, entity: str, doc: int) -> float:
        """How well document `doc` matches `entity`, 0 to 1: the mean of the entity's coverage by the
        title and by the whole document, so `Paris` is only a weak match for `Eiffel Tower`."""
        return (self.corpus.coverage(entity, doc, title_only=True) + self.corpus.coverage(entity, doc)) / 2

    def call(self, entity: str) -> str:
        entity = entity.strip()
        if not entity:
            raise ToolError("the entity to search for is empty")
        exact = self.corpus.find_title(entity)
        ranked = [d for d, _ in self.corpus.rank_documents(entity)]
        best = exact if exact is not None else (ranked[0] if ranked else None)
        if best is None:
            self.state.open(None)
            return f"Could not find {entity!r}: no document matches. Search for other words."
        document = self.corpus.documents[best]
        self.state.open(document)
        summary = f"{document.title}\n{shorten(document.paragraphs()[0], self.max_chars)}"
        if exact is not None or self.match_strength(entity, best) >= self.weak_below:
            return summary
        titles = ", ".join(self.corpus.documents[d].title for d in ranked[: self.similar])
        return (
            f"No document is titled {entity!r}; the closest match is:\n{summary}\n"
            f"Similar titles: {titles}. Search one of them by its exact title."
        )


class DocstoreLookup(Tool):
    """`lookup`: the next sentence of the last searched document that contains the keyword."""

    name_for_model = "lookup"
    name_for_human = {"en": "Lookup", "zh": "查找"}
    description_for_model = {
        "en": "Finds a keyword in the article that the last search returned and gives the next sentence "
        "containing it, as (Result i / n). Repeat the same keyword to get the following sentence.",
        "zh": "在上一次 search 返回的文章中查找关键词，给出下一个包含它的句子，格式为 (Result i / n)。"
        "重复同一个关键词可得到下一句。",
    }
    parameters = [
        {
            "name": "keyword",
            "description": {"en": "the word or phrase to find, e.g. album", "zh": "要查找的词或短语，例如 专辑"},
            "required": True,
            "schema": {"type": "string"},
        }
    ]
    repeatable = True  # the same keyword again advances to the next result

    def __init__(self, state: DocstoreState, max_chars: int | None = 600):
        self.state, self.max_chars = state, max_chars

    def __repr__(self) -> str:
        return "DocstoreLookup()"

    def call(self, keyword: str) -> str:
        state = self.state
        key = normalize(keyword.strip())
        if not key:
            raise ToolError("the keyword to look up is empty")
        if state.document is None:
            raise ToolError("there is no document to look in: call search first, then lookup in what it found")
        if key != state.keyword:
            state.keyword, state.shown = key, 0
            state.results = [s for s in sentences(state.document) if key in normalize(s)]
        title, n = state.document.title, len(state.results)
        if not n:
            return f"No sentence of {title!r} contains {keyword.strip()!r}."
        if state.shown >= n:
            return f"No more results for {keyword.strip()!r} in {title!r} (all {n} shown)."
        state.shown += 1
        return f"(Result {state.shown} / {n}) {shorten(state.results[state.shown - 1], self.max_chars)}"


def docstore_tools(corpus_path: str | Path | None = None, corpus: Corpus | None = None, **search_options) -> list[Tool]:
    """[search, lookup] bound to one fresh state: one pair per agent / conversation.

    `corpus_path`: a JSONL corpus (None: the shipped one); `corpus`: an already loaded Corpus to share
    between pairs (indexing happens once). `search_options` go to DocstoreSearch.
    """
    corpus = corpus if corpus is not None else Corpus.load(corpus_path)
    state = DocstoreState()
    return [DocstoreSearch(corpus, state, **search_options), DocstoreLookup(state)]
