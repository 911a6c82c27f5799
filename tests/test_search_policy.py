"""The ReAct search policy: the question itself searched first (its results in front of the question, the
prompt still growing), the model's own follow-up query, a second search when the first found nothing, an answer
from the passages, short answers, and no placeholder of any prompt taken as an answer, in English and Chinese."""

from __future__ import annotations

import pytest
from conftest import ScriptedModel

from tinyagent import Agent, ReAct, Reply, tool
from tinyagent.agent.approval import Verdict
from tinyagent.format.direct import short_answer
from tinyagent.format.kinds import StepKind
from tinyagent.format.prompts import build_check_prompt
from tinyagent.format.retrieval import retrieval_messages
from tinyagent.format.templates import shipped
from tinyagent.tools import Calculator, LocalSearch

JAY = "Which year was Jay Chou born?"
WORKING = "The search results say he was born on 18 January 1979.\nThe answer is 1979."


def test_the_question_is_searched_first_and_the_working_reads_its_passages():
    model = ScriptedModel([WORKING, "Thought: My working is right.\nFinal Answer: 1979"])
    result = Agent(model, [Calculator(), LocalSearch()]).run(JAY)
    searched, working, answer = result.steps
    assert (searched.kind, searched.action, searched.arguments) == (
        StepKind.SEARCHED,
        "local_search",
        {"search_query": JAY},
    )
    assert "born on 18 January 1979" in searched.observation and searched.text == ""
    assert model.calls[0]["messages"] == retrieval_messages(JAY, searched.observation, "en")  # rag's own prompt
    assert working.kind == StepKind.WORKING and answer.final_answer == "1979" and result.answer == "1979"
    second = model.calls[1]["messages"]  # the prompt grows: the working and the check turn after it
    assert second[:1] == model.calls[0]["messages"] and second[1] == {"role": "assistant", "content": WORKING}
    assert second[2]["content"] == build_check_prompt([Calculator(), LocalSearch()], "en", "1979")
    assert Agent(model, [Calculator()]).protocol.search == "tool"  # no search tool: nothing to search first


@pytest.mark.parametrize(
    "question,working,offered",
    [
        ("春节是农历的哪一天？", "春节是农历的正月初一。", "春节是农历的正月初一"),
        (JAY, "The search results say so.\nJay Chou was born in 1979.", "Jay Chou was born in 1979"),
    ],
)
def test_a_grounded_working_without_its_answer_line_offers_its_last_line(question, working, offered):
    """Searched first, a working that answers without "The answer is" (small models, in Chinese most of all)
    has its last line offered as the answer to give, as retrieve-then-answer would read it."""
    model = ScriptedModel([working, "Final Answer: x"])
    tools = [Calculator(), LocalSearch()]
    result = Agent(model, tools).run(question)
    lang = "zh" if "春" in question else "en"
    assert result.steps[1].observation == build_check_prompt(tools, lang, offered)
    unsearched = ScriptedModel([working, "Final Answer: x"])
    result = Agent(unsearched, tools, ReAct(search="tool")).run(question)  # not grounded: no answer read
    assert result.steps[0].observation == build_check_prompt(tools, lang, None)


def test_which_tool_is_searched_first():
    """TinyAgent's search tools (local_search, google_search, the docstore's search) and a tool named by
    `search_tool`; not a tool of your own that happens to be called `search`."""
    from tinyagent.tools.docstore import DocstoreSearch
    from tinyagent.tools.search_tool import find_search_tool

    @tool
    def search(query: str) -> str:
        """Search my notes.

        Args:
            query: what to look for
        """
        return "nothing"

    assert find_search_tool([Calculator(), search]) is None
    assert Agent(ScriptedModel([]), [Calculator(), search]).protocol.search == "tool"
    assert find_search_tool([search], "search") is search  # named: searched with
    docstore = DocstoreSearch.__new__(DocstoreSearch)
    assert find_search_tool([search, docstore]) is docstore
    assert find_search_tool([docstore, LocalSearch()]).name_for_model == "local_search"


@pytest.mark.parametrize(
    "first,follow_up,query",
    [
        (JAY, "What was his first album?", "What was his first album? Jay Chou born"),
        ("周杰伦哪一年出生的？", "他的第一张专辑叫什么？", "他的第一张专辑叫什么？ 周杰伦 年出生"),
        (JAY, "How tall is Mount Everest?", "How tall is Mount Everest?"),  # a new subject: as asked
    ],
)
def test_a_follow_up_is_searched_with_the_names_it_points_back_to(first, follow_up, query):
    agent = Agent(
        ScriptedModel(
            ["1979\nThe answer is 1979.", "Final Answer: 1979", "Jay\nThe answer is Jay.", "Final Answer: Jay"]
        ),
        [LocalSearch()],
    )
    agent.chat(first)
    searched = agent.chat(follow_up).steps[0]
    assert searched.kind == StepKind.SEARCHED and searched.arguments == {"search_query": query}
    if "album" in follow_up or "专辑" in follow_up:
        assert "Jay" in searched.observation.split("\n\n")[0]  # the album's passage, found through the name


def test_the_model_searches_again_with_its_own_query():
    model = ScriptedModel(
        [
            "I am not sure of the album.\nThe answer is Fantasy.",
            'Thought: check the album.\nAction: local_search\nAction Input: {"search_query": "Jay album"}',
            "Thought: The first album was Jay.\nFinal Answer: Jay",
        ]
    )
    result = Agent(model, [LocalSearch()]).run("What was Jay Chou's first album?")
    assert [s.kind for s in result.steps] == ["searched", "working", "action", "final_answer"]
    assert result.steps[2].arguments == {"search_query": "Jay album"} and "Jay (album)" in result.steps[2].observation
    assert result.answer == "Jay"


def test_a_second_search_with_the_questions_own_words_when_the_first_finds_nothing():
    queries = []

    @tool(name="local_search")
    def finder(search_query: str) -> str:
        """Searches the notes.

        Args:
            search_query: the search keywords or question
        """
        queries.append(search_query)
        return (
            "[1] Notes\nThe kettle's warranty lasts two years."
            if "?" not in search_query
            else f"No results for {search_query!r} in the local corpus. Try other keywords."
        )

    model = ScriptedModel(["The warranty lasts two years.\nThe answer is two years.", "Final Answer: two years"])
    result = Agent(model, [finder]).run("How long is the kettle's warranty?")
    assert queries == ["How long is the kettle's warranty?", "long kettle s warranty"]
    assert [s.kind for s in result.steps[:2]] == ["searched", "searched"]
    assert (
        "two years" in model.calls[0]["messages"][0]["content"]
        and "No results" not in model.calls[0]["messages"][0]["content"]
    )


def test_a_search_that_finds_nothing_or_is_refused_says_so_where_the_passages_go():
    model = ScriptedModel(["I do not know.\nThe answer is unknown.", "Final Answer: unknown"])
    agent = Agent(model, [LocalSearch()], approve=lambda request: Verdict.refuse("no searching today"))
    result = agent.run(JAY)
    searched = result.steps[0]
    assert searched.kind == StepKind.SEARCHED and searched.error == "no searching today"
    assert (
        shipped().fill("direct.no_passages", "en", reason="no searching today")
        in model.calls[0]["messages"][0]["content"]
    )


@pytest.mark.parametrize(
    "question,reply,answer",
    [
        (JAY, "Thought: The passages say so.\nFinal Answer: Jay Chou was born in 1979.", "1979"),
        ("周杰伦哪一年出生？", "Thought: 搜索结果里有。\nFinal Answer: 问题的答案是 1979年", "1979年"),
    ],
)
def test_an_answer_from_the_passages_without_the_working_first_and_its_short_form(question, reply, answer):
    model = ScriptedModel([reply])
    result = Agent(model, [LocalSearch()], ReAct(working_first=False)).run(question)
    searched, final = result.steps
    user = model.calls[0]["messages"][-1]["content"]
    lang = "zh" if "周" in question else "en"
    assert user == shipped().fill("react.searched", lang, question=question, passages=searched.observation.strip())
    assert result.answer == answer and final.final_answer == reply.split("Final Answer: ")[1]  # the step keeps it


def test_short_answers():
    assert short_answer("The answer to the question is 1889.") == "1889"
    assert short_answer("So the final answer is: Michael Collins", "Who flew with Armstrong?") == "Michael Collins"
    assert short_answer("周杰伦出生于1979年1月18日。", "周杰伦哪一年出生？") == "1979年"
    assert (
        short_answer("He was born in 1979 and released Jay in 2000.", "Which year was he born?")
        == "He was born in 1979 and released Jay in 2000."
    )  # two years: not one to pick
    assert short_answer("Jay", "What was his first album?") == "Jay"


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_no_placeholder_of_any_prompt_is_an_answer(lang):
    """Each format line of every prompt describes what to write; copied as a Final Answer it is a format error."""
    tools = [Calculator(), LocalSearch()]
    prompts = shipped()
    copied = [
        line.split(": ", 1)[1]
        for name in ("react.system", "check.body", "check.end_none")
        for line in prompts.fill(name, lang, tool_names="calculator, local_search").splitlines()
        if line.startswith(("Action Input: ", "Thought: ", "Final Answer: ", "Action: ", "Question: "))
    ]
    assert len(copied) >= 8
    for text in copied:
        reading = ReAct().read(Reply(f"Final Answer: {text}"), tools, lang, prompts)[0]
        assert reading.kind == StepKind.MALFORMED, text
    assert ReAct().read(Reply("Final Answer: 1979"), tools, lang, prompts)[0].kind == StepKind.FINAL_ANSWER
    working = (
        "答案是 工具的参数，写成 JSON 对象" if lang == "zh" else "The answer is the tool's arguments as a JSON object."
    )
    model = ScriptedModel([working, "Final Answer: 1979"])
    result = Agent(model, [Calculator()]).run("周杰伦哪一年出生？" if lang == "zh" else JAY)
    assert result.steps[0].observation == build_check_prompt([Calculator()], lang, None)  # no answer offered


def test_the_prompt_only_grows_with_the_search_results_in_it(tiny_llama_dir):
    from tinyagent.models import HFChatModel

    real = HFChatModel(str(tiny_llama_dir), dtype="float32", max_batch=1)
    ids: list[list[int]] = []

    class Tokens(ScriptedModel):
        def generate(self, messages, stop=None, **kwargs):
            ids.append(real.encode_prompt(real.render_prompt(messages)))
            return super().generate(messages, stop, **kwargs)

    replies = [
        "I am not sure.\nThe answer is Fantasy.",
        'Thought: check.\nAction: local_search\nAction Input: {"search_query": "Jay album"}',
        "Thought: It was Jay.\nFinal Answer: Jay",
    ]
    result = Agent(Tokens(replies), [LocalSearch()]).run("What was Jay Chou's first album?")
    assert [s.kind for s in result.steps] == ["searched", "working", "action", "final_answer"] and len(ids) == 3
    for before, after in zip(ids, ids[1:]):
        assert after[: len(before)] == before  # each prompt extends the last, token for token
