"""The chat page's approval card: a tool call waiting for the person at the page, with Approve, Always,
Edit and Refuse.

`Pending` is one session's side of it: the agent's approver asks it in the run's worker thread and
waits; the card's buttons (or the `/approve` API, given the page's session id) answer it from a
handler thread; the session's Stop, and a page that went away, refuse it, so a run never waits for
a page that is gone. A stopped run's later calls (the model was still writing its reply when Stop
came, or the reply holds several calls) are refused without a card, in whatever order the events come.

Each call asked about gets an id, shown on the card and sent back with its answer: an answer that
names another call (a late second click, a card that has changed since) is refused, so a person
only ever approves the call they saw. What the card shows of the call has its control, directional
and zero-width characters escaped (`\u202e`), so the text read is the text that runs.
"""

import itertools
import json
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass

from ..agent.approval import ApprovalRequest, Decision, Verdict
from ..redaction import redact
from ..text import escape_controls, lang_for

LABELS = {
    "en": {
        "waiting": "waiting for your approval",
        "card": "**{tool}** wants to run with these arguments. Approve "
        "it, approve every call of {tool}, edit the arguments, or refuse it (the model reads your reason).",
        "problem": "Those arguments do not fit: {problem}",
        "stopped": "the user stopped the run",
        "call": "Call {id}",
    },
    "zh": {
        "waiting": "等待你的批准",
        "card": "**{tool}** 要以这些参数运行。可以批准、始终批准 {tool}、修改参数，或拒绝（模型会读到你的理由）。",
        "problem": "这些参数不合适：{problem}",
        "stopped": "用户停止了运行",
        "call": "调用 {id}",
    },
}


class Pending:
    """The call a session's run waits on, if any (see the module docstring); `notify(event, request)` tells the
    page when one starts ("approve") and when it was answered ("answered")."""

    def __init__(self, notify: Callable[[str, ApprovalRequest | None], None]):
        self.notify = notify
        self.request: ApprovalRequest | None = None
        self.call: str | None = None  # the id of the call waiting
        self.shown: ApprovalRequest | None = None  # the call the card shows
        self._answer: queue.Queue | None = None
        self._ids = itertools.count(1)
        self._stopped = False  # the run was stopped: its calls are refused unasked
        self._lock = threading.Lock()

    def start(self) -> None:
        """A new run begins: a stop that came before it is not for it."""
        with self._lock:
            self._stopped = False

    def ask(self, request: ApprovalRequest) -> Verdict:
        """The approver's `ask`: show the card, wait for its answer; a stopped run's call is refused at once."""
        answer: queue.Queue = queue.Queue(maxsize=1)
        with self._lock:
            if self._stopped:
                return Verdict.refuse(LABELS["en"]["stopped"])
            self.request, self._answer, self.call = request, answer, str(next(self._ids))
        self.notify("approve", request)
        try:
            return answer.get()
        finally:
            with self._lock:
                self.request, self._answer, self.call = None, None, None
            self.notify("answered", None)

    def answer(self, verdict: Verdict, call: str) -> bool:
        """Answer the call waiting if `call` is its id (a late click finds none, or another); True when taken."""
        with self._lock:
            if self._answer is None or str(call).strip() != self.call:
                return False
            return self._put(verdict)

    def _put(self, verdict: Verdict) -> bool:
        try:
            self._answer.put_nowait(verdict)
        except queue.Full:
            return False
        return True

    def card(self, gr, lang: str) -> tuple:
        """The card's values for the call waiting (`card_values`), or skips while it shows that call already
        (so a reason being typed is kept)."""
        with self._lock:
            request, call = self.request, self.call
        if request is self.shown:
            return (gr.skip(),) * len(Card.OUTPUTS)
        self.shown = request
        return card_values(gr, request, lang, call)

    def cancel(self, lang: str = "en") -> None:
        """The run is being stopped: refuse the call waiting, if any, and every later call of this run."""
        with self._lock:
            self._stopped = True
            if self._answer is not None:
                self._put(Verdict.refuse(LABELS[lang]["stopped"]))


#: The card's buttons: (decision, label, variant).
BUTTONS = (
    ("run", "Approve · 批准", "primary"),
    ("always", "Always · 始终批准", "secondary"),
    ("edit", "Run edited · 按修改运行", "secondary"),
    ("refuse", "Refuse · 拒绝", "stop"),
)


@dataclass
class Card:
    """The card's components, under the chat: hidden until a call waits."""

    OUTPUTS = ("group", "text", "arguments", "reason", "call")  # what each update of the chat sets, in this order

    group: object
    text: object
    arguments: object
    reason: object
    call: object  # the id of the call shown, sent back with the answer
    buttons: dict

    @classmethod
    def build(cls, gr) -> "Card":
        with gr.Group(visible=False, elem_id="approval") as group:
            text = gr.Markdown(elem_id="approval-text")
            arguments = gr.Code(language="json", interactive=True, show_label=False, elem_id="approval-arguments")
            reason = gr.Textbox(
                show_label=False, placeholder="Why refuse? (the model reads it) · 拒绝的理由", elem_id="approval-reason"
            )
            call = gr.Textbox(visible=False, elem_id="approval-call")
            with gr.Row():
                buttons = {
                    decision: gr.Button(label, variant=variant, elem_id=f"approval-{decision}")
                    for decision, label, variant in BUTTONS
                }
        return cls(group, text, arguments, reason, call, buttons)

    @property
    def outputs(self) -> list:
        return [getattr(self, name) for name in self.OUTPUTS]

    def wire(self, gr, approve: Callable[[str, str, str, str, str], bool], key) -> None:
        """The buttons and the `/approve` API: each answers the call waiting in the session that `key` (the
        page's hidden session id) names, through `approve(session id, decision, arguments, reason, call id)`."""

        def api(decision: str, arguments: str, reason: str, session: str, call: str) -> bool:
            """Answer the call waiting for approval: decision run, always, edit (with arguments) or refuse;
            session: the id /respond gave; call: the id of the call the card shows (/respond's last output).
            False when that call is not the one waiting (answered already, or another)."""
            try:
                return approve(session, decision, arguments, reason, call)
            except ValueError:
                raise gr.Error(f"decision must be one of run, always, edit, refuse, not {decision!r}") from None

        def answer(decision: str):
            def click(arguments: str, reason: str, session: str, call: str) -> None:
                api(decision, arguments, reason, session, call)

            return click

        gr.api(api, api_name="approve", concurrency_limit=None)
        for decision, button in self.buttons.items():
            button.click(
                answer(decision),
                [self.arguments, self.reason, key, self.call],
                None,
                api_visibility="private",
                concurrency_limit=None,
            )


def card_values(gr, request: ApprovalRequest | None, lang: str, call: str | None = None) -> tuple:
    """The card's (visibility, text, arguments, reason, call id) for the call waiting, or hidden when none does."""
    if request is None:
        return gr.update(visible=False), "", "", "", ""
    lang = lang_for(lang, request.run.question if request.run is not None else "")
    return gr.update(visible=True), card_text(request, lang, call), arguments_text(request), "", call or ""


def verdict_of(decision: str, arguments: str = "", reason: str = "") -> Verdict:
    """The card's answer as a Verdict; ValueError for a decision that is not one."""
    decision = Decision(decision)  # ValueError names the bad value
    if decision == Decision.EDIT:
        return Verdict.edit(arguments or "{}")
    if decision == Decision.REFUSE:
        return Verdict.refuse(reason.strip())
    return Verdict.always() if decision == Decision.ALWAYS else Verdict.run()


def card_text(request: ApprovalRequest, lang: str, call: str | None = None) -> str:
    """What the card says: the call's id, the tool, and why the last edit was not taken."""
    text = LABELS[lang]["card"].format(tool=request.name)
    if call:
        text = f"{LABELS[lang]['call'].format(id=call)} · {text}"
    if request.problem:
        text += "\n\n" + LABELS[lang]["problem"].format(problem=request.problem)
    return shown(text)


def arguments_text(request: ApprovalRequest) -> str:
    """The arguments as the card's editable JSON (its escapes are JSON's: sent back, they mean the same)."""
    return shown(json.dumps(request.arguments, ensure_ascii=False, indent=1))


def shown(text: str) -> str:
    """`text` as the card shows it: redacted, every character that could hide or reorder it escaped."""
    return escape_controls(redact(text), invisible=True)
