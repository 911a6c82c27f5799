"""The eval's retrieve-then-answer baseline (`--baseline rag`, in the default set beside `direct`): the question
itself sent to the run's search tool, its passages in one plain prompt, one model call. Over a real HTTP server
in the OpenAI format and on the shipped corpus; with `compare`, the page, --resume and an MCP search tool."""

from __future__ import annotations

import json
import re
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from conftest import ScriptedModel
from openai_stub import OpenAIStub

import tinyagent
from tinyagent import eval as ev
from tinyagent.agent.baselines import RetrieveThenAnswer
from tinyagent.eval import charts
from tinyagent.eval.command import BaselineError, baseline_modes
from tinyagent.format.templates import shipped
from tinyagent.tools import Calculator, LocalSearch, ToolError, docstore_tools, tool
from tinyagent.tools.corpus import Corpus
from tinyagent.tools.search_tool import find_search_tool, query_argument

HERE = Path(__file__).resolve().parent
# Over the shipped corpus: the model alone does not know Jay Chou's birth year, retrieve-then-answer reads it
# in the passages (in English and Chinese), and only the agent's calculator gets the product right.
ROWS = [
    {"id": "jay", "question": "Which year was Jay Chou born?", "answer": "1979", "needs": "local_search"},
    {"id": "jay-zh", "question": "周杰伦哪一年出生的？", "answer": "1979", "needs": "local_search"},
    {"id": "calc", "question": "What is 123 times 457?", "answer": 56211, "needs": "calculator"},
]
FIRST_LINES = {
    kind: {lang: shipped().text(name, lang).split("\n")[0] for lang in ("en", "zh")}
    for kind, name in (("direct", "direct.question"), ("rag", "direct.retrieval"))
}


def prompt_kind(body: dict) -> tuple[str, str]:
    """("direct" | "rag" | "agent", lang) of a request, by what the server is sent."""
    first = body["messages"][0]
    for kind, lines in FIRST_LINES.items():
        for lang, line in lines.items():
            if first["role"] == "user" and first["content"].startswith(line):
                return kind, lang
    return "agent", "en"


def question_of(content: str) -> str:
    return re.split(r"Question: |问题：", content)[-1]


def reader(body: dict) -> str:
    """A model that reads: from passages it answers the year written beside "born" / "出生"; alone it guesses;
    as an agent it multiplies with the calculator and guesses the year."""
    kind, lang = prompt_kind(body)
    content = body["messages"][0]["content"]
    answer_line = "答案是 {}。" if lang == "zh" else "The answer is {}."
    if kind in ("direct", "rag"):
        question = question_of(content)
        if "123 times 457" in question:
            return "123 * 457 is about 56000.\n" + answer_line.format(56000)
        found = re.search(r"(?:born on \d+ \w+ |(?<!\d)(?=\d{4}年\d+月\d+日出生))(\d{4})", content)
        year = found.group(1) if kind == "rag" and found else "1993"
        return f"Reading it: {year}.\n" + answer_line.format(year)
    if "123 times 457" in json.dumps(body["messages"], ensure_ascii=False):
        observed = "Observation:" in body["messages"][-1]["content"]
        return (
            "Thought: done\nFinal Answer: 56211"
            if observed
            else 'Thought: multiply\nAction: calculator\nAction Input: {"expression": "123*457"}'
        )
    return "Thought: I remember it.\nFinal Answer: 1993"


def write_suite(tmp_path: Path, rows=ROWS) -> Path:
    path = tmp_path / "suite.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture
def stub(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with OpenAIStub(replies=reader, honour_stop=True) as server:
        yield server


def run_eval(tmp_path, stub, out: str, *extra: str, tools: str = "calculator,local_search") -> int:
    return ev.main(
        [
            "--suite",
            str(write_suite(tmp_path)),
            "--model",
            "stub-model",
            "--base-url",
            stub.base_url,
            "--tools",
            tools,
            "--out",
            str(tmp_path / out),
            "--no-working-first",
            *extra,
        ]
    )


def test_retrieve_then_answer_beside_the_agent_and_the_model_alone_over_http(tmp_path, stub, capsys):
    assert run_eval(tmp_path, stub, "run") == 0
    printed = capsys.readouterr().out
    rag = read_jsonl(tmp_path / "run" / "rag.jsonl")
    assert [(r["id"], r["success"], r["prediction"]) for r in rag] == [
        ("jay", True, "1979"),
        ("jay-zh", True, "1979"),
        ("calc", False, "56000"),
    ]
    search, answer = rag[0]["trace"]["steps"]
    assert (search["kind"], search["action"], search["arguments"]) == (
        "action",
        "local_search",
        {"search_query": "Which year was Jay Chou born?"},
    )
    assert search["observation"].startswith("[1] Jay Chou\n") and "18 January 1979" in search["observation"]
    assert answer["kind"] == "final_answer" and answer["text"].endswith("The answer is 1979.")
    assert all(r["steps"] == 2 and r["format_valid"] and not r["tool_errors"] for r in rag)

    rag_calls = [r["body"] for r in stub.requests if prompt_kind(r["body"])[0] == "rag"]
    assert len(rag_calls) == 3 and all(len(b["messages"]) == 1 and "tools" not in b for b in rag_calls)
    zh = next(b["messages"][0]["content"] for b in rag_calls if "周杰伦哪一年" in b["messages"][0]["content"])
    assert zh.startswith(FIRST_LINES["rag"]["zh"]) and "[1] 周杰伦\n" in zh and "1979年1月18日" in zh
    assert zh.endswith("问题：周杰伦哪一年出生的？")  # the passages first, the question last

    summary = json.loads((tmp_path / "run" / "summary.json").read_text(encoding="utf-8"))
    assert [summary[m]["n_success"] for m in ("agent", "direct", "rag")] == [1, 0, 2]
    assert summary["rag"]["mode"] == "rag" and summary["rag"]["mean_steps"] == 2
    assert summary["rag"]["by_need"] == {
        "local_search": {"n": 2, "n_success": 2},
        "calculator": {"n": 1, "n_success": 0},
    }
    assert summary["run"]["modes"] == ["agent", "direct", "rag"] and summary["run"]["search_tool"] == "local_search"
    assert summary["run"]["baseline"] == "direct,rag"
    flips = {f["id"]: [(a["label"], a["success"]) for a in f["answers"]] for f in summary["disagreements"]}
    assert flips["calc"] == [("agent", True), ("direct", False), ("rag", False)]
    assert flips["jay"] == [("agent", False), ("direct", False), ("rag", True)]

    table = printed[printed.index("questions ") :]
    assert re.search(r"^\s+agent\s+direct\s+rag$", printed, re.M)
    assert re.search(r"^success\s+33\.3% \(1/3\)\s+0\.0% \(0/3\)\s+66\.7% \(2/3\)$", table, re.M)
    assert re.search(r"^  questions that need local_search\s+0/2\s+0/2\s+2/2$", table, re.M)
    assert re.search(r"^answer line written \(direct, rag\)\s+-\s+100\.0%\s+100\.0%$", table, re.M)
    assert re.search(r"^searches that failed \(rag\)\s+-\s+-\s+0\.0%$", table, re.M)
    assert "right in one column only: agent 1, direct 0, rag 2" in table
    assert "  jay  agent: FAIL '1993'   direct: FAIL '1993'   rag: ok '1979'   (only rag)" in table
    assert f"rag results: {tmp_path / 'run' / 'rag.jsonl'}" in printed


@pytest.mark.parametrize(
    "spec, agent, search, modes",
    [
        (None, True, ["local_search"], ("agent", "direct", "rag")),
        (None, True, [], ("agent", "direct")),
        ("direct", True, ["local_search"], ("agent", "direct")),
        ("rag", True, ["local_search"], ("agent", "rag")),
        ("rag,direct", False, ["local_search"], ("direct", "rag")),
        (None, False, ["local_search"], ("direct", "rag")),
        ("only", True, ["local_search"], ("direct",)),
        ("none", True, ["local_search"], ("agent",)),
    ],
)
def test_which_modes_a_run_makes(spec, agent, search, modes):
    made, note = baseline_modes(spec, agent, search)
    assert made == modes
    assert (note is not None) == (spec is None and not search)


@pytest.mark.parametrize(
    "spec, agent, message",
    [
        ("rag", True, "--baseline rag needs a search tool"),
        ("agent", True, "agent is not a baseline"),
        ("none", False, "cannot go with --no-agent"),
        (",", True, "nothing is not a baseline"),
    ],
)
def test_a_baseline_that_cannot_run_is_refused(spec, agent, message):
    with pytest.raises(BaselineError, match=re.escape(message)):
        baseline_modes(spec, agent, [])


def test_no_search_tool_leaves_rag_out_of_the_default_and_refuses_it_when_asked(tmp_path, stub, capsys):
    assert run_eval(tmp_path, stub, "calc-only", tools="calculator") == 0
    out = capsys.readouterr().out
    assert "rag (retrieve-then-answer) left out: this run has no search tool" in out
    summary = json.loads((tmp_path / "calc-only" / "summary.json").read_text())
    assert summary["rag"] is None and summary["run"]["modes"] == ["agent", "direct"]
    assert not (tmp_path / "calc-only" / "rag.jsonl").exists()
    assert run_eval(tmp_path, stub, "asked", "--baseline", "rag", tools="calculator") == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --baseline rag needs a search tool") and len(err.strip().splitlines()) == 1


def test_rag_alone_and_resumed(tmp_path, stub, capsys):
    assert run_eval(tmp_path, stub, "r", "--baseline", "rag", "--no-agent", "--limit", "1") == 0
    assert [r["id"] for r in read_jsonl(tmp_path / "r" / "rag.jsonl")] == ["jay"]
    assert not (tmp_path / "r" / "results.jsonl").exists() and not (tmp_path / "r" / "direct.jsonl").exists()
    assert run_eval(tmp_path, stub, "r", "--baseline", "rag", "--no-agent") == 2  # holds results
    assert "--resume" in capsys.readouterr().err
    before = len(stub.requests)
    assert run_eval(tmp_path, stub, "r", "--baseline", "rag", "--no-agent", "--resume") == 0
    assert len(stub.requests) - before == 2  # only the two questions not done
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["rag"]["n"] == 3 and summary["rag"]["resumed_with"] == 1 and summary["agent"] is None
    assert "(1 done before, kept)" in capsys.readouterr().out


class Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.text: list[str] = []

    def handle_data(self, data):
        self.text.append(data)


def test_compare_shows_the_three_columns_and_what_only_one_got_right(tmp_path, stub, capsys):
    assert run_eval(tmp_path, stub, "first") == 0
    assert run_eval(tmp_path, stub, "second", "--baseline", "rag", "--max-turns", "1") == 0
    capsys.readouterr()
    assert ev.main(["compare", str(tmp_path / "first"), str(tmp_path / "second"), "--out", str(tmp_path / "c")]) == 0
    printed = capsys.readouterr().out
    assert printed.splitlines()[0].split() == [
        "first",
        "agent",
        "first",
        "direct",
        "first",
        "rag",
        "second",
        "agent",
        "second",
        "rag",
    ]
    settings = next(line for line in printed.splitlines() if line.startswith("settings"))
    cells = re.split(r"\s{2,}", settings)[1:]
    assert cells[0] == "reference" and "max_turns=1" in cells[3] and cells[4] == "same"  # rag: no turn cap
    assert (
        "right in one column only: first agent 0, first direct 0, first rag 0, second agent 0, second rag 0" in printed
    )
    from matplotlib.image import imread

    pixels = (imread(tmp_path / "c" / "compare.png")[..., :3] * 255).round().astype(int)
    rgb = [int(charts.COLOURS["rag"][i : i + 2], 16) for i in (1, 3, 5)]
    assert (pixels == rgb).all(axis=-1).sum() > 500  # rag's bars are drawn, in their own colour
    page = Page()
    page.feed((tmp_path / "c" / "compare.html").read_text(encoding="utf-8"))
    text = "".join(page.text)
    assert "Observation: [1] Jay Chou" in text  # the rag trace: its search and what it found
    assert "Right in one column only: first agent 0" in text

    assert ev.main(["compare", str(tmp_path / "first"), "--out", str(tmp_path / "c1")]) == 0
    html_page = (tmp_path / "c1" / "compare.html").read_text(encoding="utf-8")
    assert "<small>only rag</small>" in html_page and "<small>only agent</small>" in html_page


# --- on the shipped corpus, and the parts ---------------------------------------------------------


class Reads(ScriptedModel):
    """Answers the year it finds in its prompt, as `reader` does."""

    def generate(self, messages, stop=None, **kwargs):
        self.calls.append({"messages": [dict(m) for m in messages]})
        return reader({"messages": messages})


@pytest.mark.parametrize(
    "question, lang, title",
    [("Which year was Jay Chou born?", "en", "Jay Chou"), ("周杰伦哪一年出生的？", "zh", "周杰伦")],
)
def test_retrieve_then_answer_on_the_local_corpus(question, lang, title):
    model, steps = Reads([]), []
    result = RetrieveThenAnswer(model, LocalSearch(), on_step=steps.append).run(question)
    assert result.answer == "1979" and result.lang == lang and result.stop_reason == "final_answer"
    assert [s.kind for s in result.steps] == ["action", "final_answer"] and steps == result.steps
    assert [s.index for s in result.steps] == [0, 1]
    prompt = model.calls[0]["messages"][0]["content"]
    assert prompt.startswith(FIRST_LINES["rag"][lang]) and f"[1] {title}\n" in prompt
    assert result.steps[0].observation in prompt and result.steps[0].tool_seconds > 0


def test_a_failed_search_still_gets_an_answer_and_counts_as_a_failed_search(tmp_path, monkeypatch, capsys):
    @tool(name="local_search")
    def broken(search_query: str) -> str:
        """Always fails."""
        raise ToolError("the index is offline")

    monkeypatch.setattr(tinyagent.config, "build_model", lambda cfg: Reads([]))
    monkeypatch.setattr(tinyagent.config, "build_tools", lambda cfg: [broken])
    suite = write_suite(tmp_path, ROWS[:1])
    assert (
        ev.main(
            [
                "--suite",
                str(suite),
                "--tools",
                "local_search",
                "--baseline",
                "rag",
                "--no-agent",
                "--out",
                str(tmp_path / "o"),
            ]
        )
        == 0
    )
    record = read_jsonl(tmp_path / "o" / "rag.jsonl")[0]
    search = record["trace"]["steps"][0]
    assert search["kind"] == "tool_error" and search["error"] == "the index is offline"
    assert search["observation"] == "(the search found nothing: the index is offline)"
    assert record["prediction"] == "1993" and record["tool_errors"] == [
        {"step": 0, "tool": "local_search", "error": "the index is offline"}
    ]
    assert re.search(r"^searches that failed \(rag\)\s+100\.0%$", capsys.readouterr().out, re.M)


def test_a_model_that_fails_ends_the_run_after_its_search():
    class Fails(ScriptedModel):
        def generate(self, messages, stop=None, **kwargs):
            raise ConnectionError("server gone")

    result = RetrieveThenAnswer(Fails([]), LocalSearch()).run("Which year was Jay Chou born?")
    assert [s.kind for s in result.steps] == ["action", "model_error"] and result.steps[1].index == 1
    assert result.stop_reason == "model_error" and "server gone" in result.error


def test_long_passages_are_cut_and_control_tokens_broken():
    corpus = Corpus.load(None)

    @tool(name="local_search")
    def noisy(search_query: str) -> str:
        """Returns a long passage with a chat control token in it."""
        return "Jay Chou was born in 1979. <|im_end|>" + "x" * 500

    model = Reads([])
    result = RetrieveThenAnswer(model, noisy, max_passage_chars=100).run("Which year was Jay Chou born?")
    shown = result.steps[0].observation
    assert "<|im_end|>" not in shown and "<\u200b|im_end|>" in shown and "more characters cut" in shown
    assert result.steps[0].raw_observation.endswith("x" * 500) and len(shown) < 200
    assert corpus.documents  # the shipped corpus is untouched


def test_which_tool_is_the_search_tool_and_its_query_argument():
    local, calc = LocalSearch(), Calculator()
    search, lookup = docstore_tools()
    assert find_search_tool([calc, local]) is local and find_search_tool([calc]) is None
    assert find_search_tool([calc, search, lookup]) is search and query_argument(search) == "entity"
    assert find_search_tool([local, calc], "calculator") is calc and find_search_tool([local], "nope") is None
    assert query_argument(local) == "search_query"


def test_an_mcp_tool_marked_as_the_search_tool(tmp_path, stub, capsys):
    pytest.importorskip("mcp")
    config = tmp_path / "c.yaml"
    config.write_text(
        json.dumps(
            {
                "agent": {
                    "tools": ["calculator"],
                    "search_tool": "echo",
                    "mcp_servers": [
                        {"command": sys.executable, "args": [str(HERE / "mcp_echo_server.py")], "tools": ["echo"]}
                    ],
                }
            }
        )
    )
    args = [
        "--config",
        str(config),
        "--suite",
        str(write_suite(tmp_path, ROWS[:1])),
        "--model",
        "stub-model",
        "--base-url",
        stub.base_url,
        "--baseline",
        "rag",
        "--no-agent",
        "--out",
        str(tmp_path / "o"),
    ]
    assert ev.main(args) == 0
    record = read_jsonl(tmp_path / "o" / "rag.jsonl")[0]
    search = record["trace"]["steps"][0]
    assert search["action"] == "echo" and search["arguments"] == {"text": "Which year was Jay Chou born?"}
    assert search["observation"] == "Which year was Jay Chou born?"
    assert json.loads((tmp_path / "o" / "summary.json").read_text())["run"]["search_tool"] == "echo"
    config.write_text(json.dumps({"agent": {"tools": ["calculator"], "search_tool": "nope"}}))
    assert ev.main(args[:-1] + [str(tmp_path / "o2")]) == 2
    assert "agent.search_tool: no tool named 'nope'; tools: calculator" in capsys.readouterr().err
