"""The agent keeps the model's own reasoning (issue 27): a long or unlabelled working is one step, a
direct answer is a valid first step, an answer right after a failed call is sent back once, a reply
that only reasons is asked its answer in the same step, and the prompt of a run still only grows."""

from __future__ import annotations

import pytest
from conftest import ScriptedModel

from tinyagent import Agent, BaseModel, ReAct, Tools, tool
from tinyagent.agent.baselines import DirectAnswer
from tinyagent.config import ConfigError, load_config
from tinyagent.config.build import build_protocol
from tinyagent.eval.scoring import VALID_KINDS
from tinyagent.format.direct import direct_messages, working_answer
from tinyagent.format.examples import examples_for
from tinyagent.format.prompts import ANSWER_LEAD, THOUGHT_LEAD, build_check_prompt, build_system_prompt
from tinyagent.format.reading import read_step
from tinyagent.format.templates import shipped
from tinyagent.tools import Calculator

#: ReAct from the first reply: these tests drive the loop itself (the working first is tested below)
CLASSIC = ReAct(working_first=False, search="tool")
FORCE_FINAL, RECHECK = (
    {lang: shipped().text(name, lang) for lang in ("en", "zh")} for name in ("react.force_final", "react.recheck")
)

CALC = 'Action: calculator\nAction Input: {"expression": "3 * 4 + 1"}'
WORKING = "Thought: Ann has 3 bags of 4 apples, so 3 * 4 = 12.\nShe finds 1 more: 12 + 1 = 13.\nI will check it."


def raw(replies, max_turns: int = 5, **settings):
    """An agent over replies taken as written (no `Thought:` lead), and its model; `settings` are ReAct's."""
    model = ScriptedModel(replies)
    protocol = ReAct(working_first=False, thought_first=False, **settings)
    return Agent(model, tools=[Calculator()], protocol=protocol, max_turns=max_turns), model


def test_a_long_multi_line_thought_is_one_step_and_its_call_runs():
    agent, model = raw([WORKING + "\n" + CALC, "Thought: it is 13\nFinal Answer: 13"])
    result = agent.run("How many apples?")
    first = result.steps[0]
    assert first.kind == "action" and first.observation == "13" and first.arguments == {"expression": "3 * 4 + 1"}
    assert first.thought == WORKING[len("Thought: ") :]  # all three lines, as one thought
    assert result.answer == "13" and len(model.calls) == 2


def test_working_before_the_first_label_is_the_steps_thought():
    working = "First, 3 bags of 4 apples: 3 * 4 = 12.\nThen one more: 13."
    agent, _ = raw([working + "\n" + CALC, "Final Answer: 13"])
    first = agent.run("How many apples?").steps[0]
    assert first.kind == "action" and first.thought == working and first.observation == "13"


def test_a_direct_answer_is_a_valid_first_step_and_calls_no_tool():
    ran = []

    @tool
    def lookup(query: str) -> str:
        """Look something up."""
        ran.append(query)
        return "?"

    model = ScriptedModel(["Thought: 2 + 2 is 4; no tool is needed.\nFinal Answer: 4"])
    result = Agent(model, tools=[lookup], protocol=ReAct(working_first=False, thought_first=False)).run(
        "What is 2 + 2?"
    )
    assert [s.kind for s in result.steps] == ["final_answer"] and result.steps[0].kind in VALID_KINDS
    assert result.answer == "4" and result.stop_reason == "final_answer" and ran == [] and len(model.calls) == 1


def test_an_answer_right_after_a_failed_call_is_sent_back_once_to_be_checked():
    wrong = 'Action: weather\nAction Input: {"city": "Paris"}'
    agent, model = raw([wrong, "Final Answer: 12", wrong, "Thought: 3 * 4 + 1 = 13\nFinal Answer: 13"])
    result = agent.run("How many apples?")
    assert [s.kind for s in result.steps] == ["unknown_tool", "recheck", "unknown_tool", "final_answer"]
    assert result.steps[1].final_answer is None and result.steps[1].observation == RECHECK["en"]
    assert result.steps[1].kind in VALID_KINDS  # the reply followed the format; it was only sent back
    sent = model.calls[2]["messages"][-1]["content"]  # the third call sees its answer and the request
    assert sent.endswith("Final Answer: 12\nObservation: " + RECHECK["en"] + "\n")
    assert result.answer == "13" and result.finished  # only once: the second answer after a failure stands


def test_the_recheck_is_skipped_on_the_last_turn_and_when_turned_off():
    wrong = 'Action: weather\nAction Input: {"city": "Paris"}'
    agent, _ = raw([wrong, "Final Answer: 12"], max_turns=2)
    assert [s.kind for s in agent.run("?").steps] == ["unknown_tool", "final_answer"]
    agent, _ = raw([wrong, "Final Answer: 12"], recheck=False)
    assert [s.kind for s in agent.run("?").steps] == ["unknown_tool", "final_answer"]
    agent, _ = raw([CALC, "Final Answer: 13"])  # a call that worked: its answer is taken at once
    assert [s.kind for s in agent.run("?").steps] == ["action", "final_answer"]


def test_the_turn_caps_answer_is_asked_from_the_whole_working():
    agent, model = raw([WORKING + "\n" + CALC, " 13"], max_turns=1)
    result = agent.run("How many apples?")
    forced = model.calls[-1]["messages"][-1]["content"]
    assert forced.endswith("Observation: 13\n" + FORCE_FINAL["en"]) and WORKING in forced
    assert result.answer == "13" and result.stop_reason == "max_turns"
    for lang, words in (
        ("en", ("all my working", "every observation", "whole question")),
        ("zh", ("全部的解题过程", "每一个 Observation", "整个问题")),
    ):
        assert all(w in FORCE_FINAL[lang] for w in words) and FORCE_FINAL[lang].endswith("Final Answer:")


def test_two_repeated_calls_in_a_row_ask_for_the_answer_at_once():
    agent, model = raw([CALC, CALC, CALC, " 13"], max_turns=6)
    result = agent.run("?")
    assert [s.kind for s in result.steps] == ["action", "repeated_call", "repeated_call", "forced_answer"]
    assert len(model.calls) == 4 and result.answer == "13"


# --- the Thought: lead -------------------------------------------------------------------------


class Continuing(BaseModel):
    """Replies that continue the prompt as written (no adaptation to the lead), and every call seen."""

    def __init__(self, replies):
        self.replies, self.calls = list(replies), []

    def generate(self, messages, stop=None, **kwargs):
        self.calls.append([dict(m) for m in messages])
        return self.replies.pop(0)


def test_each_reply_is_begun_with_thought_so_the_model_reasons_first():
    model = Continuing([" 3 * 4 = 12, plus 1 is 13. I will check.\n" + CALC, " It checks out.\nFinal Answer: 13"])
    result = Agent(model, tools=[Calculator()], protocol=ReAct(working_first=False, thought_first=True)).run(
        "How many apples?"
    )
    assert model.calls[0][-1] == {"role": "assistant", "content": THOUGHT_LEAD}
    assert result.steps[0].text.startswith("Thought: 3 * 4 = 12") and result.steps[0].kind == "action"
    assert model.calls[1][-1]["content"].endswith("Observation: 13\n" + THOUGHT_LEAD)
    assert result.answer == "13" and result.steps[1].thought == "It checks out."


def test_a_reply_that_only_reasons_is_asked_its_answer_in_the_same_step():
    streamed = []
    model = Continuing([" 3 * 4 = 12 and 12 + 1 = 13.\nSo Ann has 13 apples.", " 13"])
    result = Agent(
        model, tools=[Calculator()], on_text=streamed.append, protocol=ReAct(working_first=False, thought_first=True)
    ).run("How many apples?")
    (step,) = result.steps
    assert step.kind == "answer_asked" and step.kind not in VALID_KINDS  # scored as a format slip
    assert result.answer == "13" and result.stop_reason == "final_answer" and result.finished
    asked = model.calls[1][-1]["content"]
    assert asked == "Thought: 3 * 4 = 12 and 12 + 1 = 13.\nSo Ann has 13 apples." + ANSWER_LEAD
    assert step.text == asked + " 13" and result.generate_calls == 2
    assert "".join(streamed).startswith(THOUGHT_LEAD) and ANSWER_LEAD in "".join(streamed)


def test_no_lead_when_constrained_or_in_the_tools_protocol():
    assert Agent(ScriptedModel([]), tools=[Calculator()], protocol="tools").protocol.lead == ""
    with pytest.raises(TypeError):
        Tools(thought_first=True)  # a ReAct setting cannot be given to the tools protocol
    led = ReAct(thought_first=True)
    assert Agent(ScriptedModel([]), tools=[Calculator()], protocol=led).protocol.lead == THOUGHT_LEAD
    assert ReAct(thought_first=True, constrained=True).lead == ""
    model = ScriptedModel(["Final Answer: 4"])  # off by default: measured, the lead cost right answers
    Agent(model, tools=[Calculator()], protocol=CLASSIC).run("2 + 2?")
    assert model.calls[0]["messages"][-1]["role"] == "user"


@pytest.mark.parametrize(
    "question",
    ["Ann has 3 bags of 4 apples and finds one more. How many?", "小明有3袋苹果，每袋4个，又捡到1个。一共有几个？"],
)
def test_the_prompt_only_grows_on_a_real_chat_template(tiny_llama_dir, question):
    wrong = '\nAction: weather\nAction Input: {"city": "x"}'
    replies = [" 3 * 4 = 12." + wrong, "\nFinal Answer: 12", " 3 * 4 + 1 = 13\n" + CALC, " done.", " 13"]
    result = run_on_real_template(
        tiny_llama_dir, replies, question, ReAct(working_first=False, thought_first=True), max_turns=4
    )
    assert [s.kind for s in result.steps] == ["unknown_tool", "recheck", "action", "answer_asked"]


def run_on_real_template(tiny_llama_dir, replies, question, protocol: ReAct, **agent_kwargs):
    """An agent's run over `replies` (taken as written), with each prompt rendered by the tiny Llama's real
    chat template and checked to extend the last one token for token; the run's result."""
    from tinyagent.models import HFChatModel

    real = HFChatModel(str(tiny_llama_dir), dtype="float32", max_batch=1)
    ids: list[list[int]] = []

    class Tokens(Continuing):
        def generate(self, messages, stop=None, **kwargs):
            ids.append(real.encode_prompt(real.render_prompt(messages)))
            return super().generate(messages, stop, **kwargs)

    result = Agent(Tokens(replies), [Calculator()], protocol, **agent_kwargs).run(question)
    assert len(ids) == len(replies)
    for before, after in zip(ids, ids[1:]):
        assert after[: len(before)] == before  # each prompt extends the last, token for token
    return result


# --- the prompts, in full ------------------------------------------------------------------------

MUST_SAY = {
    "en": [
        "You have access to these tools:",
        "calculator: Call this tool",
        "Question:",
        "Thought:",
        "on as many lines as you need",
        "Action: the tool to call, exactly one of [calculator]",
        "Action Input:",
        "Observation:",
        "Final Answer:",
        "check a step of your working",
        "not the whole question",
        "never write an Observation yourself",
        "write your working as the Thought and then the Final Answer directly",
        "Begin!",
    ],
    "zh": [
        "你可以使用以下工具：",
        "calculator: 调用此工具",
        "Question:",
        "Thought:",
        "需要几行就写几行",
        "Action: 要调用的工具，必须是 [calculator] 之一",
        "Action Input:",
        "Observation:",
        "Final Answer:",
        "核对解题中的某一步",
        "而不是整个问题",
        "不要自己编写 Observation",
        "把解题过程写在 Thought 中，然后直接给出 Final Answer",
        "开始！",
    ],
}


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_react_prompt_says_what_it_must_in_each_language(lang):
    prompt = build_system_prompt([Calculator()], lang)
    missing = [words for words in MUST_SAY[lang] if words not in prompt]
    assert not missing, missing
    labels = [
        prompt.index(f"\n{label}:")
        for label in ("Question", "Thought", "Action", "Action Input", "Observation", "Final Answer")
    ]
    assert labels == sorted(labels)  # the format's lines in the order a run writes them
    assert prompt.endswith(MUST_SAY[lang][-1]) and "RECHECK" not in prompt
    assert RECHECK[lang] and ("Thought" in RECHECK[lang] and "Final Answer" in RECHECK[lang])


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_multi_step_examples_check_each_step_with_the_tool(lang):
    shown = examples_for(["calculator"], lang)
    multi = [e for e in shown if len(e["steps"]) > 1 or "\n" in e["steps"][0]["thought"]]
    assert len(multi) == 2  # one long working checked at once, one question worked in two calls
    for example in multi:
        for step in example["steps"]:
            assert str(Calculator()(**step["action_input"])) == step["observation"]
    assert "\n" in multi[0]["steps"][0]["thought"] and len(multi[1]["steps"]) == 2


# --- what the reader makes of copied placeholders ---------------------------------------------------


@pytest.mark.parametrize(
    "reply,kind,action,arguments",
    [
        (
            'Thought: x\nAction: {"expression": "1/4 + 1/2"}\nAction Input: {"expression": "..."}',
            "action",
            "calculator",
            {"expression": "1/4 + 1/2"},
        ),
        ('Thought: x\nAction: {"expression": "2 + 2"}', "action", "calculator", {"expression": "2 + 2"}),
        (
            'Thought: x\nAction: {"expression": "2 + 2"}\nAction Input: {"expression": "3 * 3"}',
            "action",
            "calculator",
            {"expression": "3 * 3"},
        ),
        ('Action: {"city": "Paris"}\nAction Input: {"city": "Paris"}', "unknown_tool", None, None),
        ('Action: calculator\nAction Input: {"expression": "..."}', "bad_input", "calculator", None),
        ("Thought: I now know the final answer\nFinal Answer: <the answer>", "malformed", None, None),
        ("Final Answer: <your answer>", "malformed", None, None),
        ("Final Answer: 42 apples", "final_answer", None, None),
        # a phrase of the format copied onto the Action line: the tool whose parameters the input has
        (
            'Thought: x\nAction: the tool\'s name\nAction Input: {"expression": "2 + 2"}',
            "action",
            "calculator",
            {"expression": "2 + 2"},
        ),
        ('Action: weather\nAction Input: {"expression": "2 + 2"}', "unknown_tool", None, None),  # a name stays one
    ],
)
def test_the_arguments_on_the_action_line_and_copied_placeholders(reply, kind, action, arguments):
    reading = read_step(reply, [Calculator()])
    assert reading.kind == kind
    if kind in ("action", "bad_input"):
        assert reading.action == action
    if arguments is not None:
        assert reading.arguments == arguments
    if kind == "malformed":
        assert "placeholder" in reading.error


def test_an_answer_that_only_repeats_the_last_result_is_sent_back_with_recheck_results():
    first = 'Thought: 3 bags of 4\nAction: calculator\nAction Input: {"expression": "3 * 4"}'
    agent, model = raw([first, "Final Answer: 12", CALC, "Final Answer: 13"], recheck="results")
    result = agent.run("Ann has 3 bags of 4 apples and finds one more. How many?")
    assert [s.kind for s in result.steps] == ["action", "recheck", "action", "final_answer"]
    assert (
        result.steps[1].observation == shipped().fill("react.recheck_result", "en", result="12")
        and result.answer == "13"
    )
    agent, _ = raw([first, "Final Answer: 12"])  # the default checks only answers after a failed call
    assert [s.kind for s in agent.run("?").steps] == ["action", "final_answer"]
    agent, _ = raw([first, "Final Answer: about a dozen"], recheck="results")  # not the result: taken
    assert [s.kind for s in agent.run("?").steps] == ["action", "final_answer"]
    with pytest.raises(ValueError, match="recheck must be one of off, failed, results"):
        Agent(ScriptedModel([]), protocol=ReAct(working_first=False, recheck="always"))


def test_a_thought_only_reply_is_asked_its_answer_without_the_lead_too():
    agent, model = raw(["Thought: 3 * 4 = 12 and one more is 13.", " 13"])
    result = agent.run("How many apples?")
    assert [s.kind for s in result.steps] == ["answer_asked"] and result.answer == "13"
    assert model.calls[1]["messages"][-1]["content"] == "Thought: 3 * 4 = 12 and one more is 13." + ANSWER_LEAD
    agent, _ = raw(["Thought: 3 * 4 = 12 and one more is 13.", "Final Answer: 13"], ask_answer=False)
    assert [s.kind for s in agent.run("?").steps] == ["malformed", "final_answer"]  # an error turn instead
    agent, model = raw(["你好！有什么可以帮你的吗？"])  # no labels at all: chit-chat, the answer as it is
    assert agent.run("你好").stop_reason == "no_action" and len(model.calls) == 1


# --- the model's own working first (`working_first`) ----------------------------------------------

QUESTION = "Ann has 3 bags of 4 apples and finds one more. How many apples does she have?"
ALONE = "3 bags of 4 apples is 3 * 4 = 12.\nWith one more: 12 + 1 = 13.\nThe answer is 13."


def test_working_first_asks_the_question_as_the_model_alone_then_offers_the_tools():
    model = ScriptedModel([ALONE, "Thought: My working is right.\nFinal Answer: 13"])
    result = Agent(model, tools=[Calculator()], protocol=ReAct(working_first=True)).run(QUESTION)
    alone = ScriptedModel([ALONE])
    DirectAnswer(alone).run(QUESTION)
    assert model.calls[0]["messages"] == alone.calls[0]["messages"] == direct_messages(QUESTION, "en")
    check = build_check_prompt([Calculator()], "en", "13")
    assert model.calls[1]["messages"] == [
        *direct_messages(QUESTION, "en"),
        {"role": "assistant", "content": ALONE},
        {"role": "user", "content": check},
    ]
    assert [s.kind for s in result.steps] == ["working", "final_answer"] and result.answer == "13"
    assert result.steps[0].kind in VALID_KINDS and result.steps[0].observation == check
    assert result.stop_reason == "final_answer" and result.generate_calls == 2


def test_a_check_after_the_working_runs_its_call_and_its_answer_is_the_runs():
    model = ScriptedModel([ALONE, "Thought: I check 3 * 4 + 1\n" + CALC, "Thought: 13 agrees.\nFinal Answer: 13"])
    result = Agent(model, tools=[Calculator()], protocol=ReAct(working_first=True)).run(QUESTION)
    assert [s.kind for s in result.steps] == ["working", "action", "final_answer"]
    assert result.steps[1].observation == "13" and result.answer == "13"
    last = model.calls[2]["messages"]
    assert last[:3] == model.calls[1]["messages"] and last[3]["role"] == "assistant"
    assert last[3]["content"].startswith("Thought: I check 3 * 4 + 1\nAction: calculator")
    assert "Observation: 13" in last[3]["content"]


def test_the_check_and_the_turn_cap_come_after_the_working():
    loop = "Thought: again\n" + 'Action: calculator\nAction Input: {"expression": "1 + %d"}'
    model = ScriptedModel([ALONE, *[loop % i for i in range(2)], "13"])
    result = Agent(model, tools=[Calculator()], max_turns=2, protocol=ReAct(working_first=True)).run(QUESTION)
    assert [s.kind for s in result.steps] == ["working", "action", "action", "forced_answer"]  # two turns after it
    assert result.answer == "13" and result.stop_reason == "max_turns"
    assert model.calls[-1]["messages"][-1]["content"].endswith(FORCE_FINAL["en"])


@pytest.mark.parametrize("lang,question", [("en", QUESTION), ("zh", "小明有3袋苹果，每袋4个，又捡到1个。一共有几个？")])
def test_a_working_without_an_answer_line_is_asked_to_be_checked(lang, question):
    model = ScriptedModel(["3 * 4 = 12, then 12 + 1.", "Final Answer: 13"])
    result = Agent(model, tools=[Calculator()], protocol=ReAct(working_first=True)).run(question)
    check = model.calls[1]["messages"][-1]["content"]
    assert check == build_check_prompt([Calculator()], lang, None) == result.steps[0].observation
    assert model.calls[0]["messages"] == direct_messages(question, lang)


def test_working_first_keeps_the_conversation_and_is_refused_with_the_tools_protocol():
    model = ScriptedModel([ALONE, "Final Answer: 13", "The answer is 14.", "Final Answer: 14"])
    agent = Agent(model, tools=[Calculator()], protocol=ReAct(working_first=True))
    agent.chat(QUESTION)
    agent.chat("And with one more?")
    assert model.calls[2]["messages"] == [
        {"role": "user", "content": QUESTION},
        {"role": "assistant", "content": "13"},
        *direct_messages("And with one more?", "en"),
    ]
    with pytest.raises(TypeError):
        Tools(working_first=True)  # the working first is ReAct's: it cannot be written for the tools protocol
    with pytest.raises(ConfigError, match="agent.working_first: a setting of another protocol than tools"):
        build_protocol(
            load_config(overrides={"agent.protocol": "tools", "agent.working_first": True}), ScriptedModel([])
        )


def test_the_working_is_decoded_free_when_the_steps_are_constrained():
    pytest.importorskip("outlines")
    model = ScriptedModel([ALONE, "Thought: My working is right.\nFinal Answer: 13"])
    Agent(model, tools=[Calculator()], protocol=ReAct(working_first=True, constrained=True)).run(QUESTION)
    assert "constraint" not in model.calls[0]["kwargs"] and "constraint" in model.calls[1]["kwargs"]


CHECK_MUST_SAY = {
    "en": [
        "Your working's answer is 13.",
        "check a step of your working, or a fact it uses",
        'calculator: Evaluates an arithmetic expression',
        'Action Input: {"expression": "..."}',
        "wait for the Observation",
        "Thought: the step I check",
        "Action: one of [calculator]",
        "Action Input: the tool's arguments",
        "Thought: My working is right.",
        "Final Answer: 13",
    ],
    "zh": [
        "你的解题过程得出的答案是 13。",
        "核对解题中的某一步，或它用到的某个事实",
        "calculator: 精确计算",
        'Action Input: {"expression": "..."}',
        "等待 Observation",
        "Thought: 我要核对的那一步",
        "Action: [calculator] 之一",
        "Action Input: 工具的参数",
        "Thought: 我的解题过程是对的。",
        "Final Answer: 13",
    ],
}


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_check_prompt_says_what_it_must_in_each_language(lang):
    prompt = build_check_prompt([Calculator()], lang, "13")
    missing = [words for words in CHECK_MUST_SAY[lang] if words not in prompt]
    assert not missing, missing
    order = [prompt.index(words) for words in CHECK_MUST_SAY[lang][-5:]]
    assert order == sorted(order) and prompt.endswith("Final Answer: 13")  # the answer's lines last
    assert "2**10" not in prompt and "(3+6+9)" not in prompt  # no schema examples for a small model to copy
    none = build_check_prompt([Calculator()], lang, None)
    assert "13" not in none and none.count("Final Answer:") == 1 and "Action: " in none


@pytest.mark.parametrize(
    "reply,answer",
    [
        ("so 12 + 1 = 13.\nThe answer is 13.", "13"),
        ("Therefore she has \\boxed{13} apples.", "13"),
        ("half of it: \\(\\boxed{\\frac{1}{2}}\\)", "\\frac{1}{2}"),
        ("first \\boxed{12}, then \\boxed{13}", "13"),
        ("The answer is 12.\nso \\boxed{13}", "12"),  # an answer line, written as asked, comes first
        ("3 * 4 = 12, then 12 + 1.", None),
        ("\\boxed{}", None),
        ("The answer is \\boxed{1024}.", "1024"),  # as people read it: no LaTeX around it
        ("Therefore, the answer is \\(\\boxed{28}\\).", "28"),
        ("The answer is \\boxed{18} liters.", "18 liters"),
        ("Therefore, the answer is X = 1994.", "1994"),  # the prompt's placeholder copied
        ("The answer is X: Apple Remote.", "Apple Remote"),
        ("The answer is $200.", "$200"),  # a currency sign stays
        ("The answer is $\\boxed{18}$.", "18"),
    ],
)
def test_the_answer_a_working_ends_on(reply, answer):
    assert working_answer(reply) == answer


@pytest.mark.parametrize(
    "question",
    ["Ann has 3 bags of 4 apples and finds one more. How many?", "小明有3袋苹果，每袋4个，又捡到1个。一共有几个？"],
)
def test_working_first_prompts_only_grow_on_a_real_chat_template(tiny_llama_dir, question):
    replies = [
        "3 * 4 = 12 and 12 + 1 = 13.\nThe answer is 13.",
        "Thought: check it\n" + CALC,
        "Thought: it is 13\nFinal Answer: 13",
    ]
    result = run_on_real_template(tiny_llama_dir, replies, question, ReAct(working_first=True))
    assert [s.kind for s in result.steps] == ["working", "action", "final_answer"]


def test_people_see_the_working_but_not_the_request_to_check_it():
    from tinyagent.format.observations import observation_line

    model = ScriptedModel([ALONE, "Thought: check\n" + CALC, "Final Answer: 13"])
    working, call, _ = Agent(model, tools=[Calculator()], protocol=ReAct(working_first=True)).run(QUESTION).steps
    assert observation_line(working) is None and working.observation.startswith("Your working's answer is 13.")
    assert observation_line(call) == "Observation: 13"


@pytest.mark.parametrize(
    "first,kinds",
    [
        ("Thought: I compute it.\n" + CALC, ["action", "final_answer"]),  # a call in the first reply runs
        ("Thought: easy.\nFinal Answer: 13", ["final_answer"]),  # an answer in the first reply stands
    ],
)
def test_a_first_reply_that_is_already_a_react_step_is_acted_on(first, kinds):
    model = ScriptedModel([first, "Thought: done\nFinal Answer: 13"])
    result = Agent(model, tools=[Calculator()], protocol=ReAct(working_first=True)).run(QUESTION)
    assert [s.kind for s in result.steps] == kinds and result.answer == "13"
    assert model.calls[0]["messages"] == direct_messages(QUESTION, "en")
    if len(kinds) == 2:
        assert result.steps[0].observation == "13"
        assert model.calls[1]["messages"][-1]["content"].endswith("Observation: 13\n")
