"""The chat page (`tinyagent web`): each reply's Thought, Action and Observation stream into a
Gradio chatbot as the agent works, each step a block that folds away once the answer is there
(the messages: web_reply.py).

One model serves every browser session; each session (a browser tab, or a gradio_client Client)
gets its own Agent, so its own conversation, under an id the server makes (sessions.py) and the
page keeps in a hidden field: Gradio's session hash is chosen by the client, so it keys nothing.
Up to `max_runs` questions run at once (a model that cannot run two generations at once serialises
them itself); more wait in Gradio's queue, which shows each its place. Questions are at most
`max_question_chars` long. A tool call waiting for approval shows in the step stream and as a card
under the chat (approval.py). Everything shown passes through `redact`.
Gradio is imported only when a page is built: `pip install 'tinyagent[web]'`.
"""

import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from ..agent import Agent
from ..agent.approval import give_asker
from ..redaction import redact
from ..store import ConversationStore, StoreError
from ..text import detect_lang, lang_for, one_line
from . import approval
from .reply import LABELS, Messages, PageReply, replayed
from .sessions import DEFAULT_MAX_SESSIONS, DEFAULT_SESSION_TTL, SessionsFull, SessionStore

if TYPE_CHECKING:
    import gradio as gr

log = logging.getLogger(__name__)

#: factory(on_step=..., on_text=...) -> a new Agent for one browser session
AgentFactory = Callable[..., Agent]

DEFAULT_MAX_QUESTION_CHARS = 4000
DEFAULT_MAX_RUNS = 4
#: While a run sends nothing (a tool working, a call waiting for approval), the chat is sent again this
#: often, so Gradio can end the handler of a page that went away (it can only at a yield).
IDLE_YIELD_S = 1.0
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


class Session:
    """One browser session: its Agent, the chat as shown, and the events of the run in progress."""

    def __init__(self, factory: AgentFactory):
        self.events: queue.Queue = queue.Queue()
        self.agent = factory(
            on_step=lambda s: self.events.put(("step", s)), on_text=lambda t: self.events.put(("text", t))
        )
        self.pending = approval.Pending(lambda kind, request: self.events.put((kind, request)))
        give_asker(self.agent.hooks, self.pending.ask)  # approvers with no one to ask: the page's card
        self.messages: Messages = []
        self.owner = ""  # whose conversation it is in the conversation store
        self.keep: Callable | None = None  # keep(question, result): the turn into the conversation store
        self.running = threading.Lock()  # one run at a time per conversation
        self._state = threading.Lock()  # orders `stop` with the start and end of a run
        self._in_run = False

    def stop(self) -> None:
        """End the run in progress after its current step (also one about to start), refusing the call that
        waits for approval and every later call of the run (one the model is still writing too); else nothing."""
        with self._state:
            if self._in_run:
                self.agent.stop()
            self.pending.cancel()

    def ask(self, question: str) -> Iterator[Messages]:
        """Run `question` in a worker thread, yielding the chat after each batch of events."""
        lang = lang_for(self.agent.lang, question)
        reply, before = PageReply(lang), self.messages + [{"role": "user", "content": redact(question)}]
        outcome: dict = {}

        def work() -> None:
            try:
                outcome["result"] = self.agent.chat(question)
                self._kept(question, outcome["result"])
            except Exception as e:  # shown as a chat message; the page stays usable
                log.warning("run failed: %s", one_line(e))
                outcome["error"] = e
            finally:
                with self._state:
                    self._in_run = False
                    self.agent.cancel_stop()  # a stop that came as the run ended: not for the next one
                self.events.put(("done", None))

        self.events = queue.Queue()  # a fresh queue per run: nothing left over from an abandoned one
        with self._state:
            self._in_run = True
            self.pending.start()
        worker = threading.Thread(target=work, name="tinyagent-web", daemon=True)
        worker.start()
        try:
            yield before
            running = True
            while running:
                try:
                    running = self._apply(reply, self.events.get(timeout=IDLE_YIELD_S))
                except queue.Empty:  # nothing new: the same chat again, a moment for Gradio to end us
                    pass
                while running and not self.events.empty():  # coalesce what arrived meanwhile
                    running = self._apply(reply, self.events.get())
                if running:
                    yield before + reply.messages()
        finally:
            if worker.is_alive():  # the page went away mid-run: end it after the step in progress
                self.stop()
                worker.join()
            while not self.events.empty():  # what the run did since the page stopped reading: kept in the chat
                self._apply(reply, self.events.get())
            reply.finish(outcome.get("result"), outcome.get("error"))
            self.messages = before + reply.messages()
        yield self.messages

    def _kept(self, question: str, result) -> None:
        """The answered turn written to the conversation store, if there is one (a failure there is logged:
        the answer is shown all the same)."""
        if self.keep is not None:
            try:
                self.keep(question, result)
            except StoreError as e:
                log.warning("%s", e)

    @staticmethod
    def _apply(reply: PageReply, event: tuple[str, object]) -> bool:
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
    """The sessions of one page, by the ids the server gave them, and what its buttons do to them.

    With a conversation `store`, each answered turn is written there under the session's id and the login
    user (`owner_of`), and a conversation the server has forgotten (a restart, the TTL) comes back from it
    when its id is sent again; a login user's page opens on their latest conversation (`latest`)."""

    def __init__(
        self,
        factory: AgentFactory,
        about: str = "",
        max_question_chars: int = DEFAULT_MAX_QUESTION_CHARS,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
        session_ttl: float = DEFAULT_SESSION_TTL,
        max_runs: int = DEFAULT_MAX_RUNS,
        clock: Callable[[], float] = time.monotonic,
        store: ConversationStore | None = None,
    ):
        self.factory, self.about, self.store = factory, about, store
        self.max_question_chars, self.max_runs = max_question_chars, max_runs
        self.sessions: SessionStore[Session] = SessionStore(
            lambda: Session(factory),
            max_sessions,
            session_ttl,
            busy=lambda s: s.running.locked(),
            on_drop=lambda s: s.stop(),
            clock=clock,
        )

    def respond(
        self, key: str, question: str, user: str | None = None
    ) -> Iterator[tuple[str, Messages | None, str | None]]:
        """(session id, the chat as it grows, None) while `question` runs; a label of LABELS instead of the
        chat when it cannot run: "busy" (this session runs one), "too_long", "full" (no room for a session).
        `user` is the login user, if any."""
        question = (question or "").strip()
        if len(question) > self.max_question_chars:
            yield key, None, "too_long"
            return
        key = self._own(key, owner_of(user))
        if not question:
            session = self.sessions.find(key)
            yield key, session.messages if session is not None else [], None
            return
        try:
            key, session, new = self.sessions.get(key)
        except SessionsFull:
            yield key, None, "full"
            return
        if new:
            self._attach(key, session, owner_of(user))
        if not session.running.acquire(blocking=False):
            yield key, None, "busy"
            return
        try:
            for chat in session.ask(question):
                yield key, chat, None
        finally:
            session.running.release()
            self.sessions.touch(key)

    def latest(self, user: str | None) -> tuple[Messages, str]:
        """(chat, session id) of the login user's latest stored conversation, for a page that opens; nothing
        without a login (anyone could open the page) or a store."""
        if not user or self.store is None:
            return [], ""
        try:
            listed = self.store.conversations(owner=owner_of(user))
        except StoreError as e:
            log.warning("%s", e)
            return [], ""
        key = self._own(listed[0].name, owner_of(user)) if listed else ""
        session = self.sessions.find(key)
        return (session.messages, key) if session is not None else ([], "")

    def _own(self, key: str | None, owner: str) -> str:
        """`key` when it names a conversation of `owner` (brought back from the store if the server forgot
        it), else "" (a new one will be made)."""
        session = self.sessions.find(key)
        if session is None and key and self.store is not None:
            try:
                turns = self.store.turns(key, owner=owner)
            except StoreError as e:
                log.warning("%s", e)
                turns = []
            if turns:
                session = Session(self.factory)
                session.agent.history = [(t.question, t.answer) for t in turns]
                session.messages = [m for t in turns for m in replayed(t.question, t.result())]
                self._attach(key, session, owner)
                self.sessions.adopt(key, session)
        return key if session is not None and session.owner == owner else ""

    def _attach(self, key: str, session: Session, owner: str) -> None:
        session.owner = owner
        if self.store is not None:
            session.keep = lambda question, result: self.store.append(key, question, result, owner=owner)

    def warning(self, label: str, question: str) -> str:
        """What the page says when a question cannot run (`respond`'s label), in the question's language."""
        return LABELS[detect_lang(question)][label].format(n=len(question.strip()), limit=self.max_question_chars)

    def stop(self, key: str) -> None:
        """End the session's run after the step in progress; its steps so far stay on the page."""
        session = self.sessions.find(key)
        if session is not None:
            session.stop()

    def approve(self, key: str, decision: str, arguments: str = "", reason: str = "", call: str = "") -> bool:
        """Answer the session's call waiting for approval (run, always, edit, refuse), if `call` is its id; False
        when none waits or another does."""
        verdict, session = approval.verdict_of(decision, arguments, reason), self.sessions.find(key)
        return session is not None and session.pending.answer(verdict, call)

    def card(self, key: str) -> tuple:
        """What the approval card shows now (`approval.Pending.card`); hidden for no session."""
        session = self.sessions.find(key)
        if session is None:
            return approval.card_values(_gradio(), None, "en")
        return session.pending.card(_gradio(), session.agent.lang)

    def clear(self, key: str) -> Messages:
        """Forget the conversation (stopping a run in progress first)."""
        session = self.sessions.find(key)
        if session is not None:
            session.stop()
            with session.running:
                session.agent.reset()
                session.messages = []
                if self.store is not None:
                    try:
                        self.store.forget(key, owner=session.owner)
                    except StoreError as e:
                        log.warning("%s", e)
        return []

    def build(self) -> "gr.Blocks":
        """The page: header, chat, question box, Send / Stop / Clear, and the hidden session id."""
        gr = _gradio()

        def respond(question: str, asked_key: str, request: gr.Request):
            for key, chat, label in self.respond(asked_key, question, request.username):
                if label is not None:
                    gr.Warning(self.warning(label, question))
                    yield gr.skip(), question, key, *self.card(key)
                else:
                    yield chat, "", key, *self.card(key)

        def latest(request: gr.Request):
            return self.latest(request.username)

        with gr.Blocks(title="TinyAgent", analytics_enabled=False) as page:
            gr.Markdown(f"## TinyAgent\n{redact(self.about)}", elem_id="about")
            chat = gr.Chatbot(
                label="TinyAgent", elem_id="chat", height=560, feedback_options=None, buttons=["copy", "copy_all"]
            )
            with gr.Row():
                box = gr.Textbox(
                    show_label=False,
                    placeholder="Ask a question · 输入问题",
                    scale=6,
                    autofocus=True,
                    elem_id="question",
                    max_length=self.max_question_chars,
                )
                send = gr.Button("Send · 发送", variant="primary", scale=1, elem_id="send")
                halt = gr.Button("Stop · 停止", variant="stop", scale=1, elem_id="stop")
                wipe = gr.Button("Clear · 清空", scale=1, elem_id="clear")
            card = approval.Card.build(gr)
            key = gr.Textbox(visible=False, elem_id="session")  # the server's id of this tab's conversation
            runs = {"concurrency_limit": self.max_runs, "concurrency_id": "runs"}  # more wait in the queue
            shown = [chat, box, key, *card.outputs]
            box.submit(respond, [box, key], shown, api_name="respond", **runs)
            send.click(respond, [box, key], shown, api_visibility="private", **runs)
            card.wire(gr, self.approve, key)
            halt.click(self.stop, [key], None, api_name="stop", concurrency_limit=None)
            wipe.click(self.clear, [key], [chat], api_name="clear", concurrency_limit=None)
            chat.clear(self.clear, [key], [chat], api_visibility="private", concurrency_limit=None)  # its bin icon
            if self.store is not None:  # a login user's page opens on their latest conversation
                page.load(latest, None, [chat, key], api_name="restore")
        return page


def owner_of(user: str | None) -> str:
    """The page's conversations in the store belong to "web:USER" with a login, "web" without: apart from
    each other and from `tinyagent chat --session` (owner "")."""
    return f"web:{user}" if user else "web"


def serve(
    page: "gr.Blocks",
    host: str = "127.0.0.1",
    port: int = 7860,
    share: bool = False,
    auth: tuple[str, str] | None = None,
) -> tuple[str, str | None]:
    """Start the page's server in the background; return its local URL and its public link, if shared.
    `auth` (user, password): a login page first, and every route refused without it."""
    page.queue(default_concurrency_limit=None)
    _, url, public = page.launch(
        server_name=host,
        server_port=port,
        share=share,
        prevent_thread_lock=True,
        quiet=True,
        ssr_mode=False,
        footer_links=["api"],
        auth=[auth] if auth else None,
    )
    return url, public
