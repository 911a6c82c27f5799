"""The LLM fallback tool: answer a sub-question from the model's own knowledge."""

from __future__ import annotations

from ..text import detect_lang
from .tool import Tool, ToolError

SYSTEM = {
    "en": "Answer the question briefly and factually from your own knowledge. If you do not know, say so.",
    "zh": "请根据你自己的知识简洁、准确地回答问题。如果不知道，请直接说不知道。",
}


class LLMTool(Tool):
    """A plain chat call to the agent's own model, for sub-questions no other tool can answer.

    The model is passed in (tools never import the agent). On a local model this call
    replaces the cached prompt, so the next agent step pays one full prefill.
    """

    name_for_model = "llm_tool"
    name_for_human = {"en": "Language Model", "zh": "语言模型"}
    description_for_model = {
        "en": "Answers a general-knowledge sub-question from the language model's own knowledge. "
        "Use it only when no other tool fits; its answers are not checked.",
        "zh": "用语言模型自身的知识回答一个常识性子问题。仅在其他工具都不适用时使用；其答案未经核实。",
    }
    parameters = [
        {
            "name": "input",
            "description": {"en": "the sub-question", "zh": "子问题"},
            "required": True,
            "schema": {"type": "string"},
        }
    ]

    def __init__(self, model, lang: str | None = None, max_new_tokens: int = 256):
        self.model = model
        self.lang = lang
        self.max_new_tokens = max_new_tokens

    def call(self, input: str) -> str:
        if not input.strip():
            raise ToolError("the input is empty")
        messages = [
            {"role": "system", "content": SYSTEM[self.lang or detect_lang(input)]},
            {"role": "user", "content": input},
        ]
        answer = str(self.model.generate(messages, max_new_tokens=self.max_new_tokens)).strip()
        return answer or "(the model gave no answer)"
