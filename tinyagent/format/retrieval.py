"""The retrieve-then-answer baseline as text: the question's own search results put in front of the model in
one plain prompt (en / zh), which asks, as the direct prompt does, for the working and a last line with the
answer (read back by `format.direct.read_direct_answer`). Pure text; no tools, no ReAct labels.

The eval harness asks the same model the same questions this way (`--baseline rag`) to tell whether the
agent's own searching is worth its extra steps: an agent that is not at least as right as this is not.
"""
from __future__ import annotations

RETRIEVAL_PROMPT = {
    "en": "Answer the question below. Search results for it are given first; use them where they help. Work it "
          "out step by step, then end your reply with a last line of exactly this form, where X is the answer "
          "alone:\nThe answer is X.\n\nSearch results:\n{passages}\n\nQuestion: {question}",
    "zh": "请回答下面的问题。先给出的是这个问题的搜索结果，有用的地方请参考。先一步一步写出解题过程，最后单独写一行，"
          "格式必须是（X 只写答案本身）：\n答案是 X。\n\n搜索结果：\n{passages}\n\n问题：{question}",
}
#: What stands for the passages when the search found nothing or failed (the model then answers alone).
NO_PASSAGES = {"en": "(the search found nothing: {reason})", "zh": "（搜索没有找到结果：{reason}）"}


def retrieval_messages(question: str, passages: str, lang: str = "en") -> list[dict]:
    """The baseline's whole conversation: one user message holding the instruction, the search results
    (as the search tool wrote them) and the question."""
    return [{"role": "user", "content": RETRIEVAL_PROMPT[lang].format(passages=passages.strip(), question=question)}]


def no_passages(reason: str, lang: str = "en") -> str:
    """The passages' place when there are none: says why (the tool's error, or no results)."""
    return NO_PASSAGES[lang].format(reason=" ".join(reason.split()))
