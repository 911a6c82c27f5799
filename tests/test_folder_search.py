"""A folder as local_search's corpus: every kind of file, unreadable ones, the on-disk index kept in step with
the files between starts, Chinese and mixed folders, sources in observations, the CLI's output and --json, a
damaged index rebuilt with one warning. Every test's index goes under the session's temporary TINYAGENT_CACHE."""

from __future__ import annotations

import json
import logging
import os
import sqlite3
from pathlib import Path

import pytest
from conftest import ScriptedModel
from pdf_writer import write_pdf
from test_cli import run_cli, use_model  # noqa: F401  (a fixture)

from tinyagent import config
from tinyagent.agent import Agent
from tinyagent.config import load_config
from tinyagent.format.prompts import build_system_prompt
from tinyagent.tools import CorpusError, GoogleSearch, LocalSearch
from tinyagent.tools.documents import PASSAGE_CHARS, markdown_sections, pieces
from tinyagent.tools.local_search import cited_sources, sources_in
from tinyagent.tools.search_index import SearchIndex, index_path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "docs"


def sources(observation: str) -> list[str]:
    return [source for source, _ in sources_in(observation)]


def warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.fixture
def folder(tmp_path) -> Path:
    """One file of each kind, in a folder with a subfolder, a hidden folder and a file of another kind."""
    docs = tmp_path / "docs"
    (docs / "guides").mkdir(parents=True)
    (docs / "guides" / "setup.md").write_text(
        "# Setup\n\nWelcome to the zorblat tools.\n\n## Installing\n\nRun the quentonizer with `--fast` to install "
        "the zorblat.\n\n```\n# not a heading\n```\n\n## Updating\n\nUpdates arrive every fortnight.\n",
        encoding="utf-8",
    )
    (docs / "notes.txt").write_text("Plain notes.\n\nThe office plant is called Gerald.\n", encoding="utf-8")
    (docs / "contact.html").write_text(
        "<html><head><title>Contact</title><script>var hidden = 'scriptword';</script>"
        "<style>.x { color: red }</style></head><body><nav>menuword</nav><h1>Contact us</h1>"
        "<p>Ring the <b>brass bell</b> twice for the porter.</p><h2>Hours</h2><p>Open from nine to five.</p>"
        "</body></html>",
        encoding="utf-8",
    )
    write_pdf(
        docs / "manual.pdf",
        [
            ["Manual", "The first page is about unpacking."],
            ["Error codes", "Code Z9 means the flux capacitor is cold."],
        ],
    )
    (docs / "facts.jsonl").write_text(
        json.dumps({"title": "Ostrich", "text": "An ostrich cannot fly."}) + "\n", encoding="utf-8"
    )
    (docs / "photo.png").write_bytes(b"\x89PNG\r\n")
    (docs / ".git").mkdir()
    (docs / ".git" / "HEAD.md").write_text("# hidden\n\nsecret zorblat notes\n", encoding="utf-8")
    return docs


# --- reading each kind of file -------------------------------------------------------------------------


def test_a_folder_with_each_kind_of_file_is_searched_with_sources(folder):
    search = LocalSearch(folder, top_k=1)
    assert search(search_query="how do I install the zorblat") == (
        "[1] guides/setup.md § Installing\nRun the quentonizer with `--fast` to install the zorblat.\n"
        "```\n# not a heading\n```"
    )
    assert search(search_query="what is the plant called") == (
        "[1] notes.txt\nPlain notes.\nThe office plant is called Gerald."
    )
    assert search(search_query="brass bell porter") == (
        "[1] contact.html § Contact us\nRing the brass bell twice for the porter."
    )
    assert search(search_query="what does code Z9 mean") == (
        "[1] manual.pdf p. 2\nError codes\nCode Z9 means the flux capacitor is cold."
    )
    assert search(search_query="can an ostrich fly") == "[1] facts.jsonl § Ostrich\nAn ostrich cannot fly."
    for markup in ("scriptword", "menuword", "color", "hidden"):  # what a reader does not see is not searched
        assert search(search_query=markup).startswith("No results")
    assert {s for s in sources(LocalSearch(folder, top_k=10, min_score_ratio=0)(search_query="zorblat"))} == {
        "guides/setup.md § Setup",
        "guides/setup.md § Installing",
    }  # the hidden .git folder is not read
    assert search.index.file_count() == 5


def test_the_description_says_what_the_folder_holds(folder):
    search = LocalSearch(folder)
    assert search.description("en").startswith(
        "Searches your own documents, offline: the folder 'docs' (5 files: contact.html, facts.jsonl, manual.pdf, "
        "notes.txt, guides/setup.md; about: Contact us, Setup). Use it for questions these documents answer."
    )
    assert (
        "文件夹 docs（5 个文件：contact.html、facts.jsonl、manual.pdf、notes.txt、guides/setup.md；内容包括：Contact us、"
        "Setup）" in search.description("zh")
    )
    assert (
        "about: Frequently asked questions, Aurora K2 Electric Kettle - User Manual, Setting up the Aurora app, "
        "Contact Aurora support, 常见问题)" in LocalSearch(EXAMPLES).description("en")
    )  # a PDF's own title too
    assert "encyclopedia" in LocalSearch().description("en")  # the shipped corpus keeps its own


def test_passages_are_cut_at_headings_and_paragraphs_within_a_size_bound():
    sections = markdown_sections("Intro.\n\n# A\n\none\ntwo\n\nthree\n\nB\n---\n\nfour [link](http://x) here\n")
    assert sections == [([], ["Intro."]), (["A"], ["one\ntwo", "three"]), (["A", "B"], ["four link here"])]
    long = "This sentence has six words. " * 60
    parts = pieces(long.strip(), PASSAGE_CHARS)
    assert all(len(p) <= PASSAGE_CHARS for p in parts) and all(p.endswith("words.") for p in parts)
    assert " ".join(parts) == long.strip()
    assert all(len(p) <= 40 for p in pieces("x" * 100 + " " + "y" * 100, 40))  # no sentence end: cut at the bound
    assert "".join(pieces("第一句话。" * 30, 50)) == "第一句话。" * 30  # Chinese sentences join without spaces


def test_a_long_markdown_section_becomes_several_bounded_passages(tmp_path):
    (tmp_path / "long.md").write_text(
        "# Long\n\n" + "\n\n".join(f"Paragraph {i} about walruses." * 8 for i in range(20)), encoding="utf-8"
    )
    index = SearchIndex(tmp_path)
    assert index.count() > 5
    hits = index.search("walruses", 50)
    assert all(len(h.passage.text) <= PASSAGE_CHARS for h in hits)
    assert {h.passage.source for h in hits} == {"long.md § Long"}


# --- files that cannot be read ---------------------------------------------------------------------------


def test_unreadable_files_are_listed_one_line_each_and_skipped(folder, caplog):
    (folder / "broken.pdf").write_bytes(b"%PDF-1.4 this is not really a pdf")
    (folder / "latin1.txt").write_bytes(b"caf\xe9 au lait")
    (folder / "bad.jsonl").write_text('{"title": "A"}\n', encoding="utf-8")
    write_pdf(folder / "scan.pdf", [[]])
    with caplog.at_level(logging.WARNING, logger="tinyagent"):
        search = LocalSearch(folder)
    lines = warnings(caplog)
    assert len(lines) == 4 and all("\n" not in line for line in lines)
    assert any(line.startswith("broken.pdf: skipped, not a readable PDF") for line in lines)
    assert "latin1.txt: skipped, not UTF-8 text (byte 3)" in lines
    assert any(
        line.startswith("bad.jsonl: skipped, line 1: the record needs a non-empty string 'text'") for line in lines
    )
    assert "scan.pdf: skipped, the PDF has no text layer (a scan? run OCR on it first)" in lines
    assert search(search_query="brass bell").startswith("[1] contact.html")

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="tinyagent"):
        again = SearchIndex(folder)
    assert sorted(warnings(caplog)) == sorted(lines)  # listed again at the next start ...
    assert again.changes.read == []  # ... without reading them again


def test_an_encrypted_pdf_is_read_only_without_a_password(tmp_path, caplog):
    from pypdf import PdfReader, PdfWriter

    plain = write_pdf(tmp_path / "plain.pdf", [["The vault code is kept in the safe."]])
    for name, user_password in (("locked.pdf", "secret"), ("owner-only.pdf", "")):
        writer = PdfWriter(clone_from=PdfReader(plain))
        writer.encrypt(user_password, owner_password="owner", algorithm="RC4-128")
        writer.write(tmp_path / name)
    plain.unlink()
    with caplog.at_level(logging.WARNING, logger="tinyagent"):
        search = LocalSearch(tmp_path)
    assert warnings(caplog) == ["locked.pdf: skipped, the PDF is encrypted"]
    assert search(search_query="vault code") == "[1] owner-only.pdf p. 1\nThe vault code is kept in the safe."


def test_one_index_serves_many_threads_at_once(folder):
    from concurrent.futures import ThreadPoolExecutor

    search = LocalSearch(folder)
    queries = ["zorblat", "brass bell", "ostrich", "code Z9", "plant", "保修"] * 10
    alone = [search(search_query=q) for q in queries]
    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(lambda q: search(search_query=q), queries)) == alone


def test_a_corpus_that_is_one_unreadable_file_is_an_error(tmp_path):
    path = tmp_path / "only.txt"
    path.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(CorpusError, match=r"only\.txt: not UTF-16 text") as err:
        LocalSearch(path)
    assert "\n" not in str(err.value)
    with pytest.raises(CorpusError, match="corpus folder not found"):
        LocalSearch(tmp_path / "missing")


# --- the index on disk, kept in step with the files ------------------------------------------------------


def test_the_index_lives_under_the_cache_keyed_by_folder(folder, tmp_path):
    before = sorted(p.relative_to(folder) for p in folder.rglob("*"))
    index = SearchIndex(folder)
    assert index.path == index_path(folder) and index.path.is_file()
    assert Path(os.environ["TINYAGENT_CACHE"]) in index.path.parents
    assert sorted(p.relative_to(folder) for p in folder.rglob("*")) == before  # nothing written in the folder
    other = tmp_path / "other" / "docs"
    other.mkdir(parents=True)
    (other / "a.md").write_text("another corpus\n", encoding="utf-8")
    assert index_path(other) != index.path and SearchIndex(other).search("corpus")[0].passage.file == "a.md"


def test_a_second_start_on_an_unchanged_folder_reads_no_file(folder):
    first = SearchIndex(folder)
    assert sorted(first.changes.added) == ["contact.html", "facts.jsonl", "guides/setup.md", "manual.pdf", "notes.txt"]
    second = SearchIndex(folder)
    assert second.changes.read == [] and second.changes.unchanged == 5
    assert second.search("ostrich")[0].passage.source == "facts.jsonl § Ostrich"


def test_only_the_file_edited_removed_or_added_between_starts_is_indexed_again(folder):
    SearchIndex(folder)
    setup = folder / "guides" / "setup.md"
    setup.write_text("# Setup\n\n## Installing\n\nRun the grommet wizard.\n", encoding="utf-8")
    (folder / "notes.txt").unlink()
    (folder / "new.md").write_text("# Parking\n\nPark behind the bakery.\n", encoding="utf-8")
    os.utime(folder / "contact.html")  # touched, same bytes: read, not indexed again

    index = SearchIndex(folder)
    changes = index.changes
    assert (changes.added, changes.edited, changes.removed) == (["new.md"], ["guides/setup.md"], ["notes.txt"])
    assert sorted(changes.read) == ["contact.html", "guides/setup.md", "new.md"] and changes.unchanged == 3
    search = LocalSearch(index=index, top_k=5, min_score_ratio=0)
    assert search(search_query="quentonizer").startswith("No results")  # the old text is gone
    assert sources(search(search_query="grommet wizard")) == ["guides/setup.md § Installing"]
    assert search(search_query="office plant Gerald").startswith("No results")
    assert sources(search(search_query="where to park")) == ["new.md § Parking"]
    assert SearchIndex(folder).changes.read == []


def test_a_damaged_index_is_rebuilt_with_one_warning(folder, caplog):
    path = SearchIndex(folder).path
    path.write_bytes(b"this is not an sqlite database at all" * 100)
    with caplog.at_level(logging.WARNING, logger="tinyagent"):
        search = LocalSearch(folder)
    assert warnings(caplog) == [f"the search index of {folder} was damaged (file is not a database): rebuilding it"]
    assert search.index.path == path
    assert search(search_query="ostrich").startswith("[1] facts.jsonl § Ostrich")
    assert sorted(search.index.changes.added) == [
        "contact.html",
        "facts.jsonl",
        "guides/setup.md",
        "manual.pdf",
        "notes.txt",
    ]


def test_an_index_damaged_inside_is_rebuilt_too(folder, caplog):
    path = SearchIndex(folder).path
    data = bytearray(path.read_bytes())
    page = 4096
    data[page : len(data)] = b"\x07" * (len(data) - page)  # every page but the header page overwritten
    path.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="tinyagent"):
        search = LocalSearch(folder)
    assert warnings(caplog) == [
        (f"the search index of {folder} was damaged (database disk image is malformed): rebuilding it")
    ]
    assert search.index.path == path and search(search_query="brass bell").startswith("[1] contact.html")


def test_an_index_of_another_format_is_rebuilt_quietly(folder, caplog):
    path = SearchIndex(folder).path
    with sqlite3.connect(path) as db:
        db.execute("UPDATE meta SET value = '0' WHERE key = 'format'")
    with caplog.at_level(logging.WARNING, logger="tinyagent"):
        index = SearchIndex(folder)
    assert warnings(caplog) == [] and len(index.changes.added) == 5


def test_a_cache_that_cannot_be_written_means_an_index_in_memory(folder, tmp_path, monkeypatch, caplog):
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where the cache folder should be")
    monkeypatch.setenv("TINYAGENT_CACHE", str(blocker))
    with caplog.at_level(logging.WARNING, logger="tinyagent"):
        search = LocalSearch(folder)
    assert len(warnings(caplog)) == 1 and "indexing in memory for this run" in warnings(caplog)[0]
    assert search.index.path is None and search(search_query="ostrich").startswith("[1] facts.jsonl")


# --- Chinese and mixed folders ---------------------------------------------------------------------------


def test_a_chinese_folder_and_a_mixed_one(tmp_path):
    zh = tmp_path / "zh"
    zh.mkdir()
    (zh / "手册.md").write_text(
        "# 使用手册\n\n## 除垢\n\n每四周用白醋除垢一次。\n\n## 保修\n\n自购买之日起保修两年。\n", encoding="utf-8"
    )
    (zh / "说明.txt").write_text("指示灯变成紫色表示正在更新固件。\n", encoding="utf-8")
    search = LocalSearch(zh, top_k=1)
    assert search(search_query="多久除一次垢？") == "[1] 手册.md § 除垢\n每四周用白醋除垢一次。"
    assert search(search_query="保修期多长") == "[1] 手册.md § 保修\n自购买之日起保修两年。"
    assert sources(search(search_query="紫色的灯是什么意思")) == ["说明.txt"]
    assert "文件夹 zh（2 个文件：手册.md、说明.txt；内容包括：使用手册）" in search.description("zh")

    mixed = LocalSearch(EXAMPLES, top_k=1)
    assert sources(mixed(search_query="保修期多长？")) == ["zh/常见问题.md § 保修期多长？"]
    assert sources(mixed(search_query="How long is the warranty?")) == ["faq.md § How long is the warranty?"]
    assert sources(mixed(search_query="What does error E2 mean?")) == ["kettle-manual.pdf p. 3"]
    assert sources(mixed(search_query="support phone number")) == ["support.html § Phone"]


# --- sources: in the observation, and those the answer came from -------------------------------------------


def test_sources_are_read_back_from_an_observation():
    observation = "[1] a.md § One\nfirst\n[2] not a marker: inside the text\n\n[2] b.pdf p. 3\nsecond\n\nmore"
    assert sources_in(observation) == [
        ("a.md § One", "first\n[2] not a marker: inside the text"),
        ("b.pdf p. 3", "second\n\nmore"),
    ]
    assert sources_in("No results for 'x' in the local corpus. Try other keywords.") == []


def test_the_answer_cites_the_passages_it_came_from(scripted):
    search = LocalSearch(EXAMPLES)
    model = scripted(
        [
            'Action: local_search\nAction Input: {"search_query": "error E2"}',
            "Final Answer: E2 means the base cannot sense the kettle: lift it and set it down again.",
        ]
    )
    result = Agent(model, tools=[search]).run("What does error E2 on my kettle mean?")
    observation = result.steps[0].observation
    assert observation.startswith("[1] kettle-manual.pdf p. 3\nError codes\nE1: the kettle was switched on empty.")
    assert "Observation: [1] kettle-manual.pdf p. 3" in model.calls[1]["messages"][-1]["content"]
    assert cited_sources(result.steps, result.answer) == ["kettle-manual.pdf p. 3"]
    assert cited_sources(result.steps, "I do not know.") == []  # nothing shown holds the answer
    assert cited_sources(result.steps, "Paris") == []
    assert cited_sources([], result.answer) == []


# --- the faces: config, the CLI and --json ---------------------------------------------------------------

E2_RUN = [
    'Thought: I will search the documents.\nAction: local_search\nAction Input: {"search_query": "error E2"}',
    (
        "Thought: I now know the final answer\nFinal Answer: The base cannot sense the kettle: lift it and set "
        "it down again."
    ),
]


def test_ask_with_a_corpus_folder_prints_the_sources_of_the_answer(use_model, capsys):  # noqa: F811
    use_model(ScriptedModel(list(E2_RUN)))
    code, out, err = run_cli(
        capsys, "ask", "--tools", "local_search", "--corpus", str(EXAMPLES), "What does error E2 mean?"
    )
    assert code == 0, err
    assert "Observation: [1] kettle-manual.pdf p. 3\nError codes\n" in out
    assert out.endswith(
        "Final Answer: The base cannot sense the kettle: lift it and set it down again.\n"
        "Sources: kettle-manual.pdf p. 3\n" + out.rsplit("\n", 3)[-3] + "\n\n"
    )
    assert "Traceback" not in err


def test_ask_json_carries_the_sources(use_model, capsys):  # noqa: F811
    use_model(ScriptedModel(list(E2_RUN)))
    code, out, _ = run_cli(capsys, "ask", "--json", "--tools", "local_search", "--corpus", str(EXAMPLES), "E2?")
    result = json.loads(out)
    assert code == 0 and result["sources"] == ["kettle-manual.pdf p. 3"]
    assert result["steps"][0]["observation"].startswith("[1] kettle-manual.pdf p. 3\n")
    use_model(ScriptedModel(["Final Answer: 42"]))
    code, out, _ = run_cli(capsys, "ask", "--json", "--tools", "local_search", "--corpus", str(EXAMPLES), "6*7?")
    assert json.loads(out)["sources"] == []


def test_a_damaged_index_under_the_cli_is_one_warning_line(use_model, capsys, folder):  # noqa: F811
    SearchIndex(folder).path.write_bytes(b"garbage" * 500)
    use_model(ScriptedModel(["Final Answer: ok"]))
    code, _, err = run_cli(capsys, "ask", "--tools", "local_search", "--corpus", str(folder), "q")
    assert code == 0 and "Traceback" not in err
    assert [line for line in err.splitlines() if "warning" in line] == [
        f"tinyagent: warning: the search index of {folder} was damaged (file is not a database): rebuilding it"
    ]


def test_config_corpus_takes_a_folder_and_google_search_sits_beside_it(folder, monkeypatch):
    monkeypatch.setenv("SERPER_API_KEY", "k" * 24)
    cfg = load_config(None, {"agent.corpus": str(folder)})
    tools = config.build_tools(cfg)
    assert [t.name_for_model for t in tools] == ["google_search", "calculator", "local_search"]
    system = build_system_prompt(tools, "en")
    google, local = tools[0], tools[2]
    assert isinstance(google, GoogleSearch) and "not in your own documents" in google.description("en")
    assert local.description("en") in system and google.description("en") in system
    with pytest.raises(config.ConfigError, match="agent.corpus: no such folder or file"):
        load_config(None, {"agent.corpus": str(folder / "missing")})
