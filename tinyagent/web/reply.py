"""The chat page's messages: a reply's steps as collapsible blocks (the one being written pending), then
its answer and the CLI's summary line, in English or Chinese; everything redacted, and text still
streaming without a tail that could begin a secret. No Gradio here: plain chat-message dicts."""

from __future__ import annotations

import json
import re

from ..agent import AgentResult, Step, StepKind, StopReason
from ..agent.approval import ApprovalRequest
from ..cli.report import answer_sources, summary
from ..format.observations import observation_line
from ..redaction import redact, secrets
from ..text import clip, escape_controls, one_line
from . import approval

Messages = list[dict]

LABELS = {
    "en": {
        "step": "Step {n}",
        "final": "final answer",
        "forced": "final answer at the turn cap",
        "refused": "refused",
        "edited": "edited",
        "sources": "Sources:",
        "stopped": "Stopped after {n} step(s).",
        "no_answer": "No final answer.",
        "error": "Error: {e}",
        "busy": "A question is still running: wait for it, or press Stop.",
        "too_long": "The question is too long ({n} characters; the limit is {limit}).",
        "full": "The page is answering as many conversations as it can: try again in a moment.",
    },
    "zh": {
        "step": "第 {n} 步",
        "final": "最终答案",
        "forced": "达到轮数上限时的最终答案",
        "refused": "已拒绝",
        "edited": "已修改",
        "sources": "出处：",
        "stopped": "已在第 {n} 步后停止。",
        "no_answer": "没有最终答案。",
        "error": "错误：{e}",
        "busy": "上一个问题还在运行：请稍候，或按“停止”。",
        "too_long": "问题太长（{n} 个字符；上限为 {limit}）。",
        "full": "页面正在处理尽可能多的对话：请稍后再试。",
    },
}


def shown(text: str, final: bool = False) -> str:
    """`text` redacted; while it is still streaming, without a tail that could begin a secret."""
    text = redact(text)
    if not final:
        for secret in secrets():
            for k in range(min(len(secret) - 1, len(text)), 0, -1):
                if text.endswith(secret[:k]):
                    text = text[:-k]
                    break
    return text


class PageReply:
    """One answer as chat messages: a block per step (the one being written pending), then the answer."""

    def __init__(self, lang: str):
        self.lang, self.labels = lang, LABELS[lang]
        self.steps: list[Step] = []
        self.writing = ""  # text the model is writing for the next step
        self.waiting: ApprovalRequest | None = None  # its call, while it waits for approval
        self.answer: str | None = None

    def on_text(self, text: str) -> None:
        self.writing += text

    def on_step(self, step: Step) -> None:
        self.steps.append(step)
        self.writing = ""

    def finish(self, result: AgentResult | None, error: BaseException | None = None) -> None:
        """The answer message: the final answer or why there is none, and the CLI's summary line."""
        self.writing = ""
        if result is None:
            self.answer = self.labels["error"].format(e=one_line(error))
        else:
            if result.finished:
                head = result.answer
                sources = answer_sources(result)
                if sources:  # a list under the answer, each source as plain text
                    head += f"\n\n{self.labels['sources']}\n" + "\n".join(f"- {_plain(s)}" for s in sources)
            elif result.stop_reason == StopReason.STOPPED:
                head = self.labels["stopped"].format(n=len(result.steps))
            else:  # the model failed, the context is full, or no answer came at the turn cap
                head = self.labels["error"].format(e=result.error) if result.error else self.labels["no_answer"]
            self.answer = f"{head}\n\n*{summary(result)}*"

    def messages(self) -> Messages:
        done = self.answer is not None
        # a step without a reply records why the run ended: its answer line says so
        out = [self._block(step, "done" if done else None) for step in self.steps if step.kind.has_reply]
        if self.writing.strip() or self.waiting is not None:
            title = self.labels["step"].format(n=len(self.steps) + 1)
            if self.waiting is not None:
                title += f" · {self.waiting.name} · {approval.LABELS[self.lang]['waiting']}"
            out.append(message(shown(self.writing), {"title": title, "status": "pending"}))
        if done:
            out.append(message(redact(self.answer)))
        return out

    def _block(self, step: Step, status: str | None) -> dict:
        """A step as a collapsible message: titled with its tool, the arguments as its log line."""
        name = step.action or {
            StepKind.FINAL_ANSWER: self.labels["final"],
            StepKind.FORCED_ANSWER: self.labels["forced"],
            StepKind.NO_FORCED_ANSWER: self.labels["forced"],
        }.get(step.kind, str(step.kind))
        if step.kind == StepKind.REFUSED or step.edited_from is not None:
            name += f" · {self.labels['refused' if step.kind == StepKind.REFUSED else 'edited']}"
        meta = {
            "title": f"{self.labels['step'].format(n=step.index + 1)} · {name}",
            "duration": round(step.model_seconds + step.tool_seconds, 2),
        }
        if step.arguments is not None:  # what ran, its hidden characters shown as the approval card shows them
            meta["log"] = escape_controls(clip(json.dumps(step.arguments, ensure_ascii=False), 200), invisible=True)
        elif step.action_input:
            meta["log"] = escape_controls(clip(step.action_input, 200), invisible=True)
        if status:
            meta["status"] = status
        body = step.text.strip()
        line = observation_line(step)
        if line is not None:
            body += f"\n\n{line}"
        return message(redact(body), redact(meta))


def _plain(text: str) -> str:
    """`text` shown as itself in Markdown (a file name's `_` or `*` not read as emphasis)."""
    return re.sub(r"([\\`*_{}\[\]<>()#+!|~])", r"\\\1", text)


def replayed(question: str, result: AgentResult) -> Messages:
    """A finished turn as the chat showed it: the question, a block per step, the answer (a conversation
    brought back from the conversation store)."""
    reply = PageReply(result.lang if result.lang in LABELS else "en")
    for step in result.steps:
        reply.on_step(step)
    reply.finish(result)
    return [{"role": "user", "content": redact(question)}, *reply.messages()]


def message(content: str, metadata: dict | None = None) -> dict:
    return {"role": "assistant", "content": content, **({"metadata": metadata} if metadata else {})}
