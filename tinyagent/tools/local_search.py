"""Offline search over your own documents: a folder of Markdown, text, HTML and PDF files (or a JSONL file, or
the shipped encyclopedia), each passage shown with its source.

`LocalSearch` asks a search backend: by default the on-disk index of search_index.py; any object with the two
methods of `SearchBackend` will do (docs/search.md sketches one on OpenSearch / Elasticsearch). `sources_in`
reads the passages back out of an observation, and `cited_sources` picks those a final answer came from, for
the command line, `--json` and the chat page.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

from .corpus import DEFAULT_CORPUS, shorten
from .search_index import Hit, SearchIndex
from .terms import tokenize
from .tool import Tool, ToolError

SHIPPED_DESCRIPTION = {
    "en": "Searches an offline collection of short encyclopedia articles (people, places, science, "
    "history, in English and Chinese). Returns the best-matching passages with their titles.",
    "zh": "在离线的简短百科文章集合（人物、地点、科学、历史，中英文）中搜索，返回最相关的段落及其标题。",
}
_MARKER = re.compile(r"(?:^|\n\n)\[(\d+)\] ([^\n]+)\n")


class SearchBackend(Protocol):
    """What LocalSearch needs of an index: ranked passages, and a few words on what it holds."""

    def search(self, query: str, top_k: int) -> list[Hit]:
        """The best `top_k` passages for `query`, best first, scores higher for better."""

    def summary(self, lang: str) -> str:
        """What the index holds, for the tool's description: `the folder 'docs' (3 files: ...)`."""


class LocalSearch(Tool):
    """Search your own documents offline; the same interface as GoogleSearch, no network, no key.

    `LocalSearch()` searches the shipped encyclopedia (indexed in memory), `LocalSearch("docs/")` a folder
    (indexed once under TINYAGENT_CACHE, then only for the files that changed), `LocalSearch("notes.jsonl")`
    a file of {"title", "text"} records. Stateless after construction: one instance serves many agents.
    """

    name_for_model = "local_search"
    searches = True
    name_for_human = {"en": "Local Search", "zh": "本地搜索"}
    description_for_model = SHIPPED_DESCRIPTION
    parameters = [
        {
            "name": "search_query",
            "description": {"en": "the search keywords or question", "zh": "搜索关键词或问题"},
            "required": True,
            "schema": {"type": "string"},
        }
    ]

    def __init__(
        self,
        corpus_path: str | Path | None = None,
        top_k: int = 3,
        max_chars: int | None = 600,
        min_score_ratio: float = 0.25,
        index: SearchBackend | None = None,
    ):
        """`corpus_path`: a folder, or a file (None: the shipped encyclopedia). `index`: a backend to search
        instead (then `corpus_path` is not read), e.g. another LocalSearch's `index`, to share it.
        `max_chars`: each passage shown up to this length. `min_score_ratio`: passages scoring below this share
        of the best one are left out, as noise."""
        if top_k < 1:
            raise ValueError(f"top_k must be at least 1, not {top_k}")
        self.top_k, self.max_chars, self.min_score_ratio = top_k, max_chars, min_score_ratio
        shipped = corpus_path is None and (index is None or getattr(index, "root", None) == DEFAULT_CORPUS)
        if index is None:
            index = SearchIndex(DEFAULT_CORPUS, path=None) if corpus_path is None else SearchIndex(corpus_path)
        self.index = index
        if not shipped:
            self.description_for_model = {lang: describe(index, lang) for lang in ("en", "zh")}

    def __repr__(self) -> str:
        return f"LocalSearch(index={self.index!r})"

    def call(self, search_query: str) -> str:
        if not search_query.strip():
            raise ToolError("the search query is empty")
        hits = self.index.search(search_query, self.top_k)
        hits = [h for h in hits if h.score >= hits[0].score * self.min_score_ratio]
        if not hits:
            return f"No results for {search_query.strip()!r} in the local corpus. Try other keywords."
        return "\n\n".join(
            f"[{i}] {h.passage.source}\n{shorten(h.passage.text, self.max_chars)}" for i, h in enumerate(hits, 1)
        )


def describe(index: SearchBackend, lang: str) -> str:
    """The tool's description for a corpus of the user's own."""
    if lang == "zh":
        return (
            f"离线搜索你自己的文档：{index.summary('zh')}。用于这些文档能回答的问题。"
            "返回最相关的段落，每段附有出处（文件 § 标题，或文件 p. 页码）。"
        )
    return (
        f"Searches your own documents, offline: {index.summary('en')}. Use it for questions these documents "
        "answer. Returns the best-matching passages, each with its source (file § heading, or file p. page)."
    )


def sources_in(observation: str) -> list[tuple[str, str]]:
    """(source, passage) for each numbered passage of a LocalSearch observation, in order."""
    marks = [m for m in _MARKER.finditer(observation)]
    expected, out = 1, []
    kept = []
    for m in marks:  # only the markers numbered 1, 2, 3 ... in turn: a passage's own "[7] x" line is text
        if int(m.group(1)) == expected:
            kept.append(m)
            expected += 1
    for i, m in enumerate(kept):
        end = kept[i + 1].start() if i + 1 < len(kept) else len(observation)
        out.append((m.group(2).strip(), observation[m.end() : end].strip()))
    return out


def cited_sources(steps: Iterable, answer: str | None, tools: Iterable[str] = ("local_search",)) -> list[str]:
    """The sources of the passages `answer` came from: of the passages the run's searches showed, the one holding
    the largest share of the answer's terms and those holding at least three quarters as many, in the order
    shown. An answer that shares no term with any passage cites none."""
    words = set(tokenize(answer or ""))
    if not words:
        return []
    shown: list[tuple[str, float]] = []
    names = set(tools)
    for step in steps:
        text = getattr(step, "raw_observation", None) or getattr(step, "observation", None)
        if getattr(step, "action", None) in names and text and not getattr(step, "error", None):
            shown += [
                (source, len(words & set(tokenize(passage))) / len(words)) for source, passage in sources_in(text)
            ]
    best = max((share for _, share in shown), default=0.0)
    if best == 0:
        return []
    cited = [source for source, share in shown if share >= 0.75 * best]
    return list(dict.fromkeys(cited))
