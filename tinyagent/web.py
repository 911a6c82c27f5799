"""The chat page (`tinyagent web`): each reply's Thought, Action and Observation stream into a
Gradio chatbot as the agent works, each step a block that folds away once the answer is there.

One model serves every browser session; each session (a browser tab, or a gradio_client Client)
gets its own Agent, so its own conversation, and runs are concurrent (a model that cannot run
two generations at once serialises them itself). A tool call waiting for approval shows in the
step stream and as a card under the chat (web_approval.py). Everything shown passes through `redact`.
Gradio is imported only when a page is built: `pip install 'tinyagent[web]'`.
(No `from __future__ import annotations` here: Gradio reads the handlers' `gr.Request` annotation.)
A little over 300 lines: the session, its reply and the page's handlers share the run's events.
"""
import json
import logging
import os
import queue
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from . import web_approval
from .agent import Agent, AgentResult, Step, StepKind, StopReason
from .agent.approval import ApprovalRequest, give_asker
from .format.observations import observation_line
from .report import summary
from .secrets import redact, secrets
from .text import clip, detect_lang, lang_for, one_line

if TYPE_CHECKING:
    import gradio as gr

log = logging.getLogger(__name__)

#: factory(on_step=..., on_text=...) -> a new Agent for one browser session
AgentFactory = Callable[..., Agent]
Messages = list[dict]

LABELS = {
    "en": {"step": "Step {n}", "final": "final answer", "forced": "final answer at the turn cap",
           "refused": "refused", "edited": "edited",
           "stopped": "Stopped after {n} step(s).", "no_answer": "No final answer.", "error": "Error: {e}",
           "busy": "A question is still running: wait for it, or press Stop."},
    "zh": {"step": "第 {n} 步", "final": "最终答案", "forced": "达到轮数上限时的最终答案",
           "refused": "已拒绝", "edited": "已修改",
           "stopped": "已在第 {n} 步后停止。", "no_answer": "没有最终答案。", "error": "错误：{e}",
           "busy": "上一个问题还在运行：请稍候，或按“停止”。"},
}
INSTALL_HINT = "the chat page needs gradio: pip install 'tinyagent[web]'"


def _gradio():
    """The gradio module, with its usage reports off: a local tool should not phone home."""
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    import gradio

    return gradio


def require_gradio() -> None:
    """Fail early, with the install command, when the optional gradio dependency is missing."""
    try:
        _gradio()
    except ImportError as e:
        raise ImportError(INSTALL_HINT) from e


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


class Reply:
    """One answer as chat messages: a block per step (the one being written pending), then the answer."""

    def __init__(self, lang: str):
        self.lang, self.labels = lang, LABELS[lang]
        self.steps: list[Step] = []
        self.writing = ""   # text the model is writing for the next step
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
                title += f" · {self.waiting.name} · {web_approval.LABELS[self.lang]['waiting']}"
            out.append(_message(shown(self.writing), {"title": title, "status": "pending"}))
        if done:
            out.append(_message(redact(self.answer)))
        return out

    def _block(self, step: Step, status: str | None) -> dict:
        """A step as a collapsible message: titled with its tool, the arguments as its log line."""
        name = step.action or {StepKind.FINAL_ANSWER: self.labels["final"], StepKind.FORCED_ANSWER:
                               self.labels["forced"], StepKind.NO_FORCED_ANSWER: self.labels["forced"]}.get(
                                   step.kind, str(step.kind))
        if step.kind == StepKind.REFUSED or step.edited_from is not None:
            name += f" · {self.labels['refused' if step.kind == StepKind.REFUSED else 'edited']}"
        meta = {"title": f"{self.labels['step'].format(n=step.index + 1)} · {name}",
                "duration": round(step.model_seconds + step.tool_seconds, 2)}
        if step.arguments is not None:
            meta["log"] = clip(json.dumps(step.arguments, ensure_ascii=False), 200)
        elif step.action_input:
            meta["log"] = clip(step.action_input, 200)
        if status:
            meta["status"] = status
        body = step.text.strip()
        line = observation_line(step)
        if line is not None:
            body += f"\n\n{line}"
        return _message(redact(body), redact(meta))


def _message(content: str, metadata: dict | None = None) -> dict:
    return {"role": "assistant", "content": content, **({"metadata": metadata} if metadata else {})}


class Session:
    """One browser session: its Agent, the chat as shown, and the events of the run in progress."""

    def __init__(self, factory: AgentFactory):
        self.events: queue.Queue = queue.Queue()
        self.agent = factory(on_step=lambda s: self.events.put(("step", s)),
                             on_text=lambda t: self.events.put(("text", t)))
        self.pending = web_approval.Pending(lambda kind, request: self.events.put((kind, request)))
        give_asker(self.agent.hooks, self.pending.ask)  # approvers with no one to ask: the page's card
        self.messages: Messages = []
        self.running = threading.Lock()  # one run at a time per conversation

    def stop(self) -> None:
        """End the run after the step in progress; a call waiting for approval is refused."""
        self.agent.stop()
        self.pending.cancel()

    def ask(self, question: str) -> Iterator[Messages]:
        """Run `question` in a worker thread, yielding the chat after each batch of events."""
        lang = lang_for(self.agent.lang, question)
        reply, before = Reply(lang), self.messages + [{"role": "user", "content": redact(question)}]
        outcome: dict = {}

        def work() -> None:
            try:
                outcome["result"] = self.agent.chat(question)
            except Exception as e:  # shown as a chat message; the page stays usable
                log.warning("run failed: %s", one_line(e))
                outcome["error"] = e
            finally:
                self.events.put(("done", None))

        self.events = queue.Queue()  # a fresh queue per run: nothing left over from an abandoned one
        worker = threading.Thread(target=work, name="tinyagent-web", daemon=True)
        worker.start()
        try:
            yield before
            running = True
            while running:
                running = self._apply(reply, self.events.get())
                while running and not self.events.empty():  # coalesce what arrived meanwhile
                    running = self._apply(reply, self.events.get())
                if running:
                    yield before + reply.messages()
        finally:
            if worker.is_alive():  # the page went away mid-run: end it after the step in progress
                self.stop()
                worker.join()
            reply.finish(outcome.get("result"), outcome.get("error"))
            self.messages = before + reply.messages()
        yield self.messages

    @staticmethod
    def _apply(reply: Reply, event: tuple[str, object]) -> bool:
        """Feed one event to `reply`; False once the run is over."""
        kind, value = event
        if kind == "text":
            reply.on_text(value)
        elif kind == "step":
            reply.on_step(value)
        elif kind in ("approve", "answered"):
            reply.waiting = value
        return kind != "done"


class ChatPage:
    """The sessions of one page, by Gradio session id, and what its buttons do to them."""

    def __init__(self, factory: AgentFactory, about: str = ""):
        self.factory, self.about = factory, about
        self.sessions: dict[str, Session] = {}
        self._lock = threading.Lock()

    def session(self, key: str) -> Session:
        with self._lock:
            if key not in self.sessions:
                self.sessions[key] = Session(self.factory)
            return self.sessions[key]

    def respond(self, key: str, question: str) -> Iterator[Messages | None]:
        """The chat as it grows while `question` runs; None when another run of this session is going on."""
        session = self.session(key)
        question = (question or "").strip()
        if not question:
            yield session.messages
            return
        if not session.running.acquire(blocking=False):
            yield None
            return
        try:
            yield from session.ask(question)
        finally:
            session.running.release()

    def stop(self, key: str) -> None:
        """End the session's run after the step in progress; its steps so far stay on the page."""
        session = self.sessions.get(key)
        if session is not None and session.running.locked():
            session.stop()

    def approve(self, key: str, decision: str, arguments: str = "", reason: str = "") -> bool:
        """Answer the session's call waiting for approval (run, always, edit, refuse); False when none waits."""
        verdict, session = web_approval.verdict_of(decision, arguments, reason), self.sessions.get(key)
        return session is not None and session.pending.answer(verdict)

    def card(self, key: str) -> tuple:
        """What the approval card shows now (`web_approval.Pending.card`)."""
        session = self.session(key)
        return session.pending.card(_gradio(), session.agent.lang)

    def clear(self, key: str) -> Messages:
        """Forget the conversation (stopping a run in progress first)."""
        session = self.sessions.get(key)
        if session is not None:
            self.stop(key)
            with session.running:
                session.agent.reset()
                session.messages = []
        return []

    def forget(self, key: str) -> None:
        """The browser tab closed: stop its run and drop its session."""
        self.stop(key)
        with self._lock:
            self.sessions.pop(key, None)

    def build(self) -> "gr.Blocks":
        """The page: header, chat, question box, Send / Stop / Clear."""
        gr = _gradio()

        def respond(question: str, request: gr.Request):
            for chat in self.respond(request.session_hash, question):
                if chat is None:
                    gr.Warning(LABELS[detect_lang(question)]["busy"])
                    yield gr.skip(), question, *self.card(request.session_hash)
                else:
                    yield chat, "", *self.card(request.session_hash)

        def stop(request: gr.Request) -> None:
            self.stop(request.session_hash)

        def clear(request: gr.Request) -> Messages:
            return self.clear(request.session_hash)

        def forget(request: gr.Request) -> None:
            self.forget(request.session_hash)

        with gr.Blocks(title="TinyAgent", analytics_enabled=False) as page:
            gr.Markdown(f"## TinyAgent\n{redact(self.about)}", elem_id="about")
            chat = gr.Chatbot(label="TinyAgent", elem_id="chat", height=560, feedback_options=None,
                              buttons=["copy", "copy_all"])
            with gr.Row():
                box = gr.Textbox(show_label=False, placeholder="Ask a question · 输入问题", scale=6,
                                 autofocus=True, elem_id="question")
                send = gr.Button("Send · 发送", variant="primary", scale=1, elem_id="send")
                halt = gr.Button("Stop · 停止", variant="stop", scale=1, elem_id="stop")
                wipe = gr.Button("Clear · 清空", scale=1, elem_id="clear")
            card = web_approval.Card.build(gr)
            shown = [chat, box, *card.outputs]
            box.submit(respond, [box], shown, api_name="respond", concurrency_limit=None)
            send.click(respond, [box], shown, api_visibility="private", concurrency_limit=None)
            card.wire(gr, self.approve)
            halt.click(stop, None, None, api_name="stop", concurrency_limit=None)
            wipe.click(clear, None, [chat], api_name="clear", concurrency_limit=None)
            chat.clear(clear, None, [chat], api_visibility="private", concurrency_limit=None)  # its bin icon
            page.unload(forget)
        return page


def serve(page: "gr.Blocks", host: str = "127.0.0.1", port: int = 7860, share: bool = False
          ) -> tuple[str, str | None]:
    """Start the page's server in the background; return its local URL and its public link, if shared."""
    page.queue(default_concurrency_limit=None)
    _, url, public = page.launch(server_name=host, server_port=port, share=share, prevent_thread_lock=True,
                                 quiet=True, ssr_mode=False, footer_links=["api"])
    return url, public
