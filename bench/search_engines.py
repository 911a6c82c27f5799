"""local_search's engines side by side: index time, query time and recall@3 at the shipped corpus's size and at
1k / 10k / 100k passages (bench/passages.py), in one run; and Chinese tokenisation, bigrams against jieba.

    python bench/search_engines.py                                   # 50 (shipped), 1k, 10k passages
    python bench/search_engines.py --sizes 50,1000,10000,100000      # the full table (a few minutes)
    python bench/search_engines.py --questions evals/facts_dev.jsonl --sizes 50
    python bench/search_engines.py --tokenizers --sizes 50,10000     # bigrams vs jieba on the Chinese questions

Engines: `today` (the hand-written BM25 of tools/corpus.py, in memory, built at every start), `fts5` (the shipped
SearchIndex: SQLite FTS5 on disk, here over a JSONL file of the passages), `tantivy` and `bm25s` (pip packages,
skipped when not installed; on disk and in memory + saved). All rank the same terms (tools/terms.py); the index
time includes tokenising. Recall@3: a question counts when a passage of one of its gold titles is in the top 3;
MRR over the top 10.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from passages import QUESTIONS, passages, questions

from tinyagent.tools.corpus import BM25
from tinyagent.tools.search_index import SearchIndex
from tinyagent.tools.terms import tokenize

_CJK = re.compile(r"[\u4e00-\u9fff]")


class Today:
    """tools/corpus.py's BM25, in memory (a title's terms counted twice, as the Corpus does)."""

    name = "today"

    def build(self, items, folder: Path, tok=tokenize) -> None:
        self.tok = tok
        self.bm25 = BM25([tok(title) * 2 + tok(text) for title, text in items])

    def search(self, query: str, k: int) -> list[int]:
        scores = self.bm25.scores(self.tok(query))
        return [i for i, _ in sorted(scores.items(), key=lambda x: (-x[1], x[0]))[:k]]


class Fts5:
    """The shipped SearchIndex over a JSONL file of the passages (written before the clock starts)."""

    name = "fts5"

    def prepare(self, items, folder: Path) -> None:
        self.file = folder / "passages.jsonl"
        with self.file.open("w", encoding="utf-8") as f:
            for title, text in items:
                f.write(json.dumps({"title": title, "text": text}, ensure_ascii=False) + "\n")
        self.rows = {(title, text): i for i, (title, text) in enumerate(items)}

    def build(self, items, folder: Path) -> None:
        self.index = SearchIndex(self.file, path=folder / "index.sqlite", passage_chars=100_000)  # one per record

    def search(self, query: str, k: int) -> list[int]:
        return [self.rows.get((h.passage.heading, h.passage.text), -1) for h in self.index.search(query, k)]


class Tantivy:
    name = "tantivy"

    def build(self, items, folder: Path) -> None:
        import tantivy

        schema = tantivy.SchemaBuilder()
        schema.add_integer_field("id", stored=True)
        schema.add_text_field("title", tokenizer_name="whitespace", index_option="freq")
        schema.add_text_field("body", tokenizer_name="whitespace", index_option="freq")
        (folder / "tantivy").mkdir()
        index = tantivy.Index(schema.build(), path=str(folder / "tantivy"))
        writer = index.writer(heap_size=100_000_000, num_threads=1)
        for i, (title, text) in enumerate(items):
            writer.add_document(tantivy.Document(id=i, title=" ".join(tokenize(title)), body=" ".join(tokenize(text))))
        writer.commit()
        writer.wait_merging_threads()
        self.tantivy, self.index = tantivy, tantivy.Index.open(str(folder / "tantivy"))
        self.searcher = self.index.searcher()

    def search(self, query: str, k: int) -> list[int]:
        t = self.tantivy
        should = []
        for term in dict.fromkeys(tokenize(query)):
            should.append(
                (t.Occur.Should, t.Query.boost_query(t.Query.term_query(self.index.schema, "title", term), 2.0))
            )
            should.append((t.Occur.Should, t.Query.term_query(self.index.schema, "body", term)))
        if not should:
            return []
        hits = self.searcher.search(t.Query.boolean_query(should), k).hits
        return [self.searcher.doc(address)["id"][0] for _, address in hits]


class Bm25s:
    name = "bm25s"

    def build(self, items, folder: Path) -> None:
        import bm25s

        retriever = bm25s.BM25(k1=1.5, b=0.75)
        retriever.index([tokenize(title) * 2 + tokenize(text) or ["\0"] for title, text in items], show_progress=False)
        retriever.save(str(folder / "bm25s"))
        self.retriever = bm25s.BM25.load(str(folder / "bm25s"))

    def search(self, query: str, k: int) -> list[int]:
        terms = [t for t in tokenize(query) if t in self.retriever.vocab_dict]
        if not terms:
            return []
        docs, scores = self.retriever.retrieve([terms], k=k, show_progress=False, n_threads=1)
        return [int(d) for d, s in zip(docs[0], scores[0]) if s > 0]


ENGINES = {e.name: e for e in (Today, Fts5, Tantivy, Bm25s)}


def installed(name: str) -> bool:
    try:
        __import__(name)
        return True
    except ImportError:
        return False


def score(items, qs, search) -> tuple[float, float, float, float]:
    """(recall@3, MRR@10, median and max query ms) of `search(question, k)` over `qs`."""
    found, reciprocal, times = 0, 0.0, []
    for q in qs:
        started = time.perf_counter()
        top = search(q["question"], 10)
        times.append((time.perf_counter() - started) * 1000)
        ranks = [r for r, i in enumerate(top) if i >= 0 and items[i][0] in q["gold"]]
        found += bool(ranks) and ranks[0] < 3
        reciprocal += 1 / (ranks[0] + 1) if ranks else 0.0
    return found / len(qs), reciprocal / len(qs), statistics.median(times), max(times)


def engines_table(sizes: list[int], names: list[str], qs: list[dict]) -> list[dict]:
    rows = []
    print(
        f"{'passages':>9} {'engine':8} {'index s':>9} {'x today':>8} {'query ms':>9} {'max ms':>8} {'x today':>8} "
        f"{'recall@3':>9} {'MRR':>6}"
    )
    for size in sizes:
        items = passages(size)
        base = None
        for name in names:
            engine = ENGINES[name]()
            folder = Path(tempfile.mkdtemp(prefix="search-bench-"))
            try:
                if hasattr(engine, "prepare"):
                    engine.prepare(items, folder)
                started = time.perf_counter()
                engine.build(items, folder)
                index_s = time.perf_counter() - started
                recall, mrr, median_ms, max_ms = score(items, qs, engine.search)
            finally:
                shutil.rmtree(folder, ignore_errors=True)
            base = base or (index_s, median_ms)
            row = {
                "passages": len(items),
                "engine": name,
                "index_s": round(index_s, 3),
                "query_ms_median": round(median_ms, 2),
                "query_ms_max": round(max_ms, 2),
                "recall_at_3": round(recall, 3),
                "mrr": round(mrr, 3),
            }
            rows.append(row)
            print(
                f"{len(items):>9} {name:8} {index_s:>9.3f} {index_s / base[0]:>8.2f} {median_ms:>9.2f} "
                f"{max_ms:>8.2f} {median_ms / base[1]:>8.2f} {recall:>9.3f} {mrr:>6.3f}",
                flush=True,
            )
    return rows


def tokenizers_table(sizes: list[int], qs: list[dict]) -> list[dict]:
    """Chinese questions on the in-memory BM25 with today's bigrams and with jieba's words (search mode)."""
    import jieba

    started = time.perf_counter()
    jieba.setLogLevel(60)
    jieba.initialize()
    print(f"jieba's dictionary loads in {time.perf_counter() - started:.2f} s (once per process)")
    zh = [q for q in qs if _CJK.search(q["question"])]
    stop = set("的了是在和与吗呢吧啊哪什么谁")

    def words(text: str) -> list[str]:
        out = []
        for term in tokenize(text):
            if not _CJK.match(term):
                out.append(term)
        for run in re.findall(r"[\u4e00-\u9fff]+", text):
            out += [w for w in jieba.lcut_for_search(run) if not set(w) <= stop]
        return out

    rows = []
    print(f"{'passages':>9} {'terms':8} {'tokenise s':>11} {'recall@3':>9} {'MRR':>6}  ({len(zh)} Chinese questions)")
    for size in sizes:
        items = passages(size)
        for name, tok in (("bigram", tokenize), ("jieba", words)):
            engine = Today()
            started = time.perf_counter()
            engine.build(items, Path("."), tok)
            seconds = time.perf_counter() - started
            recall, mrr, *_ = score(items, zh, engine.search)
            rows.append(
                {
                    "passages": len(items),
                    "terms": name,
                    "index_s": round(seconds, 3),
                    "recall_at_3": round(recall, 3),
                    "mrr": round(mrr, 3),
                }
            )
            print(f"{len(items):>9} {name:8} {seconds:>11.2f} {recall:>9.3f} {mrr:>6.3f}", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes",
        default="50,1000,10000",
        help="passages, comma-separated (the shipped corpus has 50; a size under that means the shipped corpus alone)",
    )
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--questions", type=Path, default=QUESTIONS, help="JSONL of {question, gold: [titles]}")
    parser.add_argument("--tokenizers", action="store_true", help="bigrams vs jieba instead of the engines")
    parser.add_argument("--json", type=Path, help="write the rows here")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    qs = [q for q in questions(args.questions) if q.get("gold")]
    print(f"{len(qs)} questions from {args.questions}")
    if args.tokenizers:
        rows = tokenizers_table(sizes, qs)
    else:
        names = [n for n in args.engines.split(",") if n in ("today", "fts5") or installed(n)]
        skipped = set(args.engines.split(",")) - set(names)
        if skipped:
            print(f"not installed, skipped: {', '.join(sorted(skipped))} (pip install {' '.join(sorted(skipped))})")
        rows = engines_table(sizes, names, qs)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
