"""The calculator checks a working's written arithmetic (issue 27): which lines claim a result, which
results are wrong, where a working is set right, and the agent that has the model go on from there."""

from __future__ import annotations

import pytest
from conftest import ScriptedModel

from tinyagent import Agent, ReAct
from tinyagent.agent.react import MAX_CORRECTIONS
from tinyagent.format.direct import direct_messages
from tinyagent.format.prompts import build_check_prompt
from tinyagent.format.templates import shipped
from tinyagent.tools import Calculator, LocalSearch
from tinyagent.tools.arithmetic import claims, corrected, wrong_claims

#: ReAct from the first reply: these tests drive the loop itself (the working first: test_working.py)
CLASSIC = ReAct(working_first=False, search="tool")


def found(text):
    return [(c.expression, c.written, c.right) for c in claims(text)]


@pytest.mark.parametrize(
    "text,expected",
    [
        ("3 + 6 + 9 = 20", [("3 + 6 + 9", "20", False)]),
        ("3 + 6 + 9 = 18", [("3 + 6 + 9", "18", True)]),
        ("\\[ 465 \\times 321 = 1500035 \\]", [("465 * 321", "1500035", False)]),
        ("\\( \\frac{2452012}{13.2} = 180000 \\)", [("(2452012/13.2)", "180000", False)]),
        ("\\[ \\frac{10 + 2}{4} = 3 \\]", [("((10 + 2)/4)", "3", True)]),
        ("It costs $1,200 + $300 = $1,500 in all.", [("1200 + 300", "1500", True)]),
        ("12 x 6 = 72, and 12 × 6 = 72", [("12*6", "72", True), ("12*6", "72", True)]),
        ("2(3 + 4) = 14", [("2*(3 + 4)", "14", True)]),
        (
            "（10 + 6 + 9) * 2 + 17 = 36 + 18 + 17 = 71",  # full-width brackets; a chain of claims
            [("(10 + 6 + 9) * 2 + 17", "36 + 18 + 17", False), ("36 + 18 + 17", "71", True)],
        ),
        ("2 + 3 = 5 * 2 = 10", [("5 * 2", "10", True)]),  # a running total: the next step, not 2 + 3 = 10
        ("- 3 + 5 = 8", [("3 + 5", "8", True)]),  # a list's dash, not a minus
        ("1. 3 + 6 = 9", [("3 + 6", "9", True)]),
        ("**Step 2:** 4 * 5 = 20", [("4 * 5", "20", True)]),
        ("2^10 = 1024", [("2^10", "1024", True)]),
        ("260 / 3 = 86.67", [("260 / 3", "86.67", True)]),  # within a unit of the last digit written
        ("2 / 3 = 0.66", [("2 / 3", "0.66", True)]),
        ("260 / 3 = 86.5", [("260 / 3", "86.5", False)]),
        ("22 / 7 ≈ 3.14 and 22 / 7 \\approx 3.5", [("22 / 7", "3.14", True), ("22 / 7", "3.5", False)]),
        ("10 / 3 ≈ 3 and 100 / 7 ≈ 14.3", [("10 / 3", "3", True), ("100 / 7", "14.3", True)]),  # rounded as written
        ("3 + 4 × 2 = 14", [("3 + 4*2", "14", True)]),  # a running total written in order, as workings mean it
        ("3 + 4 × 2 = 12", [("3 + 4*2", "12", False)]),
        ("3² + 4² = 25", [("3^2 + 4^2", "25", True)]),
        ("2 ** 3 + 1 = 9", [("2 ** 3 + 1", "9", True)]),  # a power, not markdown bold
        ("\\( 2\\frac{1}{2} \\times 4 = 11 \\)", [("(2+1/2) * 4", "11", False)]),  # two and a half
        ("\\( \\frac12 \\times 10 = 5 \\)", [("(1/2) * 10", "5", True)]),
        ("17 / 5 = 3 * 5 = 15, remainder 2", [("3 * 5", "15", True)]),
        ("6 rows × (2 + 1) = 18", []),
        ("20 – 5 + 3 = 18", [("20 - 5 + 3", "18", True)]),
        ("（2）3+4=7", [("3+4", "7", True)]),  # a list's number, not 2 * 3
    ],
)
def test_the_claims_of_a_line(text, expected):
    assert found(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "x = 5",
        "2x + 3 = 11",
        "20% of 50 = 10",
        "He has 5 apples + 3 apples = 8 apples",
        "400 \\text{ m/s} \\times (1 + 0.10) = 400",  # the left side is cut off by a unit
        "(1 + 0.10) = 400 \\text{ m/s} \\times 1.10",  # and the right side
        "18 = 18",
        "The year 1979 = the year of his birth",
        "a - b = c",
        "12:30 + 1 = 13",
        "see (2) 3 = 4",
        # found by review: each was read as a wrong result before
        "3/4 = 75%",
        "\\frac{3}{4} = 75\\%",
        "(120 - 100) / 100 = 20%.",
        "3/4 = 3:4",
        "Half of 24 + 6 = 18",
        "10% of 200 + 200 = 220",
        "He buys 3 packs of 4 + 2 = 14 pens",
        "3 times 4 + 2 = 14",
        "twice 5 + 3 = 13",
        "2 1/2 * 4 = 10",
        "Step 2 (3 + 4) * 2 = 14",
        "**Step 2** (3 + 4) * 2 = 14",
        "②3+4=7",
        "12 345 + 655 = 13 000",
        "√ 16 + 2 = 6",
        "from 1990-2023 = 33 years",
        "10^400 = 5.5",
        "10^400 ≈ 5",
        "2^2000 = 2^2000",
        "1/0 = 5",
        "",
        "= = =",
    ],
)
def test_lines_that_claim_no_result(text):
    assert claims(text) == []


def test_wrong_claims_are_each_named_once_with_the_calculators_value_and_line():
    text = "First 3 + 6 + 9 = 20.\nThen 20 * 2 = 40.\nAgain: 3 + 6 + 9 = 20\n\\frac{1}{3} = 0.5"
    wrong = wrong_claims(text)
    assert [(str(c), c.computed, c.line) for c in wrong] == [("3 + 6 + 9 = 20", "18", 0), ("(1/3) = 0.5", "0.3333", 3)]


@pytest.mark.parametrize(
    "text,start",
    [
        ("Add them:\n\\[\n3 + 6 + 9 = 20\n\\]\nThen", "Add them:\n\\[\n3 + 6 + 9 = 18\n"),
        ("\\[ 465 \\times 321 = 1500035 \\]\nNext", "\\[ 465 \\times 321 = 149265 \\]\n"),  # what closes it is kept
        ("3 + 4 = 8, and twice is 16.", "3 + 4 = 7, "),  # cut after the number, never inside it
        ("cost = \\$ 12 \\times 3 = \\$35 in all", "cost = \\$ 12 \\times 3 = \\$36 "),
        ("a 1,000 + 2,000 = 4,000 dollars", "a 1,000 + 2,000 = 3000 "),
        ("so 2 + 3 = 5 * 2 = 11", "so 2 + 3 = 5 * 2 = 10\n"),  # the second sign of the line
        ("(10 + 6 + 9) * 2 + 17 = 36 + 18 + 17 = 71", "(10 + 6 + 9) * 2 + 17 = 67\n"),
        ("x: 3+4=8", "x: 3+4=7\n"),
        ("9 × 2 = 20元，所以", "9 × 2 = 18元，"),  # a unit written onto the number stays with it
        ("3 + 4 = 8kg of flour", "3 + 4 = 7kg "),
        ("\\( 3 + 4 = 8\\text{ apples} \\)", "\\( 3 + 4 = 7\\text{ apples} \\)\n"),
        ("\\[ (10 + 6 + 9) \\times 2 + 17 = 36 + 18 + 17 = 71 \\]", "\\[ (10 + 6 + 9) \\times 2 + 17 = 67 \\]\n"),
        ("1 / 3000 ≈ 5", "1 / 3000 ≈ 0.0003333\n"),  # small values to 4 digits, not rounded to 0
    ],
)
def test_a_working_is_set_right_at_its_first_wrong_result(text, start):
    assert corrected(text, wrong_claims(text)[0]) == start


# --- the agent: the model goes on from the corrected step --------------------------------------

QUESTION = "Add 3, 6 and 9, double the sum, then add 17. What is the result?"
WRONG = "1. Add 3, 6 and 9:\n3 + 6 + 9 = 20\n2. Double it: 20 * 2 = 40\n3. Add 17: 40 + 17 = 57\nThe answer is 57."
START = "1. Add 3, 6 and 9:\n3 + 6 + 9 = 18\n"
REST = "2. Double it: 18 * 2 = 36\n3. Add 17: 36 + 17 = 53\nThe answer is 53."
ANSWER = "Thought: My working is right.\nFinal Answer: 53"


def test_the_model_goes_on_from_its_first_wrong_result_set_right():
    texts = []
    model = ScriptedModel([WRONG, REST, ANSWER])
    result = Agent(model, tools=[Calculator()], on_text=texts.append, protocol=ReAct(working_first=True)).run(QUESTION)
    assert model.calls[1]["messages"] == [*direct_messages(QUESTION, "en"), {"role": "assistant", "content": START}]
    working = result.steps[0]
    assert working.kind == "working" and working.text == START + REST
    assert working.observation == build_check_prompt([Calculator()], "en", "53")
    note = shipped().fill("check.correction", "en", claim="3 + 6 + 9 = 20", expression="3 + 6 + 9", value="18")
    assert note in working.notes and f"[{note}]\n3 + 6 + 9 = 18\n" in "".join(texts)
    assert model.calls[2]["messages"][-2] == {"role": "assistant", "content": START + REST}
    assert result.answer == "53" and [s.kind for s in result.steps] == ["working", "final_answer"]


def test_the_same_cut_is_not_made_twice_and_a_stop_ends_the_corrections(monkeypatch):
    from tinyagent.tools import arithmetic

    monkeypatch.setattr(arithmetic, "corrected", lambda text, claim: START)  # a cut that does not settle it
    model = ScriptedModel([WRONG, "2. Double it: 18 * 2 = 37\nThe answer is 54.", "Final Answer: 54"])
    result = Agent(model, tools=[Calculator()], protocol=ReAct(working_first=True)).run(
        QUESTION
    )  # 18 * 2 = 37: wrong again
    assert len(model.calls) == 3 and len(result.steps[0].notes) == 1  # one correction, not MAX_CORRECTIONS
    monkeypatch.undo()
    model = ScriptedModel([WRONG, "unused"])
    agent = Agent(model, tools=[Calculator()], protocol=ReAct(working_first=True))
    agent.stop()  # asked before the run: the working is written, no correction follows it
    assert agent.run(QUESTION).stop_reason == "stopped" and len(model.calls) == 1


def test_a_correction_that_fails_keeps_the_working():
    class Failing(ScriptedModel):
        def generate(self, messages, stop=None, **kwargs):
            if self.calls:
                raise RuntimeError("server went away")
            return super().generate(messages, stop, **kwargs)

    result = Agent(Failing([WRONG]), tools=[Calculator()], protocol=ReAct(working_first=True)).run(QUESTION)
    assert [s.kind for s in result.steps] == ["working", "model_error"] and result.steps[0].text == WRONG
    assert result.stop_reason == "model_error" and "server went away" in result.error


def test_a_working_is_set_right_at_most_a_few_times():
    again = "x: 3 + 6 + 9 = 20\nThe answer is 57."
    model = ScriptedModel([again] * (MAX_CORRECTIONS + 1) + ["Final Answer: 57"], usage=(7, 3))
    result = Agent(model, tools=[Calculator()], protocol=ReAct(working_first=True)).run("Add 3, 6 and 9.")
    working = result.steps[0]
    assert (
        len(model.calls) == MAX_CORRECTIONS + 2
        and len([n for n in working.notes if "calculator" in n]) == MAX_CORRECTIONS
    )
    assert (working.prompt_tokens, working.completion_tokens) == (7, 3 * (MAX_CORRECTIONS + 1))  # every call's


def test_only_with_the_calculator_and_the_working_first_unless_asked():
    model = ScriptedModel([WRONG, "Final Answer: 57"])
    result = Agent(model, tools=[LocalSearch()], protocol=ReAct(working_first=True, search="tool")).run(
        QUESTION
    )  # no calc
    assert result.steps[0].text == WRONG and len(model.calls) == 2
    model = ScriptedModel([WRONG, "Final Answer: 57"])
    Agent(model, tools=[Calculator()], protocol=ReAct(working_first=True, check_arithmetic=False)).run(QUESTION)
    assert len(model.calls) == 2
    asked = ReAct(working_first=True, check_arithmetic=True)
    assert Agent(ScriptedModel([]), tools=[LocalSearch()], protocol=asked).protocol.check_arithmetic
    assert not Agent(ScriptedModel([]), tools=[Calculator()], protocol=CLASSIC).protocol.check_arithmetic  # no working
    with pytest.raises(ValueError, match="needs working_first"):
        Agent(ScriptedModel([]), tools=[Calculator()], protocol=ReAct(working_first=False, check_arithmetic=True))


def test_a_right_working_is_not_touched():
    model = ScriptedModel(["3 + 6 + 9 = 18, doubled 36, plus 17: 36 + 17 = 53.\nThe answer is 53.", ANSWER])
    result = Agent(model, tools=[Calculator()], protocol=ReAct(working_first=True)).run(QUESTION)
    assert len(model.calls) == 2 and result.answer == "53" and result.steps[0].notes == []


def test_the_correction_prompts_share_the_working_prompts_tokens_on_a_real_chat_template(tiny_llama_dir):
    from tinyagent.models import HFChatModel

    real = HFChatModel(str(tiny_llama_dir), dtype="float32", max_batch=1)
    ids = []

    class Tokens(ScriptedModel):
        def generate(self, messages, stop=None, **kwargs):
            ids.append(real.encode_prompt(real.render_prompt(messages)))
            return super().generate(messages, stop, **kwargs)

    Agent(Tokens([WRONG, REST, ANSWER]), tools=[Calculator()], protocol=ReAct(working_first=True)).run(QUESTION)
    first, correction, check = ids
    assert correction[: len(first)] == first  # the working's own prompt, then the working up to the cut
    start = real.encode_prompt(
        real.render_prompt([*direct_messages(QUESTION), {"role": "assistant", "content": START}])
    )
    assert correction == start
    assert check[: len(correction)] == correction  # the check turn goes on from the corrected working


def test_the_eval_over_http_with_and_without_the_check(tmp_path, monkeypatch, capsys):
    """A real OpenAI-format server: the working's wrong sum set right and written on from there (the
    correction request holds the working up to the cut), scored against the model alone's same working."""
    import json

    from openai_stub import OpenAIStub

    from tinyagent import eval as ev

    def reply(body):
        sent = json.dumps(body["messages"], ensure_ascii=False)
        if len(body["messages"]) == 1:
            return WRONG
        if "Your working's answer is" in sent:
            return ANSWER.replace("53", "53" if "36 + 17 = 53" in sent else "57")
        assert json.dumps(START)[1:-1] in sent  # the working up to its first wrong result, set right
        return REST

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    suite = tmp_path / "suite.jsonl"
    suite.write_text(json.dumps({"id": "sum", "question": QUESTION, "answer": 53}) + "\n", encoding="utf-8")
    outcome = {}
    with OpenAIStub(replies=reply, honour_stop=True) as server:
        for flag in ("--check-arithmetic", "--no-check-arithmetic"):
            out = tmp_path / flag
            assert (
                ev.main(
                    [
                        "--suite",
                        str(suite),
                        "--model",
                        "stub",
                        "--base-url",
                        server.base_url,
                        "--tools",
                        "calculator",
                        "--protocol",
                        "react",
                        "--out",
                        str(out),
                        flag,
                    ]
                )
                == 0
            )
            agent = json.loads((out / "results.jsonl").read_text().splitlines()[0])
            direct = json.loads((out / "direct.jsonl").read_text().splitlines()[0])
            run = json.loads((out / "summary.json").read_text())["run"]
            outcome[flag] = (agent["success"], direct["success"], run["check_arithmetic"], agent["prediction"])
    capsys.readouterr()
    assert outcome == {
        "--check-arithmetic": (True, False, True, "53"),
        "--no-check-arithmetic": (False, False, False, "57"),
    }
