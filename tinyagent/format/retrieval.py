"""The retrieve-then-answer baseline as text: the question's own search results put in front of the model in
one plain prompt (en / zh, data/prompts/direct.yaml `retrieval`), which asks, as the direct prompt does, for the
working and a last line with the answer (read back by `format.direct.read_direct_answer`). Pure text; no tools,
no ReAct labels.

The eval harness asks the same model the same questions this way (`--baseline rag`) to tell whether the
agent's own searching is worth its extra steps: an agent that is not at least as right as this is not.
"""

from __future__ import annotations

from .templates import Prompts, shipped


def retrieval_messages(question: str, passages: str, lang: str = "en", prompts: Prompts | None = None) -> list[dict]:
    """The baseline's whole conversation: one user message holding the instruction, the search results
    (as the search tool wrote them) and the question."""
    content = (prompts or shipped()).fill("direct.retrieval", lang, passages=passages.strip(), question=question)
    return [{"role": "user", "content": content}]


def no_passages(reason: str, lang: str = "en", prompts: Prompts | None = None) -> str:
    """The passages' place when there are none: says why (the tool's error, or no results)."""
    return (prompts or shipped()).fill("direct.no_passages", lang, reason=" ".join(reason.split()))
