"""The chat page's approval card (tinyagent.web.approval), through the running server with gradio_client:
a call waiting for approval shows in the step stream and as the card; the card's answer (through the
page's `/approve` API, what its buttons call) runs, edits or refuses it; Stop ends a run that waits."""

import json
import threading

import pytest
from live_model import PAUSE, WAIT_S, LiveModel, lookup
from test_web import Visitor, start_page, text  # noqa: F401  (start_page is a fixture)

from tinyagent.agent import Agent, ReAct
from tinyagent.agent.approval import Approver
from tinyagent.tools.tool import tool

#: ReAct from the first reply: these tests drive the loop itself (the working first: test_working.py)
CLASSIC = ReAct(working_first=False, search="tool")

pytestmark = pytest.mark.filterwarnings("ignore:::gradio.queueing")

CALL = 'Thought: look it up.\nAction: lookup\nAction Input: {"name": "Jay Chou"}'


def approving(model, policy=None):
    """The page's agent factory: lookup needs approval; the page gives the approver its card."""
    return lambda **callbacks: Agent(
        model,
        tools=[lookup],
        max_turns=3,
        approve=Approver(None, policy or {"lookup": "ask"}),
        **callbacks,
        protocol=CLASSIC,
    )


def card_of(outputs) -> tuple[str, str] | None:
    """(card text, its arguments) when the card was just shown with a call, else None."""
    _chat, _box, _key, card, arguments, _reason, _call = outputs
    return (card, arguments) if isinstance(card, str) and card else None


def keep_ids(outputs, client: Visitor) -> None:
    """Keep the session id, and the id of the call the card shows when it shows one."""
    client.key = outputs[2]
    if card_of(outputs):
        client.call = outputs[6]


def until_the_card(job, client: Visitor) -> tuple:
    """Read the job's outputs, keeping the session id, until the card shows a call; those outputs."""
    for outputs in job:
        keep_ids(outputs, client)
        if card_of(outputs):
            return outputs
    raise AssertionError("the card never showed a call")


def answer_when_asked(job, client: Visitor, *answers) -> list:
    """Every output the job streamed; each time the card shows a call, the next answer goes to /approve."""
    seen, todo = [], list(answers)
    for outputs in job:
        seen.append(outputs)
        keep_ids(outputs, client)
        if card_of(outputs) and todo:
            assert client.approve(*todo.pop(0)) is True
    seen.append(job.result())
    assert not todo, f"{len(todo)} answer(s) never asked for"
    return seen


def test_the_card_waits_then_an_edit_that_does_not_fit_is_shown_again_and_a_good_one_runs(start_page):  # noqa: F811
    model = LiveModel([CALL, "Final Answer: 1979"])
    client = Visitor(start_page(approving(model)))
    job = client.submit("When was Jay Chou born?")
    outputs = answer_when_asked(job, client, ("edit", '{"person": "Jay"}', ""), ("edit", '{"name": "周杰伦"}', ""))
    cards = [card_of(o) for o in outputs if card_of(o)]
    assert cards[0][0].startswith("Call 1 · **lookup** wants to run with these arguments.")
    assert json.loads(cards[0][1]) == {"name": "Jay Chou"}
    assert "Those arguments do not fit: bad Action Input for lookup: unknown parameter(s) 'person'" in cards[1][0]
    waiting = [
        o[0][-1]["metadata"]["title"]
        for o in outputs
        if o[0] and (o[0][-1].get("metadata") or {}).get("title", "").endswith("waiting for your approval")
    ]
    assert waiting and waiting[0] == "Step 1 · lookup · waiting for your approval"  # in the step stream too
    final = outputs[-1][0]
    assert [m["metadata"]["title"] for m in final[1:-1]] == ["Step 1 · lookup · edited", "Step 2 · final answer"]
    assert final[1]["metadata"]["log"] == '{"name": "周杰伦"}' and "Observation: 周杰伦 was born in 1979." in text(
        final[1]
    )
    assert [o[3] for o in outputs if isinstance(o[3], str)][-1] == ""  # the card was hidden once answered
    assert text(final[-1]).startswith("1979\n\n")


def test_refuse_gives_the_model_the_reason_and_always_is_not_asked_again(start_page):  # noqa: F811
    model = LiveModel(
        [CALL, CALL.replace("Jay Chou", "Faye Wong"), CALL.replace("Jay Chou", "Eason Chan"), "Final Answer: 1969"]
    )
    client = Visitor(start_page(approving(model)))
    outputs = answer_when_asked(
        client.submit("Who?"), client, ("refuse", "", "ask about Faye Wong instead"), ("always", "", "")
    )
    assert "refused, so it did not run: ask about Faye Wong instead." in model.calls[1]["messages"][-1]["content"]
    final = outputs[-1][0]
    assert [m["metadata"]["title"] for m in final[1:4]] == [
        "Step 1 · lookup · refused",
        "Step 2 · lookup",
        "Step 3 · lookup",
    ]
    assert "Observation: Eason Chan was born in 1979." in text(final[3])  # run without asking


def test_stop_refuses_the_call_waiting_and_ends_the_run(start_page):  # noqa: F811
    model = LiveModel([CALL, "Final Answer: the next question"])
    client = Visitor(start_page(approving(model)))
    job = client.submit("When?")
    until_the_card(job, client)
    client.stop()
    final = job.result()[0]
    assert len(model.calls) == 1 and [m["metadata"]["title"] for m in final[1:-1]] == ["Step 1 · lookup · refused"]
    assert "refused, so it did not run: the user stopped the run" in text(final[1])
    assert text(final[-1]).startswith("Stopped after 1 step(s).")
    assert client.approve("run") is False  # nothing waits any more
    after, _ = client.ask("Next?")
    assert text(after[-1]).startswith("the next question")


def test_a_bad_decision_is_a_clear_error(start_page):  # noqa: F811
    client = Visitor(start_page(approving(LiveModel(["Final Answer: x"]))))
    with pytest.raises(Exception, match="decision must be one of run, always, edit, refuse, not 'maybe'"):
        client.approve("maybe")


def test_a_page_that_goes_away_while_a_call_waits_refuses_it_and_frees_the_session(start_page):  # noqa: F811
    """The run waits in a worker thread on the card; the handler re-sends the chat each second, so Gradio can end it
    when the client cancels (or its page disconnects), and ending it refuses the call."""
    model = LiveModel([CALL, "Final Answer: after the cancel"])
    client = Visitor(start_page(approving(model)))
    job = client.submit("When?")
    until_the_card(job, client)
    job.cancel()
    for _ in range(600):  # "busy" (the question stays in the box) until the handler has ended the run
        chat, box = client.ask("Next?")
        if box == "":
            break
    assert len(model.calls) == 2 and text(chat[-1]).startswith("after the cancel")  # the first run asked no more
    first = [m["content"] for m in model.calls[1]["messages"] if m["role"] != "system"]
    assert first[0] == "When?" and first[-1] == "Next?"  # the cancelled run ended and went into the history


class Watched(Agent):
    """An Agent that tells the test when the page asked it to stop."""

    stopped: threading.Event

    def stop(self) -> None:
        super().stop()
        self.stopped.set()


def watched(model, stopped: threading.Event, ran: list):
    """The page's agent factory: lookup needs approval, and every call that really ran is counted in `ran`."""

    @tool
    def lookup(name: str) -> str:
        """Look up a person."""
        ran.append(name)
        return f"{name} was born in 1979."

    def factory(**callbacks):
        agent = Watched(
            model, tools=[lookup], protocol=CLASSIC, max_turns=3, approve=Approver(None, {"lookup": "ask"}), **callbacks
        )
        agent.stopped = stopped
        return agent

    return factory


WRITTEN_LATE = ["Thought: look it up.", PAUSE, '\nAction: lookup\nAction Input: {"name": "Jay Chou"}']


def test_stop_while_the_reply_is_written_refuses_its_call_without_a_card(start_page):  # noqa: F811
    """Stop comes before the call the reply holds reaches the approver: no card, the call refused, the run ended."""
    stopped, ran = threading.Event(), []
    model = LiveModel([WRITTEN_LATE, "Final Answer: the next question"])
    client = Visitor(start_page(watched(model, stopped, ran)))
    job = client.submit("When?")
    for outputs in job:
        client.key = outputs[2]
        if outputs[0] and "Thought: look it up." in text(outputs[0][-1]):
            break
    client.stop()
    assert stopped.is_set()
    model.resume.release()  # the reply ends with its call only now, after Stop
    outputs = []
    for o in job:
        assert not card_of(o), "the card showed a call of a stopped run"
        outputs.append(o)
    outputs.append(job.result())
    final = outputs[-1][0]
    assert ran == [] and len(model.calls) == 1
    assert [m["metadata"]["title"] for m in final[1:-1]] == ["Step 1 · lookup · refused"]
    assert "refused, so it did not run: the user stopped the run" in text(final[1])
    assert text(final[-1]).startswith("Stopped after 1 step(s).")
    after, _ = client.ask("Next?")  # the stop was for that run only
    assert text(after[-1]).startswith("the next question")


def test_a_tab_closed_while_the_reply_is_written_frees_the_session_and_runs_nothing(start_page):  # noqa: F811
    """The handler of a page that went away stops the run while the model still writes; the call the reply then
    holds is refused unasked, so the run ends, the session is no longer busy and its run slot is free."""
    stopped, ran = threading.Event(), []
    model = LiveModel([WRITTEN_LATE, "Final Answer: after the cancel"])
    client = Visitor(start_page(watched(model, stopped, ran), max_runs=1))
    job = client.submit("When?")
    for outputs in job:
        client.key = outputs[2]
        if outputs[0] and "Thought: look it up." in text(outputs[0][-1]):
            break
    cancel = threading.Thread(target=job.cancel)  # it returns once the handler has ended
    cancel.start()
    assert stopped.wait(WAIT_S), "the page's handler never stopped the run"
    model.resume.release()  # the reply ends with its call only now, after the stop
    cancel.join(WAIT_S)
    assert not cancel.is_alive(), "the page's handler never ended: its run waits for a card no one can see"
    for _ in range(600):  # "busy" (the question stays in the box) until the handler has ended the run
        chat, box = client.ask("Next?")
        if box == "":
            break
    assert ran == [] and text(chat[-1]).startswith("after the cancel")  # one run slot (max_runs=1): it was freed
    shown = [(m.get("metadata") or {}).get("title") for m in chat]
    assert "Step 1 · lookup · refused" in shown  # the cancelled run's steps stay on the page
    assert any("refused, so it did not run: the user stopped the run" in text(m) for m in chat)


def test_an_answer_names_its_call_and_a_late_second_click_approves_nothing(start_page):  # noqa: F811
    """Two calls in turn: the first card's id approves the first; a second click with that id while the next
    call waits is refused (False), and that call still waits for an answer that names it."""
    model = LiveModel([CALL, CALL.replace("Jay Chou", "Faye Wong"), "Final Answer: 1969"])
    client = Visitor(start_page(approving(model)))
    job = client.submit("Who?")
    until_the_card(job, client)
    first = client.call
    assert client.approve("run", call=first) is True
    for outputs in job:
        keep_ids(outputs, client)
        if card_of(outputs) and client.call != first:
            break
    assert card_of(outputs)[0].startswith(f"Call {client.call} · **lookup**") and json.loads(card_of(outputs)[1]) == {
        "name": "Faye Wong"
    }
    assert client.approve("run", call=first) is False  # the late click: that call was answered already
    assert client.approve("run", call="") is False  # an answer naming no call approves nothing either
    assert client.approve("refuse", "", "not her") is True  # the card's own id
    final = job.result()[0]
    assert [m["metadata"]["title"] for m in final[1:-1]] == [
        "Step 1 · lookup",
        "Step 2 · lookup · refused",
        "Step 3 · final answer",
    ]


def test_the_card_shows_hidden_characters_escaped_and_an_edit_of_what_it_shows_runs_the_same(start_page):  # noqa: F811
    """A right-to-left override, a directional isolate and a zero-width space in the arguments are shown as JSON
    escapes, not as themselves: what the person reads is what runs; sent back as an edit, they mean the same."""
    hidden = "Jay\u202e uohC\u2066\u200b"
    model = LiveModel([CALL.replace("Jay Chou", json.dumps(hidden)[1:-1]), "Final Answer: 1979"])
    client = Visitor(start_page(approving(model)))
    job = client.submit("When?")
    card, arguments = card_of(until_the_card(job, client))
    assert not {"\u202e", "\u2066", "\u200b"} & set(card + arguments)
    assert "\\u202e" in arguments and "\\u2066" in arguments and "\\u200b" in arguments
    assert client.approve("edit", arguments) is True
    final = job.result()[0]
    assert f"Observation: {hidden} was born in 1979." in text(final[1])
    assert final[1]["metadata"]["log"] == '{"name": "Jay\\u202e uohC\\u2066\\u200b"}'  # the step's line too


def test_pending_refuses_a_stopped_runs_calls_in_every_order_of_events():
    """Without a page: a stop between runs is not for the next one; a stop before a call is asked refuses it with no
    card; a stop while a call waits refuses it and every later call of that run; an answer naming another call is
    not taken."""
    from tinyagent.agent.approval import ApprovalRequest, Decision, Verdict
    from tinyagent.agent.results import Step
    from tinyagent.web.approval import Pending

    shown = threading.Event()
    pending = Pending(lambda kind, request: shown.set() if kind == "approve" else None)
    request = ApprovalRequest(lookup, {"name": "Jay"}, Step(index=0, text=""), None)

    def asked() -> tuple[threading.Thread, list]:
        shown.clear()
        got: list = []
        thread = threading.Thread(target=lambda: got.append(pending.ask(request)))
        thread.start()
        assert shown.wait(WAIT_S)
        return thread, got

    pending.cancel()  # Stop between runs ...
    pending.start()  # ... and the next run starts: it asks as usual
    thread, got = asked()
    assert pending.answer(Verdict.run(), "999") is False and pending.answer(Verdict.run(), pending.call) is True
    thread.join(WAIT_S)
    assert got[0].decision == Decision.RUN

    pending.cancel()  # Stop while the model still writes: the call it then asks about is refused, no card
    shown.clear()
    assert pending.ask(request).decision == Decision.REFUSE and not shown.is_set()

    pending.start()
    thread, got = asked()
    pending.cancel()  # Stop while a call waits: refused, and so is the next call of that run
    thread.join(WAIT_S)
    assert got[0] == Verdict.refuse("the user stopped the run")
    shown.clear()
    assert pending.ask(request).decision == Decision.REFUSE and not shown.is_set()
