"""The ReAct prompts put together: the system prompt with its tool lines and worked examples, the check
turn after the working, the stop words. The texts are data (data/prompts/react.yaml, check.yaml, read by
`templates`); this module fills their slots. Pure text.

ReAct keywords (Thought, Action, Action Input, Observation, Final Answer) stay in English in both
languages: the reply reader and the stop words look for them.
"""

from __future__ import annotations

import json

from .arguments import skeleton
from .templates import Prompts, shipped

# The model must stop before writing an observation itself: at a line start (a stop string that
# starts with a newline also matches at the very start of a reply), never inside a <think> block.
STOP_WORDS = ["\nObservation:", "\nObservation：", "\nObservation :"]

#: What each ReAct step's reply is begun with (`ReAct(thought_first=True)`): the model reasons first.
THOUGHT_LEAD = "Thought:"
#: Appended after a reply that only reasoned, to ask for its answer in the same step.
ANSWER_LEAD = "\nFinal Answer:"


def tool_description(tool, lang: str = "en", prompts: Prompts | None = None) -> str:
    """One tool's line in the system prompt."""
    return (prompts or shipped()).fill(
        "react.tool",
        lang,
        name_for_model=tool.name_for_model,
        name_for_human=tool.human_name(lang),
        description_for_model=tool.description(lang),
        parameters=json.dumps(tool.parameters_for(lang), ensure_ascii=False),
        example=skeleton(tool),
    )


def build_system_prompt(tools, lang: str = "en", examples: list | None = None, prompts: Prompts | None = None) -> str:
    """The ReAct system prompt: tool descriptions, the format, and optional worked examples."""
    prompts = prompts or shipped()
    descs = "\n\n".join(tool_description(t, lang, prompts) for t in tools) or prompts.text("react.no_tools", lang)
    shown = "\n\n".join(format_example(e) for e in examples or ())
    return prompts.fill(
        "react.system",
        lang,
        tool_descs=descs,
        tool_names=", ".join(t.name_for_model for t in tools),
        examples=f"\n\n{prompts.text('react.examples_header', lang)}\n\n{shown}" if shown else "",
    )


def build_check_prompt(tools, lang: str = "en", answer: str | None = None, prompts: Prompts | None = None) -> str:
    """The user message after the model's own working (`ReAct(working_first=True)`): the tools, one line
    each, the three lines of a check, and the two of the answer (`answer`, the working's, when it has one)."""
    prompts = prompts or shipped()
    lines = "\n".join(f"{t.name_for_model}: {t.description(lang)} Action Input: {skeleton(t)}" for t in tools)
    body = prompts.fill(
        "check.body",
        lang,
        tool_lines=lines or prompts.text("react.no_tools", lang),
        tool_names=", ".join(t.name_for_model for t in tools),
    )
    if answer:
        return "\n\n".join(
            [prompts.fill("check.head", lang, answer=answer), body, prompts.fill("check.end", lang, answer=answer)]
        )
    return "\n\n".join([prompts.text("check.head_none", lang), body, prompts.text("check.end_none", lang)])


def format_example(example: dict) -> str:
    """A worked example {"question", "steps": [{"thought", "action", "action_input", "observation"}],
    "final_thought"?, "answer"} as a ReAct transcript."""
    lines = [f"Question: {example['question']}"]
    for step in example.get("steps", []):
        args = step.get("action_input", {})
        args = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
        lines += [
            f"Thought: {step['thought']}",
            f"Action: {step['action']}",
            f"Action Input: {args}",
            f"Observation: {step['observation']}",
        ]
    lines += [
        f"Thought: {example.get('final_thought', 'I now know the final answer')}",
        f"Final Answer: {example['answer']}",
    ]
    return "\n".join(lines)
