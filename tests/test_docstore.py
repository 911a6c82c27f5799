"""Docstore tools: search[entity] / lookup[keyword] over the shared corpus, their shared state, an agent episode."""

from __future__ import annotations

import json

import pytest

from tinyagent import Agent, ReAct
from tinyagent.tools import DocstoreLookup, DocstoreSearch, LocalSearch, ToolError, docstore_tools
from tinyagent.tools.corpus import Corpus, Document
from tinyagent.tools.docstore import sentences

#: ReAct from the first reply: these tests drive the loop itself (the working first: test_working.py)
CLASSIC = ReAct(working_first=False, search="tool")

JAY_FIRST_PARAGRAPH = (
    "Jay Chou (周杰伦) is a Taiwanese singer, songwriter, record producer and actor, one of the best-known "
    "stars of Mandopop. He was born on 18 January 1979 in Taipei County, Taiwan, which is now New Taipei City."
)


@pytest.fixture(scope="module")
def corpus():
    return Corpus.load()


@pytest.fixture
def tools(corpus):
    search, lookup = docstore_tools(corpus=corpus)
    return search, lookup


def test_factory_returns_a_pair_bound_to_one_state(tools):
    search, lookup = tools
    assert isinstance(search, DocstoreSearch) and isinstance(lookup, DocstoreLookup)
    assert search.state is lookup.state
    assert (search.name_for_model, lookup.name_for_model) == ("search", "lookup")
    assert [p["name"] for p in search.parameters] == ["entity"]
    assert [p["name"] for p in lookup.parameters] == ["keyword"]
    for t in tools:
        assert set(t.name_for_human) == set(t.description_for_model) == {"en", "zh"}
        assert t.json_schema()["properties"][t.parameters[0]["name"]] == {"type": "string"}


def test_factory_loads_a_corpus_file(tmp_path):
    path = tmp_path / "kb.jsonl"
    path.write_text(
        json.dumps({"title": "Widget", "text": "A widget is small.\n\nIt costs 3 euros."}) + "\n", encoding="utf-8"
    )
    search, lookup = docstore_tools(path)
    assert search(entity="widget") == "Widget\nA widget is small."
    assert lookup(keyword="euros") == "(Result 1 / 1) It costs 3 euros."


def test_search_by_exact_title_returns_only_the_first_paragraph(tools):
    search, _ = tools
    assert search(entity="Jay Chou") == "Jay Chou\n" + JAY_FIRST_PARAGRAPH
    assert search(entity="  jay chou ") == "Jay Chou\n" + JAY_FIRST_PARAGRAPH
    assert search(entity="《周杰伦》").startswith("周杰伦\n周杰伦（Jay Chou），台湾男歌手")
    assert "第一张录音室专辑" not in search(entity="周杰伦")  # second paragraph: for lookup


def test_search_strong_partial_match_has_no_similar_titles(tools):
    search, _ = tools
    output = search(entity="Eiffel")
    assert output.startswith("Eiffel Tower\nThe Eiffel Tower is") and "Similar titles" not in output


def test_weak_match_shows_the_closest_document_and_similar_titles(tools):
    search, lookup = tools
    output = search(entity="Jay Chou's wife")
    head, summary, first, similar = output.split("\n")
    assert head == "No document is titled \"Jay Chou's wife\"; the closest match is:"
    assert (summary, first) == ("Jay Chou", JAY_FIRST_PARAGRAPH)
    assert similar.startswith("Similar titles: Jay Chou, Jay (album), ")
    assert similar.endswith(". Search one of them by its exact title.")
    assert lookup(keyword="born").startswith("(Result 1 / 1) He was born")  # the closest match is open


def test_a_word_found_only_in_the_text_is_a_weak_match(tools):
    search, _ = tools
    output = search(entity="Paris")
    assert "the closest match is:\nEiffel Tower\n" in output
    assert "Similar titles: Eiffel Tower" in output


def test_search_with_no_match_clears_the_open_document(tools):
    search, lookup = tools
    search(entity="Jay Chou")
    assert search(entity="xyzzy plugh") == "Could not find 'xyzzy plugh': no document matches. Search for other words."
    with pytest.raises(ToolError, match="call search first"):
        lookup(keyword="album")


def test_lookup_before_any_search_says_to_search_first(tools):
    _, lookup = tools
    with pytest.raises(ToolError, match="there is no document to look in: call search first"):
        lookup(keyword="album")


def test_lookup_advances_through_results_of_the_same_keyword(tools):
    search, lookup = tools
    search(entity="Jay Chou")
    assert lookup(keyword="album") == '(Result 1 / 2) His first studio album, "Jay", was released on 7 November 2000.'
    assert lookup(keyword="ALBUM ") == '(Result 2 / 2) Its success was followed by the album "Fantasy" in 2001.'
    assert lookup(keyword="album") == "No more results for 'album' in 'Jay Chou' (all 2 shown)."
    assert lookup(keyword="film").startswith("(Result 1 / 1) He played the lead role")
    assert lookup(keyword="album").startswith("(Result 1 / 2)")  # another keyword in between restarts


def test_a_new_search_restarts_the_lookup(tools):
    search, lookup = tools
    search(entity="Jay Chou")
    lookup(keyword="album")
    search(entity="Jay (album)")
    assert lookup(keyword="album") == (
        "(Result 1 / 1) Jay is the debut studio album of the Taiwanese singer "
        "Jay Chou, released on 7 November 2000 by Alfa Music."
    )
    search(entity="Jay Chou")
    assert lookup(keyword="album").startswith("(Result 1 / 2)")


def test_lookup_without_a_matching_sentence(tools):
    search, lookup = tools
    search(entity="Marie Curie")
    assert lookup(keyword="guitar") == "No sentence of 'Marie Curie' contains 'guitar'."


def test_chinese_search_and_lookup(tools):
    search, lookup = tools
    assert search(entity="孔子").startswith("孔子\n孔子（公元前551年—公元前479年）")
    assert (
        lookup(keyword="周游列国")
        == "(Result 1 / 1) 他曾带领弟子周游列国约十四年，晚年回到鲁国，专心教学并整理古代典籍。"
    )


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda s, l: s(entity=" "), "the entity to search for is empty"),
        (lambda s, l: l(keyword=""), "the keyword to look up is empty"),
    ],
)
def test_empty_arguments_are_tool_errors(tools, call, message):
    with pytest.raises(ToolError, match=message):
        call(*tools)


def test_pairs_do_not_share_state(corpus):
    search_a, lookup_a = docstore_tools(corpus=corpus)
    _, lookup_b = docstore_tools(corpus=corpus)
    search_a(entity="Jay Chou")
    assert lookup_a(keyword="album").startswith("(Result 1 / 2)")
    with pytest.raises(ToolError, match="search first"):
        lookup_b(keyword="album")


def test_docstore_and_local_search_find_the_same_article():
    """The docstore ranks the corpus in memory (corpus.py), local_search on its index (search_index.py)."""
    search, _ = docstore_tools()
    assert search(entity="Jay Chou born").startswith("Jay Chou\n")
    assert LocalSearch()(search_query="Jay Chou born").startswith("[1] Jay Chou\n")


def test_sentences_split_english_and_chinese():
    doc = Document("T", "Born in 1879. Died in 1955! Why? 8,848.86 m tall.\n\n第一句。第二句！第三句")
    assert sentences(doc) == [
        "Born in 1879.",
        "Died in 1955!",
        "Why?",
        "8,848.86 m tall.",
        "第一句。",
        "第二句！",
        "第三句",
    ]


def test_agent_episode_search_then_lookup_then_answer(scripted, corpus):
    model = scripted(
        [
            'Thought: I should find Jay Chou.\nAction: search\nAction Input: {"entity": "Jay Chou"}',
            "Thought: The first paragraph has no album. Let me look it up.\n"
            'Action: lookup\nAction Input: {"keyword": "first studio album"}',
            "Thought: I now know the final answer\nFinal Answer: Jay (2000)",
        ]
    )
    result = Agent(model, tools=docstore_tools(corpus=corpus), lang="en", protocol=CLASSIC).run(
        "What was Jay Chou's first album?"
    )
    assert result.finished and result.answer == "Jay (2000)" and result.stop_reason == "final_answer"
    assert [s.action for s in result.steps] == ["search", "lookup", None]
    assert result.steps[0].observation == "Jay Chou\n" + JAY_FIRST_PARAGRAPH
    assert result.steps[1].observation == (
        '(Result 1 / 1) His first studio album, "Jay", was released on 7 November 2000.'
    )
    system = model.calls[0]["messages"][0]["content"]
    assert "search: Call this tool" in system and "lookup: Call this tool" in system
    last_scratchpad = model.calls[2]["messages"][-1]["content"]
    assert "Observation: Jay Chou\n" in last_scratchpad
    assert 'Observation: (Result 1 / 1) His first studio album, "Jay"' in last_scratchpad


def test_agent_lookup_before_search_becomes_an_error_observation(scripted, corpus):
    model = scripted(['Action: lookup\nAction Input: {"keyword": "album"}', "Final Answer: I do not know"])
    result = Agent(model, tools=docstore_tools(corpus=corpus), protocol=CLASSIC).run("What was Jay Chou's first album?")
    assert result.steps[0].observation.startswith("Error: there is no document to look in: call search first")
