"""LocalSearch: tokenisation, BM25 ranking on the shipped corpus, custom corpora, clear errors."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tinyagent import Agent, ReAct
from tinyagent.tools import CorpusError, LocalSearch, ToolArgumentError, ToolError
from tinyagent.tools.corpus import DEFAULT_CORPUS, Corpus, Document, load_corpus
from tinyagent.tools.terms import tokenize

#: ReAct from the first reply: these tests drive the loop itself (the working first: test_working.py)
CLASSIC = ReAct(working_first=False, search="tool")


@pytest.fixture(scope="module")
def search():
    return LocalSearch()


def titles(output: str) -> list[str]:
    """The result titles in a LocalSearch observation, in rank order."""
    return [block.split("\n", 1)[0].split("] ", 1)[1] for block in output.split("\n\n")]


def write_corpus(path, records) -> str:
    path.write_text(
        "\n".join(r if isinstance(r, str) else json.dumps(r, ensure_ascii=False) for r in records) + "\n",
        encoding="utf-8",
    )
    return str(path)


# --- tokenisation ----------------------------------------------------------------------------


def test_tokenize_latin_words_are_lowercased_without_stop_words():
    assert tokenize("Which year was Jay Chou born?") == ["year", "jay", "chou", "born"]
    assert tokenize("ＪＡＹ　Ｃｈｏｕ") == ["jay", "chou"]  # full-width letters normalise


def test_tokenize_chinese_uses_unigrams_and_bigrams_and_skips_function_characters():
    assert tokenize("周杰伦的专辑") == ["周", "杰", "伦", "周杰", "杰伦", "专", "辑", "专辑"]


def test_tokenize_mixed_text_keeps_both_scripts():
    assert tokenize("周杰伦（Jay Chou）1979年") == ["周", "杰", "伦", "周杰", "杰伦", "jay", "chou", "1979", "年"]


# --- the shipped corpus ------------------------------------------------------------------------


def test_shipped_corpus_is_valid_bilingual_package_data():
    documents = load_corpus(DEFAULT_CORPUS)
    assert DEFAULT_CORPUS.parent.name == "data" and DEFAULT_CORPUS.parent.parent.name == "tinyagent"
    assert len(documents) >= 40
    chinese = [d for d in documents if any("\u4e00" <= c <= "\u9fff" for c in d.title)]
    assert 15 <= len(chinese) <= len(documents) - 15
    assert len({d.title for d in documents}) == len(documents)


@pytest.mark.parametrize(
    "question, first, fact",
    [
        ("Which year was Jay Chou born?", "Jay Chou", "18 January 1979"),
        ("周杰伦哪年出生", "周杰伦", "1979年1月18日"),
        ("What is Jay Chou's first album?", "Jay Chou", '"Jay", was released on 7 November 2000'),
        ("周杰伦的第一张专辑是什么？", "周杰伦", "《Jay》于2000年11月7日发行"),
        ("When was the Eiffel Tower completed?", "Eiffel Tower", "1889"),
        ("长江有多长", "长江", "6300公里"),
    ],
)
def test_demo_questions_find_the_right_entry_first(search, question, first, fact):
    output = search(search_query=question)
    assert titles(output)[0] == first
    assert fact in output.split("\n\n")[0]


def test_results_are_capped_at_top_k_and_drop_weak_tail(search):
    assert len(titles(search(search_query="Jay Chou album"))) == 3
    assert len(titles(LocalSearch(top_k=1)(search_query="Jay Chou album"))) == 1
    # only the Eiffel Tower entry is a real match; passages far below it are left out
    assert titles(search(search_query="When was the Eiffel Tower completed?")) == ["Eiffel Tower"]
    everything = LocalSearch(top_k=5, min_score_ratio=0.0)(search_query="When was the Eiffel Tower completed?")
    assert len(titles(everything)) > 1


def test_no_match_is_a_clear_observation(search):
    assert search(search_query="quantum chromodynamics") == (
        "No results for 'quantum chromodynamics' in the local corpus. Try other keywords."
    )
    assert search(search_query="？！。").startswith("No results for")


@pytest.mark.parametrize("query", ["", "   \n"])
def test_empty_query_is_a_tool_error(search, query):
    with pytest.raises(ToolError, match="the search query is empty"):
        search(search_query=query)


def test_tool_interface_matches_google_search(search):
    from tinyagent.tools import GoogleSearch

    assert search.name_for_model == "local_search"
    assert [p["name"] for p in search.parameters] == [p["name"] for p in GoogleSearch.parameters] == ["search_query"]
    assert set(search.name_for_human) == set(search.description_for_model) == {"en", "zh"}
    assert search.human_name("zh") == "本地搜索"
    assert search.json_schema()["required"] == ["search_query"]
    with pytest.raises(ToolArgumentError, match="must be of type string"):
        search(search_query=42)
    assert "passages=" in repr(search)


def test_top_k_must_be_positive():
    with pytest.raises(ValueError, match="top_k must be at least 1"):
        LocalSearch(top_k=0)


# --- BM25 ranking on a corpus of our own -----------------------------------------------------------


def test_custom_corpus_ranks_rare_terms_and_titles_higher(tmp_path):
    path = write_corpus(
        tmp_path / "docs.jsonl",
        [
            {"title": "Garden notes", "text": "Tomatoes need sun. Water the tomatoes every morning."},
            {"title": "Kettle manual", "text": "Fill the kettle with water and press the switch."},
            {"title": "Water", "text": "A clear liquid."},
            {"title": "Basil", "text": "Basil grows well next to tomatoes and needs water."},
        ],
    )
    search = LocalSearch(corpus_path=path, top_k=4, min_score_ratio=0.0)
    assert titles(search(search_query="kettle"))[0] == "Kettle manual"
    assert titles(search(search_query="water"))[0] == "Water"
    ranked = titles(search(search_query="tomatoes sun"))
    assert ranked[0] == "Garden notes" and ranked[1] == "Basil" and "Kettle manual" not in ranked


def test_a_title_match_outweighs_a_shorter_text_match(tmp_path):
    path = write_corpus(
        tmp_path / "docs.jsonl",
        [
            {"title": "Tea", "text": "Pour water from the kettle."},
            {"title": "Kettle", "text": "An electric device that boils water for tea and coffee."},
        ],
    )
    assert titles(LocalSearch(corpus_path=path)(search_query="kettle")) == ["Kettle", "Tea"]


def test_custom_corpus_returns_the_matching_paragraph(tmp_path):
    path = write_corpus(
        tmp_path / "docs.jsonl",
        [
            {
                "title": "Project handbook",
                "text": "Welcome to the team.\n\nBuilds run nightly at 02:00 UTC.\n\n"
                "Holidays are booked through the HR portal.",
            },
            {"title": "茶", "text": "绿茶不发酵，红茶全发酵。"},
        ],
    )
    search = LocalSearch(corpus_path=path)
    assert search(search_query="when do builds run") == "[1] Project handbook\nBuilds run nightly at 02:00 UTC."
    assert search(search_query="红茶") == "[1] 茶\n绿茶不发酵，红茶全发酵。"


def test_long_passages_are_shortened(tmp_path):
    path = write_corpus(tmp_path / "docs.jsonl", [{"title": "Long", "text": "word " * 300}])
    output = LocalSearch(corpus_path=path, max_chars=50, top_k=1)(search_query="word")
    assert output.endswith("…") and len(output.split("\n", 1)[1]) <= 51


def test_index_can_be_shared_without_reindexing(search):
    other = LocalSearch(index=search.index, top_k=1)
    assert other.index is search.index
    assert titles(other(search_query="Marie Curie Nobel"))[0] == "Marie Curie"


# --- bad corpora: one-line errors at construction ------------------------------------------------


def test_missing_corpus_file(tmp_path):
    with pytest.raises(CorpusError, match=r"corpus file not found: .*nope\.jsonl") as err:
        LocalSearch(corpus_path=tmp_path / "nope.jsonl")
    assert "\n" not in str(err.value) and isinstance(err.value, ValueError)


def test_a_folder_without_documents_is_not_a_corpus(tmp_path):
    (tmp_path / "image.png").write_bytes(b"\x89PNG")
    with pytest.raises(CorpusError, match="nothing to search") as err:
        LocalSearch(corpus_path=tmp_path)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "lines, message",
    [
        (['{"title": "A", "text": "x"}', "", '{"title": "B", "text": broken}'], r"line 3: not valid JSON"),
        (['["A", "x"]'], r"line 1: expected a JSON object .* got list"),
        (
            ['{"title": "A", "text": "x"}', '{"text": "no title"}'],
            r"line 2: the record needs a non-empty string 'title'",
        ),
        (['{"title": "A", "text": "   "}'], r"line 1: the record needs a non-empty string 'text'"),
        (['{"title": 5, "body": "x"}'], r"line 1: .*'title' and 'text'"),
        (["", "  "], r"the corpus is empty"),
        (
            ['{"title": "A", "text": "x"}', '{"title": ' + "[" * 100_000 + "]" * 100_000 + "}"],
            r"line 2: JSON nested too deeply to read",
        ),
        (['{"title": "A", "text": ' + "9" * 5000 + "}"], r"line 1: not valid JSON"),
    ],
)
def test_bad_records_name_the_line(tmp_path, lines, message):
    path = write_corpus(tmp_path / "bad.jsonl", lines)
    with pytest.raises(CorpusError, match=message) as err:
        LocalSearch(corpus_path=path)
    assert "\n" not in str(err.value) and "bad.jsonl" in str(err.value)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [
                '{"title": ',
                '"A"',
                ', "text": ',
                '"x"',
                "}",
                "{",
                "[",
                "]",
                "[" * 3000,
                "]" * 3000,
                "1e999",
                "NaN",
                "9" * 5000,
                '"\\ud800"',
                "\x00",
                ",",
                ":",
                "null",
                "\ufeff",
            ]
        ),
        max_size=12,
    ).map("".join)
)
def test_every_malformed_line_is_a_one_line_corpus_error(tmp_path_factory, line):
    path = write_corpus(tmp_path_factory.mktemp("corpus") / "c.jsonl", [line])
    try:
        LocalSearch(corpus_path=path)
    except CorpusError as e:
        assert "\n" not in str(e) and "c.jsonl" in str(e)


def test_non_utf8_line_is_named(tmp_path):
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(b'{"title": "A", "text": "ok"}\n{"title": "B", "text": "caf\xe9"}\n')
    with pytest.raises(CorpusError, match="line 2: not UTF-8 text"):
        LocalSearch(corpus_path=path)


def test_utf8_bom_is_accepted(tmp_path):
    path = tmp_path / "bom.jsonl"
    path.write_bytes('{"title": "A", "text": "apple"}\n'.encode("utf-8-sig"))
    assert LocalSearch(corpus_path=path)(search_query="apple") == "[1] A\napple"


def test_empty_in_memory_corpus_is_rejected():
    with pytest.raises(CorpusError, match="empty"):
        Corpus([])
    assert Corpus([Document("T", "one\n\n two ")]).documents[0].paragraphs() == ["one", "two"]


# --- through the agent ---------------------------------------------------------------------------


def test_agent_episode_with_local_search(scripted):
    model = scripted(
        [
            'Thought: I should search.\nAction: local_search\nAction Input: {"search_query": "周杰伦哪年出生"}',
            "Thought: 我现在知道最终答案了\nFinal Answer: 1979年",
        ]
    )
    result = Agent(model, tools=[LocalSearch()], protocol=CLASSIC).run("周杰伦哪年出生？")
    assert result.finished and result.answer == "1979年" and result.lang == "zh"
    assert result.steps[0].observation.startswith("[1] 周杰伦\n") and result.steps[0].error is None
    scratchpad = model.calls[1]["messages"][-1]
    assert scratchpad["role"] == "assistant" and "Observation: [1] 周杰伦" in scratchpad["content"]
    assert "local_search" in model.calls[0]["messages"][0]["content"]


def test_agent_turns_empty_query_into_an_error_observation(scripted):
    model = scripted(['Action: local_search\nAction Input: {"search_query": ""}', "Final Answer: unknown"])
    result = Agent(model, tools=[LocalSearch()], protocol=CLASSIC).run("?")
    assert result.steps[0].observation == "Error: the search query is empty"
