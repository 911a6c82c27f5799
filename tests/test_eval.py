"""The evaluation harness: scoring rules, suite parsing, reply classification, evaluate, the CLI."""

from __future__ import annotations

import importlib.util
import json
import threading
from pathlib import Path

import pytest
from conftest import ScriptedModel, built_as

from tinyagent import Agent, ReAct, tool
from tinyagent import eval as ev
from tinyagent.eval.scoring import extract_numbers, normalize_text, score
from tinyagent.tools.calculator import Calculator
from tinyagent.tools.tool import ToolError

#: ReAct from the first reply: these tests drive the loop itself (the working first: test_working.py)
CLASSIC = ReAct(working_first=False, search="tool")

ROOT = Path(__file__).resolve().parent.parent


# --- scoring ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "prediction, gold, expected",
    [
        # text: normalised equality
        ("Paris", "paris", True),
        ("The Eiffel Tower.", "eiffel tower", True),
        ("ＰＡＲＩＳ！", "Paris", True),  # full width -> half width
        ("《范特西》", "范特西", True),  # CJK punctuation dropped
        ("an apple", "Apple", True),  # articles dropped
        ("London", "Paris", False),
        # text: the gold as a whole phrase inside the prediction
        ("Jay Chou was born in 1979.", "1979", True),
        ("周杰伦出生于1979年1月18日。", "1979", True),  # CJK text around the phrase
        ("19790", "1979", False),  # glued to digits: not the phrase
        ("a party", "art", False),  # inside a word: not the phrase
        ("England shares borders with Wales and Scotland.", "scotland", True),
        ("It is the keyboard's function keys", "keyboard function keys", False),
        # numbers: the last number, relative tolerance 1e-4
        ("The answer is 1024.", 1024, True),
        ("2**10 = 1,024", 1024, True),  # thousands comma
        ("１０２４", 1024, True),  # full-width digits
        ("答案是72。", 72, True),  # Chinese around the number
        ("18527.42", 18527.424242, True),  # within 1e-4 relative
        ("18525", 18527.424242, False),  # 1.3e-4 relative: too far
        ("12 times 6 is 72", 72, True),  # restated inputs first, result last
        ("72, not 12", 72, False),  # the last number decides
        ("The loss is -3.5 dollars", -3.5, True),
        ("It went from 3-4 degrees", -4, False),  # a hyphen between numbers is no minus
        ("0", 0, True),
        ("0.0000001", 0, False),  # absolute 1e-9 at zero
        ("no number here", 5, False),
        ("−7", -7, True),  # the Unicode minus sign
        # lists: any accepted answer
        ("England borders Wales.", ["Scotland", "Wales"], True),
        ("England borders France.", ["Scotland", "Wales"], False),
        ("It is 53", ["fifty-three", 53], True),
        ("", "x", False),
        (None, 1, False),
    ],
)
def test_score_table(prediction, gold, expected):
    assert score(prediction, gold) is expected


def test_normalize_text_and_extract_numbers():
    assert normalize_text("  The  ＡＢＣ，是《杰伦》！ An Apple ") == "abc 是 杰伦 apple"
    assert extract_numbers("$1,234,567.89 and -2 and 3e2, COVID-19") == [1234567.89, -2.0, 300.0, 19.0]
    assert extract_numbers("1,2,3") == [1.0, 2.0, 3.0]


def test_score_rejects_unusable_gold():
    with pytest.raises(TypeError):
        score("yes", True)
    with pytest.raises(TypeError):
        score("yes", {"a": 1})


# --- suites ----------------------------------------------------------------------------------


def write(tmp_path, text: str, name: str = "suite.jsonl") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_load_suite_keeps_order_types_and_extra_keys(tmp_path):
    path = write(
        tmp_path,
        '{"id": 1, "question": "q1", "answer": 3, "source": "demo"}\n\n'
        '{"id": "b", "question": "q2", "answer": ["x", "y"]}\n',
    )
    items = ev.load_suite(path)
    assert [(i.id, i.question, i.answer) for i in items] == [("1", "q1", 3), ("b", "q2", ["x", "y"])]
    assert items[0].extra == {"source": "demo"}


@pytest.mark.parametrize(
    "text, message",
    [
        ('{"id": "a", "question": "q", "answer": 1}\n{"id": "b", "question": "q"', "suite.jsonl:2: not valid JSON"),
        ('{"id": "a", "question": "q"}\n', "suite.jsonl:1: missing key answer"),
        ('{"question": "q"}\n', "suite.jsonl:1: missing keys id, answer"),
        ('["a", "q", 1]\n', "suite.jsonl:1: each line must be a JSON object"),
        ('{"id": "a", "question": "", "answer": 1}\n', "question must be a non-empty string"),
        ('{"id": "a", "question": "q", "answer": []}\n', "answer must be"),
        ('{"id": "a", "question": "q", "answer": true}\n', "answer must be"),
        ('{"id": "a", "question": "q", "answer": "?!"}\n', "answer must be"),
        ('{"id": null, "question": "q", "answer": 1}\n', "id must be"),
        (
            '{"id": "a", "question": "q", "answer": 1}\n{"id": "a", "question": "r", "answer": 2}\n',
            "suite.jsonl:2: id 'a' is already used on line 1",
        ),
        ("\n\n", "the suite has no questions"),
    ],
)
def test_load_suite_errors_name_file_and_line(tmp_path, text, message):
    with pytest.raises(ev.SuiteError, match="^.*" + message.replace("?", r"\?").replace("[", r"\[")):
        ev.load_suite(write(tmp_path, text))


def test_load_suite_missing_file(tmp_path):
    with pytest.raises(ev.SuiteError, match="no such suite file"):
        ev.load_suite(tmp_path / "nope.jsonl")


@pytest.mark.parametrize("name", ["seed_demos.jsonl", "gsm8k_50.jsonl"])
def test_shipped_suites_load(name):
    items = ev.load_suite(ROOT / "evals" / name)
    assert len(items) == (50 if name.startswith("gsm8k") else len(items))
    assert len(items) >= 10


def test_seed_demo_numeric_answers_are_right():
    """The arithmetic in the seed suite, recomputed here independently."""
    answers = {i.id: i.answer for i in ev.load_suite(ROOT / "evals" / "seed_demos.jsonl")}
    assert answers["outlines-power"] == 2**10
    assert answers["calc-add-double"] == answers["zh-calc-add-double"] == (3 + 6 + 9) * 2 + 17
    assert answers["calc-12x6"] == answers["zh-calc-12x6"] == 12 * 6
    assert abs(answers["adalflow-chain"] - (465 * 321 + 95297) / 13.2) < 1e-5
    assert answers["llamaindex-steps"] == 20 + (2 * 4)
    assert answers["tinyagent-jay-chou-en"] == "1979"


def load_make_gsm8k():
    spec = importlib.util.spec_from_file_location("make_gsm8k", ROOT / "evals" / "make_gsm8k.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    "solution, expected",
    [
        ("He has 3+4=<<3+4=7>>7\n#### 7", 7),
        ("So the profit is $70,000\n#### 70,000", 70000),
        ("#### 1,450,000", 1450000),
        ("#### -3", -3),
        ("#### 2.5", 2.5),
        ("#### $18", 18),
        ("a #### b #### 12", 12),
    ],
)
def test_gsm8k_answer_parsing(solution, expected):
    value = load_make_gsm8k().parse_gsm8k_answer(solution)
    assert value == expected and type(value) is type(expected)


@pytest.mark.parametrize("solution", ["no marker 12", "#### twelve", "#### 1/2"])
def test_gsm8k_answer_parsing_rejects_non_numbers(solution):
    with pytest.raises(ValueError):
        load_make_gsm8k().parse_gsm8k_answer(solution)


def test_make_gsm8k_takes_the_first_n_in_order(tmp_path):
    rows = [{"question": f" Q{i} ", "answer": f"work\n#### {i},000"} for i in range(5)]
    source = write(tmp_path, "\n".join(json.dumps(r) for r in rows) + "\n", "test.jsonl")
    out = tmp_path / "out.jsonl"
    assert load_make_gsm8k().main(["--source", str(source), "--n", "3", "--out", str(out)]) == 0
    items = [json.loads(line) for line in out.read_text().splitlines()]
    assert items == [{"id": f"gsm8k-test-000{i}", "question": f"Q{i}", "answer": i * 1000} for i in range(3)]
    with pytest.raises(ValueError, match="only 5 problems"):
        load_make_gsm8k().main(["--source", str(source), "--n", "9", "--out", str(out)])
    assert load_make_gsm8k().main(["--source", str(source), "--skip", "3", "--n", "2", "--out", str(out)]) == 0
    assert [json.loads(line)["id"] for line in out.read_text().splitlines()] == ["gsm8k-test-0003", "gsm8k-test-0004"]


# --- evaluate with scripted agents ----------------------------------------------------------------


@tool
def weather(city: str) -> str:
    """Look up the weather of a city (always fails: the service is down)."""
    raise ToolError(f"weather service unreachable for {city}")


CALL = 'Thought: compute\nAction: calculator\nAction Input: {"expression": "%s"}'
SCRIPTS = {
    # one right answer after a tool call
    "ok": [CALL % "12*6", "Thought: done\nFinal Answer: 72"],
    # a wrong answer, well formed
    "wrong": ["Thought: easy\nFinal Answer: 71"],
    # an unknown tool, then bad input, then prose with no Final Answer (taken as the answer)
    "format": ["Action: abacus\nAction Input: {}", 'Action: calculator\nAction Input: {"expr": 1}', "I think it is 53"],
    # a tool that fails at run time, then a right answer: a tool error, not a format error
    "toolerr": ['Action: weather\nAction Input: {"city": "Paris"}', "Final Answer: rainy"],
    # an empty reply, a call, the same call again, then the turn cap and a forced answer
    "cap": ["", CALL % "2**10", CALL % "2**10", " 1024"],
}


def scripted_factory(scripts: dict[str, list[str]], usage=(10, 5)):
    """Agents whose model replies by question (the question text is the script's key)."""
    lock = threading.Lock()

    class ByQuestion(ScriptedModel):
        def generate(self, messages, stop=None, **kwargs):
            question = next(m["content"] for m in messages if m["role"] == "user")
            with lock:
                self.replies = scripts[question]
                text = super().generate(messages, stop, **kwargs)
            return text

    model = ByQuestion([], usage=usage)

    def factory():
        # the replies as written, each answer taken as it comes: what is scored is the point here
        return Agent(
            model,
            [Calculator(), weather],
            max_turns=3,
            protocol=ReAct(working_first=False, recheck=False, thought_first=False),
        )

    return factory


def items_for(answers: dict[str, object]) -> list[ev.SuiteItem]:
    return [ev.SuiteItem(id=key, question=key, answer=gold) for key, gold in answers.items()]


GOLD = {"ok": 72, "wrong": 72, "format": 53, "toolerr": "Rainy", "cap": 1024}


@pytest.mark.parametrize("concurrency", [1, 3])
def test_evaluate_classifies_success_format_and_tool_errors(concurrency):
    scripts = {k: list(v) for k, v in SCRIPTS.items()}
    seen = []
    records, summary = ev.evaluate(items_for(GOLD), scripted_factory(scripts), concurrency, seen.append)
    assert [r["id"] for r in records] == list(GOLD)  # suite order, whatever the finishing order
    assert sorted(r["id"] for r in seen) == sorted(GOLD)
    by = {r["id"]: r for r in records}

    assert by["ok"]["success"] and by["ok"]["format_valid"] and by["ok"]["steps"] == 2
    assert by["ok"]["prediction"] == "72" and by["ok"]["tool_errors"] == []
    assert not by["wrong"]["success"] and by["wrong"]["format_valid"] and by["wrong"]["steps"] == 1

    fmt = by["format"]
    assert [e["kind"] for e in fmt["format_errors"]] == ["unknown_tool", "bad_input", "no_action"]
    assert not fmt["format_valid"] and fmt["valid_replies"] == 0 and fmt["stop_reason"] == "no_action"
    assert fmt["success"]  # the prose did contain the right number; format and success are separate

    terr = by["toolerr"]
    assert terr["format_valid"] and terr["success"]
    assert terr["tool_errors"] == [{"step": 0, "tool": "weather", "error": "weather service unreachable for Paris"}]

    cap = by["cap"]
    assert [e["kind"] for e in cap["format_errors"]] == ["empty"]
    assert cap["stop_reason"] == "max_turns" and cap["steps"] == 4 and cap["valid_replies"] == 3
    assert cap["repeated_calls"] == 1 and cap["tool_errors"] == []  # a repeat is neither kind of error
    assert cap["prediction"] == "1024" and cap["success"]

    assert summary["n"] == 5 and summary["n_success"] == 4 and summary["success_rate"] == 0.8
    assert summary["format_valid_rate"] == 0.6  # ok, wrong, toolerr
    assert summary["reply_format_valid_rate"] == round(8 / 12, 4)
    assert summary["tool_error_rate"] == 0.2
    assert summary["mean_steps"] == round((2 + 1 + 3 + 2 + 4) / 5, 3)
    assert summary["n_errors"] == 0
    assert summary["prompt_tokens"] == 10 * 12 and summary["completion_tokens"] == 5 * 12
    assert summary["mean_seconds"] == round(sum(r["seconds"] for r in records) / len(records), 3)
    assert summary["wall_seconds"] >= max(r["seconds"] for r in records) - 0.001  # no question outlasts the run

    trace = by["ok"]["trace"]
    assert trace["steps"][0]["action"] == "calculator" and trace["steps"][0]["observation"] == "72"
    json.dumps(records)  # plain JSON


def test_reply_kind_at_the_turn_cap_with_no_answer():
    model = ScriptedModel([CALL % "1+1", CALL % "1+2", ""])
    result = Agent(model, [Calculator()], max_turns=2, protocol=CLASSIC).run("q")
    assert [s.kind for s in result.steps] == ["action", "action", "no_forced_answer"]
    assert result.stop_reason == "no_forced_answer" and not result.finished


def test_evaluate_records_a_crashed_run_and_redacts_secrets(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-123456")

    class Broken(ScriptedModel):
        def generate(self, messages, stop=None, **kwargs):
            raise ConnectionError("server said no to key sk-secret-123456")

    records, summary = ev.evaluate(items_for({"x": 1, "y": 2}), lambda: Agent(Broken([]), protocol=CLASSIC))
    assert all(r["error"] == "ConnectionError: server said no to key [REDACTED]" for r in records)
    assert not any(r["success"] or r["format_valid"] for r in records)
    assert summary["n_errors"] == 2 and summary["success_rate"] == 0.0
    assert summary["mean_steps"] is None and summary["mean_seconds"] is None
    assert "sk-secret" not in json.dumps(records)


def test_evaluate_interrupt_keeps_finished_records():
    calls = []

    def factory():
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return Agent(ScriptedModel(["Final Answer: 1"]), protocol=CLASSIC)

    with pytest.raises(ev.EvalInterrupted) as stop:
        ev.evaluate(items_for({"a": 1, "b": 2, "c": 3, "d": 4}), factory)
    assert [r["id"] for r in stop.value.records] == ["a", "b"]
    assert stop.value.summary["n"] == 2 and stop.value.summary["interrupted"] is True
    assert stop.value.summary["success_rate"] == 0.5


# --- the command line --------------------------------------------------------------------------


@pytest.fixture
def scripted_config(monkeypatch):
    """build_model returns a scripted model answering by question; no weights are loaded."""
    scripts = {
        "What is 12 times 6?": [CALL % "12*6", "Final Answer: 72"],
        "周杰伦是哪一年出生的？": ["Final Answer: 他出生于1979年。"],
        "Capital of France?": ["Maybe Lyon"],
    }
    model = scripted_factory(scripts)().model
    monkeypatch.setattr("tinyagent.config.build_model", built_as(model))
    return model


def cli_suite(tmp_path) -> Path:
    rows = [
        {"id": "mul", "question": "What is 12 times 6?", "answer": 72},
        {"id": "jay", "question": "周杰伦是哪一年出生的？", "answer": "1979", "source": "TinyAgent"},
        {"id": "fr", "question": "Capital of France?", "answer": "Paris"},
    ]
    return write(tmp_path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


def test_cli_end_to_end(tmp_path, scripted_config, capsys):
    out = tmp_path / "run"
    code = ev.main(
        [
            "--suite",
            str(cli_suite(tmp_path)),
            "--tools",
            "calculator",
            "--max-turns",
            "2",
            "--out",
            str(out),
            "--concurrency",
            "1",
            "--baseline",
            "none",
        ]
    )  # progress in suite order
    printed = capsys.readouterr().out
    assert code == 0
    assert "[1/3] ok   mul  steps=2" in printed and "FAIL fr" in printed and "format-error" in printed
    assert "success" in printed and "66.7% (2/3)" in printed
    records = [json.loads(line) for line in (out / "results.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [r["id"] for r in records] == ["mul", "jay", "fr"]
    assert [r["success"] for r in records] == [True, True, False]
    assert records[1]["source"] == "TinyAgent" and records[1]["prediction"] == "1979年"  # the answer itself
    assert records[1]["trace"]["steps"][-1]["final_answer"] == "他出生于1979年。"  # the sentence, in its step
    whole = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    summary = whole["agent"]
    for key in ("n", "success_rate", "format_valid_rate", "mean_steps", "mean_seconds"):
        assert key in summary
    assert summary["n"] == 3 and summary["success_rate"] == 0.6667 and summary["format_valid_rate"] == 0.6667
    assert whole["direct"] is None and not (out / "direct.jsonl").exists()
    assert whole["run"]["tools"] == ["calculator"] and whole["run"]["concurrency"] == 1


def test_cli_json_limit_and_default_out(tmp_path, scripted_config, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = ev.main(["--suite", str(cli_suite(tmp_path)), "--tools", "", "--limit", "1", "--json", "--baseline", "none"])
    captured = capsys.readouterr()
    assert code == 0
    summary = json.loads(captured.out)
    assert summary["agent"]["n"] == 1 and summary["run"]["tools"] == []
    assert "agent [1/1]" in captured.err
    (folder,) = (tmp_path / "out").iterdir()
    assert folder.name.startswith("eval-suite-") and (folder / "summary.json").is_file()


@pytest.mark.parametrize(
    "text, args, message",
    [
        (None, [], "no such suite file"),
        ('{"id": "a", "question": "q", "answer": 1}\nnot json\n', [], "suite.jsonl:2: not valid JSON"),
        ('{"id": "a", "answer": 1}\n', [], "suite.jsonl:1: missing key question"),
        ('{"id": "a", "question": "q", "answer": 1}\n', ["--tools", "abacus"], "unknown tool 'abacus'"),
        ('{"id": "a", "question": "q", "answer": 1}\n', ["--limit", "0"], "--limit must be at least 1"),
    ],
)
def test_cli_bad_input_is_one_line_exit_2(tmp_path, capsys, text, args, message):
    suite = tmp_path / "suite.jsonl"
    if text is not None:
        suite.write_text(text, encoding="utf-8")
    code = ev.main(["--suite", str(suite), "--out", str(tmp_path / "o"), *args])
    err = capsys.readouterr().err
    assert code == 2 and message in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_cli_interrupt_writes_what_finished(tmp_path, monkeypatch, capsys):
    class InterruptSecond(ScriptedModel):
        def generate(self, messages, stop=None, **kwargs):
            if any("second" in m["content"] for m in messages if m["role"] == "user"):
                raise KeyboardInterrupt
            return "Final Answer: 1"

    monkeypatch.setattr("tinyagent.config.build_model", lambda cfg: InterruptSecond([]))
    suite = write(
        tmp_path, '{"id": "a", "question": "first", "answer": 1}\n{"id": "b", "question": "second", "answer": 2}\n'
    )
    out = tmp_path / "o"
    assert ev.main(["--suite", str(suite), "--tools", "", "--out", str(out)]) == 130
    assert [json.loads(x)["id"] for x in (out / "results.jsonl").read_text().splitlines()] == ["a"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"] is True and summary["direct"] is None  # the baseline never started
    assert summary["agent"]["n"] == 1 and summary["agent"]["interrupted"] and summary["agent"]["success_rate"] == 1.0
    assert "(interrupted)" in capsys.readouterr().out


def test_cli_openai_backend_runs_questions_in_parallel_over_http(tmp_path, capsys, monkeypatch):
    """A real OpenAI-compatible server on 127.0.0.1: run_many threads, one question's server fails."""
    from openai_stub import OpenAIStub

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)

    def question_of(body: dict) -> str:
        return next(m["content"] for m in body["messages"] if m["role"] == "user")

    def reply(body: dict) -> str:
        n = int(question_of(body).split()[-1].rstrip("?"))
        return f"Thought: easy\nFinal Answer: {n * 2}"

    rows = [{"id": f"q{n}", "question": f"What is twice {n}?", "answer": 2 * n} for n in range(8)]
    suite = write(tmp_path, "".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "o"
    with OpenAIStub(
        replies=reply, meet=4, fault_for=lambda b: "500" if "twice 5?" in question_of(b) else None, honour_stop=True
    ) as stub:
        code = ev.main(
            [
                "--suite",
                str(suite),
                "--model",
                "stub-model",
                "--base-url",
                stub.base_url,
                "--tools",
                "calculator",
                "--out",
                str(out),
                "--json",
            ]
        )
        assert stub.max_in_flight == 4  # the default concurrency for a server is 4 (the first 4 met at the stub)
    summary = json.loads(capsys.readouterr().out)
    assert code == 0 and summary["run"]["backend"] == "openai" and summary["run"]["concurrency"] == 4
    records = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert [r["id"] for r in records] == [f"q{n}" for n in range(8)]
    assert [r["success"] for r in records] == [n != 5 for n in range(8)]
    assert "500" in records[5]["error"] and records[5]["trace"]["stop_reason"] == "model_error"
    assert (
        summary["agent"]["n"] == 8 and summary["agent"]["n_errors"] == 1 and summary["agent"]["success_rate"] == 0.875
    )
    direct = [json.loads(x) for x in (out / "direct.jsonl").read_text().splitlines()]  # the baseline, in parallel too
    assert [r["success"] for r in direct] == [n != 5 for n in range(8)] and "500" in direct[5]["error"]
    assert summary["direct"]["n_errors"] == 1 and summary["disagreements"] == []
