"""The ReAct prompts as text, in English and Chinese: the system prompt with its tool lines and worked
examples, the stop words, the turn cap's forced answer and the distill prompt. Pure text.

ReAct keywords (Thought, Action, Action Input, Observation, Final Answer) stay in English in both
languages: the reply reader and the stop words look for them.
"""
from __future__ import annotations

import json

from .arguments import skeleton

# The model must stop before writing an observation itself: at a line start (a stop string that
# starts with a newline also matches at the very start of a reply), never inside a <think> block.
STOP_WORDS = ["\nObservation:", "\nObservation：", "\nObservation :"]

TOOL_DESC = {
    "en": "{name_for_model}: Call this tool to use the {name_for_human} API. What is the "
          "{name_for_human} API for? {description_for_model} Parameters: {parameters} "
          "Give the arguments as a JSON object: Action Input: {example}",
    "zh": "{name_for_model}: 调用此工具来使用{name_for_human} API。{name_for_human} API 有什么用？"
          "{description_for_model} 参数：{parameters} 参数必须写成 JSON 对象：Action Input: {example}",
}

REACT_PROMPT = {
    "en": """Answer the user's questions as well as you can. You have access to these tools:

{tool_descs}

Use this format:

Question: the question you must answer
Thought: your reasoning: work the problem out step by step, on as many lines as you need
Action: the tool to call, exactly one of [{tool_names}]
Action Input: the tool's arguments as a JSON object
Observation: the result the tool returns
... (Thought / Action / Action Input / Observation can repeat several times)
Thought: your working, checked against the observations
Final Answer: the final answer to the original question

Call a tool to check a step of your working or to find what you do not know. A tool's result answers \
one step, not the whole question: keep working until the question is answered. Write one Action at a \
time and wait for its Observation; never write an Observation yourself. When no tool is needed, write \
your working as the Thought and then the Final Answer directly.

Begin!""",
    "zh": """请尽你所能回答用户的问题。你可以使用以下工具：

{tool_descs}

请使用以下格式：

Question: 你必须回答的问题
Thought: 你的推理：一步一步地解题，需要几行就写几行
Action: 要调用的工具，必须是 [{tool_names}] 之一
Action Input: 工具的参数，写成 JSON 对象
Observation: 工具返回的结果
...（Thought / Action / Action Input / Observation 可以重复多次）
Thought: 你的解题过程，并用 Observation 核对过
Final Answer: 对原始问题的最终答案

调用工具来核对解题中的某一步，或查找你不知道的信息。工具的结果只回答其中一步，而不是整个问题：\
请继续推理，直到回答了整个问题。每次只写一个 Action，然后等待它的 Observation；不要自己编写 Observation。\
如果不需要使用工具，请把解题过程写在 Thought 中，然后直接给出 Final Answer。

开始！""",
}

# `Agent(working_first=True)`: the model first works the question out as it would alone (the direct
# prompt, `format.direct`); then this user message offers the tools to check that working, with the
# working's own answer as the answer to give when it holds (the draft a check may correct). Each tool is
# one line (its description and an Action Input to fill in): a small model copies the expressions of a
# schema's examples into its checks.
CHECK_PROMPT = {
    "en": {"head": "Your working's answer is {answer}. Before you give it, you may check a step of your working, or "
                   "a fact it uses, with one of these tools:",
           "head_none": "Your working ended without an answer line. Check a step of your working, or a fact it "
                        "uses, with one of these tools:",
           "body": """{tool_lines}

To check, reply with these three lines and wait for the Observation:
Thought: the step I check
Action: one of [{tool_names}]
Action Input: the tool's arguments as a JSON object""",
           "end": "If your working is right, reply with these two lines:\nThought: My working is right.\n"
                  "Final Answer: {answer}",
           "end_none": "Then reply with these two lines:\nThought: I have checked my working.\n"
                       "Final Answer: the answer to the question"},
    "zh": {"head": "你的解题过程得出的答案是 {answer}。给出它之前，你可以用下面的工具核对解题中的某一步，或它用到的某个事实：",
           "head_none": "你的解题过程最后没有写出答案。请用下面的工具核对解题中的某一步，或它用到的某个事实：",
           "body": """{tool_lines}

核对时，请回复这三行，然后等待 Observation：
Thought: 我要核对的那一步
Action: [{tool_names}] 之一
Action Input: 工具的参数，写成 JSON 对象""",
           "end": "如果你的解题过程是对的，请回复这两行：\nThought: 我的解题过程是对的。\nFinal Answer: {answer}",
           "end_none": "然后回复这两行：\nThought: 我核对过了。\nFinal Answer: 问题的答案"},
}

NO_TOOLS = {"en": "(no tools are available: answer directly)", "zh": "（没有可用的工具：请直接回答）"}

EXAMPLES_HEADER = {"en": "Here are examples of the format:", "zh": "以下是该格式的示例："}

# Appended to the scratchpad when the turn cap is reached: the answer from the whole working, not only
# the last observation.
FORCE_FINAL = {
    "en": "Thought: I have used all my steps. Taking all my working and every observation above together, "
          "the answer to the whole question is:\nFinal Answer:",
    "zh": "Thought: 我已经用完了所有步骤。综合上面全部的解题过程和每一个 Observation，整个问题的答案是：\nFinal Answer:",
}

#: What each ReAct step's reply is begun with (`Agent(thought_first=True)`): the model reasons first.
THOUGHT_LEAD = "Thought:"
#: Appended after a reply that only reasoned, to ask for its answer in the same step.
ANSWER_LEAD = "\nFinal Answer:"

# The observation after a Final Answer written right after a failed tool call: that call gave nothing
# to answer from, so the model is asked once to check the answer against its whole working.
RECHECK = {
    "en": "your last tool call failed, so its result is not known. Before you answer, check the answer "
          "against your whole working: write a Thought that works out the whole question, then the Final "
          "Answer (or call a tool to check a step).",
    "zh": "你上一次调用工具失败了，所以它的结果是未知的。回答之前，请用你全部的解题过程核对答案：先写一个 "
          "Thought 把整个问题推算出来，再写 Final Answer（或调用工具核对某一步）。",
}

# The observation after a Final Answer that only repeats the last tool result (`Agent(recheck="results")`):
# that result may answer one step of the question, not all of it.
RECHECK_RESULT = {
    "en": "the tool gave {result}. Before you answer: is {result} the answer to the "
          "whole question, or only one step of it? Write a Thought that works out the whole question, then the "
          "Final Answer (or call a tool to check a step).",
    "zh": "工具给出了 {result}。回答之前请确认：{result} 是整个问题的答案，还是其中一步的结果？先写一个 "
          "Thought 把整个问题推算出来，再写 Final Answer（或调用工具核对某一步）。",
}

# Observation distillation: condense a long tool result to what the current thought needs.
DISTILL_PROMPT = {
    "en": "Condense the tool result below to the facts that help answer the question. Keep names, "
          "numbers and dates exactly as written; leave out everything else. Reply with the facts only.\n\n"
          "Question: {question}\nCurrent thought: {thought}\n\nTool result:\n{observation}",
    "zh": "请把下面的工具结果压缩为有助于回答问题的事实。人名、数字和日期须照原文保留，其余内容一律省略。"
          "只回复这些事实。\n\n问题：{question}\n当前思考：{thought}\n\n工具结果：\n{observation}",
}
DISTILLED_LABEL = {"en": "(condensed from {n} characters) ", "zh": "（由 {n} 个字符压缩）"}

def tool_description(tool, lang: str = "en") -> str:
    """One tool's line in the system prompt."""
    return TOOL_DESC[lang].format(
        name_for_model=tool.name_for_model,
        name_for_human=tool.human_name(lang),
        description_for_model=tool.description(lang),
        parameters=json.dumps(tool.parameters_for(lang), ensure_ascii=False),
        example=skeleton(tool),
    )


def build_system_prompt(tools, lang: str = "en", examples: list | None = None) -> str:
    """The ReAct system prompt: tool descriptions, the format, and optional worked examples."""
    descs = "\n\n".join(tool_description(t, lang) for t in tools) or NO_TOOLS[lang]
    names = ", ".join(t.name_for_model for t in tools)
    prompt = REACT_PROMPT[lang].format(tool_descs=descs, tool_names=names)
    if examples:
        shown = "\n\n".join(format_example(e) for e in examples)
        prompt = prompt.replace("\n\nBegin!", "").replace("\n\n开始！", "")
        prompt += f"\n\n{EXAMPLES_HEADER[lang]}\n\n{shown}\n\n" + ("开始！" if lang == "zh" else "Begin!")
    return prompt


def build_check_prompt(tools, lang: str = "en", answer: str | None = None) -> str:
    """The user message after the model's own working (`Agent(working_first=True)`): the tools, one line
    each, the three lines of a check, and the two of the answer (`answer`, the working's, when it has one)."""
    text = CHECK_PROMPT[lang]
    lines = "\n".join(f"{t.name_for_model}: {t.description(lang)} Action Input: {skeleton(t)}" for t in tools)
    body = text["body"].format(tool_lines=lines or NO_TOOLS[lang], tool_names=", ".join(t.name_for_model for t in tools))
    if answer:
        return "\n\n".join([text["head"].format(answer=answer), body, text["end"].format(answer=answer)])
    return "\n\n".join([text["head_none"], body, text["end_none"]])


def format_example(example: dict) -> str:
    """A worked example {"question", "steps": [{"thought", "action", "action_input", "observation"}],
    "final_thought"?, "answer"} as a ReAct transcript."""
    lines = [f"Question: {example['question']}"]
    for step in example.get("steps", []):
        args = step.get("action_input", {})
        args = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
        lines += [f"Thought: {step['thought']}", f"Action: {step['action']}",
                  f"Action Input: {args}", f"Observation: {step['observation']}"]
    lines += [f"Thought: {example.get('final_thought', 'I now know the final answer')}",
              f"Final Answer: {example['answer']}"]
    return "\n".join(lines)
