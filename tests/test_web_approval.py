"""The chat page's approval card (tinyagent.web_approval), through the running server with gradio_client:
a call waiting for approval shows in the step stream and as the card; the card's answer (through the
page's `/approve` API, what its buttons call) runs, edits or refuses it; Stop ends a run that waits."""
import json

import pytest

from tinyagent import ReAct
from live_model import LiveModel, lookup
from test_web import Visitor, start_page, text  # noqa: F401  (start_page is a fixture)

from tinyagent.agent import Agent
from tinyagent.agent.approval import Approver

#: ReAct from the first reply: these tests drive the loop itself (the working first: test_working.py)
CLASSIC = ReAct(working_first=False)

pytestmark = pytest.mark.filterwarnings("ignore:::gradio.queueing")

CALL = 'Thought: look it up.\nAction: lookup\nAction Input: {"name": "Jay Chou"}'


def approving(model, policy=None):
    """The page's agent factory: lookup needs approval; the page gives the approver its card."""
    return lambda **callbacks: Agent(model, tools=[lookup], max_turns=3,
                                     approve=Approver(None, policy or {"lookup": "ask"}), **callbacks, protocol=CLASSIC)


def card_of(outputs) -> tuple[str, str] | None:
    """(card text, its arguments) when the card was just shown with a call, else None."""
    _chat, _box, _key, card, arguments, _reason = outputs
    return (card, arguments) if isinstance(card, str) and card else None


def until_the_card(job, client: Visitor) -> None:
    """Read the job's outputs, keeping the session id, until the card shows a call."""
    for outputs in job:
        client.key = outputs[2]
        if card_of(outputs):
            return
    raise AssertionError("the card never showed a call")


def answer_when_asked(job, client: Visitor, *answers) -> list:
    """Every output the job streamed; each time the card shows a call, the next answer goes to /approve."""
    seen, todo = [], list(answers)
    for outputs in job:
        seen.append(outputs)
        client.key = outputs[2]
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
    assert cards[0][0].startswith("**lookup** wants to run with these arguments.")
    assert json.loads(cards[0][1]) == {"name": "Jay Chou"}
    assert "Those arguments do not fit: bad Action Input for lookup: unknown parameter(s) 'person'" in cards[1][0]
    waiting = [o[0][-1]["metadata"]["title"] for o in outputs if o[0] and (o[0][-1].get("metadata") or {}).get(
        "title", "").endswith("waiting for your approval")]
    assert waiting and waiting[0] == "Step 1 · lookup · waiting for your approval"   # in the step stream too
    final = outputs[-1][0]
    assert [m["metadata"]["title"] for m in final[1:-1]] == ["Step 1 · lookup · edited", "Step 2 · final answer"]
    assert final[1]["metadata"]["log"] == '{"name": "周杰伦"}' and "Observation: 周杰伦 was born in 1979." in text(final[1])
    assert [o[3] for o in outputs if isinstance(o[3], str)][-1] == ""   # the card was hidden once answered
    assert text(final[-1]).startswith("1979\n\n")


def test_refuse_gives_the_model_the_reason_and_always_is_not_asked_again(start_page):  # noqa: F811
    model = LiveModel([CALL, CALL.replace("Jay Chou", "Faye Wong"), CALL.replace("Jay Chou", "Eason Chan"),
                       "Final Answer: 1969"])
    client = Visitor(start_page(approving(model)))
    outputs = answer_when_asked(client.submit("Who?"), client,
                                ("refuse", "", "ask about Faye Wong instead"), ("always", "", ""))
    assert "refused, so it did not run: ask about Faye Wong instead." in model.calls[1]["messages"][-1]["content"]
    final = outputs[-1][0]
    assert [m["metadata"]["title"] for m in final[1:4]] == ["Step 1 · lookup · refused", "Step 2 · lookup",
                                                            "Step 3 · lookup"]
    assert "Observation: Eason Chan was born in 1979." in text(final[3])   # run without asking


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
    assert client.approve("run") is False   # nothing waits any more
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
