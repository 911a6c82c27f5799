"""What real models write, read through a real Agent on a scripted model: every accepted reply form,
and every reply with ReAct structure but no clear reading turned into an error that says what to write."""

from __future__ import annotations

import pytest

from tinyagent import Agent, ReAct, tool
from tinyagent.format.reading import read_step
from tinyagent.tools import Calculator

#: ReAct from the first reply: these tests drive the loop itself (the working first: test_working.py)
CLASSIC = ReAct(working_first=False, search="tool")


@tool
def search(query: str) -> str:
    """Search the web.

    Args:
        query: what to look for
    """
    return f"results for {query}"


@tool
def add(a: int, b: int) -> str:
    """Add two numbers.

    Args:
        a: the first number
        b: the second number
    """
    return str(a + b)


@tool
def sql_db_query(query: str) -> str:
    """Run a SQL query."""
    return "3 rows"


@tool
def python_repl(code: str) -> str:
    """Run Python code."""
    return "42"


TOOLS = [search, add, sql_db_query, python_repl, Calculator()]


def first_step(reply: str):
    model_replies = [reply, "Thought: done\nFinal Answer: the end"]
    from conftest import ScriptedModel

    model = ScriptedModel(model_replies)
    # the reply as written: its answer taken as it comes (no re-check), a thought-only reply an error
    result = Agent(
        model, tools=TOOLS, max_turns=3, protocol=ReAct(working_first=False, ask_answer=False, recheck=False)
    ).run("a question")
    return result, result.steps[0], model


# (reply as a model wrote it, the tool that must run, its arguments)
CALLS = [
    # a plain string for a one-parameter tool, in the forms peers' tests use
    ("Thought: look it up\nAction: search\nAction Input: NBA", "search", {"query": "NBA"}),
    ('Action: search\nAction Input: "Leo DiCaprio girlfriend"', "search", {"query": "Leo DiCaprio girlfriend"}),
    (
        "Action: sql_db_query\nAction Input: ```sql\nSELECT name FROM users LIMIT 3\n```",
        "sql_db_query",
        {"query": "SELECT name FROM users LIMIT 3"},
    ),
    (
        "Action: python_repl\nAction Input: ```python\nx = 2\nprint(x * 21)\n```",
        "python_repl",
        {"code": "x = 2\nprint(x * 21)"},
    ),
    ("Action: search\nAction Input: first line\nsecond line", "search", {"query": "first line\nsecond line"}),
    ("Action: calculator\nAction Input: 17 * 24", "calculator", {"expression": "17 * 24"}),
    # a note after the tool name; the ReAct paper's one-line form, numbered too
    ('Action: add (add two numbers)\nAction Input: {"a": 2, "b": 3}', "add", {"a": 2, "b": 3}),
    ("Thought: I need to search Jay Chou.\nAction: Search[Jay Chou]", "search", {"query": "Jay Chou"}),
    ("Thought 2: look\nAction 2: Search[Colorado orogeny]", "search", {"query": "Colorado orogeny"}),
    # JSON-blob actions (the LangChain chat format), fenced, bare, after an Action: label
    ('```json\n{"action": "search", "action_input": "weather in SF"}\n```', "search", {"query": "weather in SF"}),
    (
        'Thought: I should add\nAction:\n```json\n{"action": "add", "action_input": {"a": 1, "b": 2}}\n```',
        "add",
        {"a": 1, "b": 2},
    ),
    ('{"name": "search", "arguments": {"query": "x"}}', "search", {"query": "x"}),
    # JSON that is almost right
    ('Action: add\nAction Input: {"a": 2, "b": 3', "add", {"a": 2, "b": 3}),
    ('Action: search\nAction Input: {"query": "line one\nline two"}', "search", {"query": "line one\nline two"}),
    # the prompt's parameter list copied, with the value filled in (Qwen2.5-0.5B does both)
    (
        'Action: calculator\nAction Input: {"name": "expression", "description": "17 * 24", "required": true, '
        '"schema": {"type": "string"}}',
        "calculator",
        {"expression": "17 * 24"},
    ),
    (
        'Action: calculator\nAction Input: {"expression": "3 + 6 + 9", "required": true, "schema": {"type": "string"}}',
        "calculator",
        {"expression": "3 + 6 + 9"},
    ),
    # Tool: / Tool Input: labels
    ('Tool: search\nTool Input: {"query": "x"}', "search", {"query": "x"}),
    # tool names as models write them
    ('Action: Search\nAction Input: {"query": "x"}', "search", {"query": "x"}),
    ('Action: 计算器\nAction Input: {"expression": "1+1"}', "calculator", {"expression": "1+1"}),
    (
        'Action: The Calculator API can be used to evaluate the arithmetic expression\n'
        'Action Input: {"expression": "17*24"}',
        "calculator",
        {"expression": "17*24"},
    ),
    (
        'Action: 调用 calculator API，传入参数 {"expression": "(48 + 52) * 3 / 4"}',
        "calculator",
        {"expression": "(48 + 52) * 3 / 4"},
    ),
    # the format's list of tools copied on the Action line: the one its arguments are for
    ('Action: [search, calculator] 之一\nAction Input: {"expression": "1+1"}', "calculator", {"expression": "1+1"}),
    ('Action: one of [calculator, search]\nAction Input: {"query": "x"}', "search", {"query": "x"}),
    # reasoning models: nothing inside <think> is an action, an answer or an observation
    (
        '<think>The user wants 2+2. Observation: a tool helps.\nAction: fake\nFinal Answer: 5</think>\n'
        'Thought: use it\nAction: calculator\nAction Input: {"expression": "2+2"}',
        "calculator",
        {"expression": "2+2"},
    ),
]


@pytest.mark.parametrize("reply,name,arguments", CALLS)
def test_accepted_tool_calls_run_the_tool(reply, name, arguments):
    result, step, model = first_step(reply)
    assert (step.kind, step.action, step.arguments, step.error) == ("action", name, arguments, None)
    assert step.observation and not step.observation.startswith("Error")
    assert model.calls[1]["messages"][-1]["content"].endswith(f"Observation: {step.observation}\n")
    assert result.answer == "the end" and result.finished


ANSWERS = [
    ("Thought: I can answer without using any more tools.\nAnswer: Paris", "Paris"),
    ("Thought: I know it\nAction: Finish[1979]", "1979"),
    ('{"action": "Final Answer", "action_input": "It is sunny."}', "It is sunny."),
    ('Thought: done\nAction:\n```\n{"action": "Final Answer", "action_input": "42"}\n```', "42"),
    ('Thought: done\nFinal Answer: 1979\nAction: search\nAction Input: {"query": "x"}', "1979"),
    ("Thought: no tool needed\nAction: None\nFinal Answer: hi", "hi"),
    ("Final Answer: line one\nline two", "line one\nline two"),
    ("Okay, the user asks. Final Answer: no, wait.\n</think>\n\nFinal Answer: 4", "4"),
    ("Final Answer: My Observation: it is 5", "My Observation: it is 5"),
]


@pytest.mark.parametrize("reply,answer", ANSWERS)
def test_accepted_final_answers(reply, answer):
    result, step, model = first_step(reply)
    assert step.kind == "final_answer" and step.final_answer == answer
    assert (result.answer, result.finished, result.stop_reason, len(model.calls)) == (answer, True, "final_answer", 1)


# (reply, kind, words the error must contain)
ERRORS = [
    ('Thought: x\nAction Input: {"query": "x"}', "malformed", "without an Action line"),
    ('Thought: x\nAction:\nAction Input: {"query": "x"}', "malformed", "did not name a tool"),
    ("Action: ****\nAction Input: {}", "malformed", "did not name a tool"),
    ('Action:\n```json\n{"action": "search", "action_input": \n```', "malformed", "could not be read"),
    ("Action:\nAction Input:Thought:", "malformed", "did not name a tool"),
    ("Thought: Tom has 155 dollars left.", "malformed", "no Action and no Final Answer"),
    ("<think>still thinking about it", "malformed", "no step after it"),
    ("Final Answer:", "malformed", "Final Answer was empty"),
    ("", "empty", "empty"),
    (
        'Action: weather\nAction Input: {"city": "Paris"}',
        "unknown_tool",
        "unknown tool 'weather'. Valid tools: search, add, sql_db_query, python_repl, calculator",
    ),
    ("Action: add\nAction Input: 2 and 3", "bad_input", 'Write: Action Input: {"a": 1, "b": 1}'),
    (
        'Action: calculator\nAction Input: {"name": "expression", "description": "the arithmetic expression, e.g. '
        '2**10 or (3+6+9)*2+17", "required": true, "schema": {"type": "string"}}',
        "bad_input",
        "parameter description",
    ),
]


@pytest.mark.parametrize("reply,kind,words", ERRORS)
def test_replies_without_a_clear_reading_are_format_errors(reply, kind, words):
    result, step, model = first_step(reply)
    assert step.kind == kind and step.final_answer is None and words in step.error
    assert step.observation.startswith("Error: ") and "Write" in step.observation  # says what to write
    assert len(model.calls) == 2 and words in model.calls[1]["messages"][-1]["content"]
    assert result.answer == "the end"


def test_chit_chat_without_labels_is_the_answer():
    result, step, _ = first_step("你好！有什么可以帮你的吗？")
    assert step.kind == "no_action" and result.stop_reason == "no_action" and result.finished
    assert result.answer == "你好！有什么可以帮你的吗？"


def test_format_errors_name_the_tool_in_a_one_line_example():
    _, step, _ = first_step("Action: add\nAction Input: 2 and 3")
    assert 'Action Input: {"a": 1, "b": 1}' in step.observation


def test_the_same_format_error_twice_shows_a_complete_step(scripted):
    wrong = 'Action: weather\nAction Input: {"city": "Paris"}'
    model = scripted([wrong, wrong, "Final Answer: x"])
    result = Agent(model, tools=[Calculator()], protocol=CLASSIC).run("?")
    first, second = result.steps[:2]
    assert first.kind == second.kind == "unknown_tool"
    assert "A complete step" not in first.observation
    assert second.observation.endswith(
        'A complete step looks like this:\nThought: I need calculator for this.\nAction: calculator\n'
        'Action Input: {"expression": "..."}\nThen stop and wait for the Observation. When you know the answer, '
        "write a Thought, then Final Answer: and the answer itself on the same line."
    )
    assert "<the answer>" not in second.observation  # a placeholder line to copy: small models copy it as the answer


def test_a_failed_call_may_be_retried(scripted):
    from tinyagent.tools.tool import ToolError

    attempts = []

    @tool
    def flaky(query: str) -> str:
        """Fails once."""
        attempts.append(query)
        if len(attempts) == 1:
            raise ToolError("service busy")
        return "ok"

    call = 'Action: flaky\nAction Input: {"query": "q"}'
    result = Agent(scripted([call, call, call, "Final Answer: ok"]), tools=[flaky], protocol=CLASSIC).run("?")
    assert [s.kind for s in result.steps] == ["tool_error", "action", "repeated_call", "final_answer"]
    assert attempts == ["q", "q"]


@pytest.mark.parametrize(
    "forced_reply",
    [" 42", "Final Answer: 42", "Thought: done\nFinal Answer: 42", " 42\nThought: more\nAction: x", "Answer: 42"],
)
def test_the_forced_answer_is_taken_whether_or_not_the_label_is_restated(scripted, forced_reply):
    call = 'Action: calculator\nAction Input: {"expression": "6*7"}'
    result = Agent(scripted([call, forced_reply]), tools=[Calculator()], max_turns=1, protocol=CLASSIC).run("?")
    assert (result.answer, result.finished, result.stop_reason) == ("42", True, "max_turns")
    assert result.steps[-1].kind == "forced_answer"


def test_no_forced_answer_is_reported_as_such(scripted):
    call = 'Action: calculator\nAction Input: {"expression": "6*7"}'
    result = Agent(
        scripted([call, "Thought: I need more steps"]), tools=[Calculator()], max_turns=1, protocol=CLASSIC
    ).run("?")
    assert (result.answer, result.finished, result.stop_reason) == ("", False, "no_forced_answer")
    assert result.steps[-1].kind == "no_forced_answer"


def test_text_after_the_call_never_enters_the_scratchpad(scripted):
    reply = 'Thought: t\nAction: search\nAction Input: {"query": "x"}\nThought: I bet it says 5\nFinal Answer: 5'
    model = scripted([reply, "Final Answer: y"])
    result = Agent(model, tools=[search], protocol=CLASSIC).run("?")
    assert result.steps[0].text == 'Thought: t\nAction: search\nAction Input: {"query": "x"}'
    assert "I bet" not in model.calls[1]["messages"][-1]["content"]


def test_read_step_is_pure_and_names_the_resolved_tool():
    reading = read_step("Action: SEARCH\nAction Input: cats", [search])
    assert (reading.kind, reading.action, reading.arguments) == ("action", "search", {"query": "cats"})
