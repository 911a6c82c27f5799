"""The chat page (tinyagent.web): its Gradio server runs for real on 127.0.0.1 and is driven through
its HTTP API with gradio_client, as another program (or the page itself) would.

The scripted models here stream their replies to `on_text` and can pause mid-reply until the test
has seen the page show that text: proof that steps stream live, with no sleeps."""
import json
import socket
import threading
import time

import pytest
from conftest import ScriptedModel
from gradio_client import Client

from tinyagent import web
from tinyagent import trace as tracing
from tinyagent.agent import Agent
from tinyagent.tools.base import tool

# gradio's queue calls a pandas option that pandas 3 deprecates: not ours to fix
pytestmark = pytest.mark.filterwarnings("ignore:::gradio.queueing")
PAUSE = object()   # in a reply given as chunks: wait here until the test calls `model.resume.release()`
WAIT_S = 30        # how long a scripted model waits for the test before failing the run


class LiveModel(ScriptedModel):
    """Scripted replies streamed to `on_text`; a reply given as a list is streamed chunk by chunk and
    waits at each PAUSE until the test releases `resume` once."""

    def __init__(self, replies, usage=(50, 5)):
        super().__init__(["".join(c for c in r if c is not PAUSE) if isinstance(r, list) else r for r in replies],
                         usage=usage)
        self.chunks = [r if isinstance(r, list) else [r] for r in replies]
        self.resume = threading.Semaphore(0)

    def generate(self, messages, stop=None, on_text=None, **kwargs):
        chunks = self.chunks[len(self.calls)]
        reply = super().generate(messages, stop=stop, **kwargs)
        for chunk in chunks:
            if chunk is PAUSE:
                assert self.resume.acquire(timeout=WAIT_S), "the test never saw the paused text on the page"
            elif on_text is not None:
                on_text(chunk)
        return reply


class _Stopped(Exception):
    pass


class StoppableAgent(Agent):
    """A shim with the contract of the lead's coming Agent.stop(), for as long as main lacks it: the
    run ends after the step in progress, stop_reason "stopped", steps kept."""

    def stop(self) -> None:
        self._stop = True

    def run(self, question, history=None):
        self._stop, self._partial, started = False, None, time.perf_counter()
        try:
            return super().run(question, history)
        except _Stopped:
            self._partial.stop_reason, self._partial.seconds = "stopped", time.perf_counter() - started
            return self._partial

    def _record(self, result, step):
        super()._record(result, step)
        if self._stop and step.final_answer is None:
            self._partial = result
            raise _Stopped


if not hasattr(Agent, "stop"):
    Agent = StoppableAgent  # noqa: F811


@tool
def lookup(name: str) -> str:
    """Look up a person."""
    return f"{name} was born in 1979."


def agents_of(model, tools=(lookup,)):
    """The page's agent factory: one Agent per browser session, all on `model`."""
    return lambda **callbacks: Agent(model, tools=list(tools), max_turns=3, **callbacks)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def start_page(monkeypatch):
    """start_page(factory) -> URL of a running page; servers are closed after the test."""
    monkeypatch.setattr(tracing, "_extra_secrets", set())
    pages = []

    def start(factory) -> str:
        page = web.ChatPage(factory, "Model: scripted.").build()
        pages.append(page)
        return web.serve(page, "127.0.0.1", free_port(), block=False)

    yield start
    for page in pages:
        page.close()


def text(message: dict) -> str:
    return "".join(part["text"] for part in message["content"])


def follow(job, *checkpoints) -> list[list[dict]]:
    """Every chat the job streamed. `checkpoints` are (predicate, action) pairs, taken in order: the
    action runs at the first chat that meets its predicate; all must be met."""
    chats, waiting = [], list(checkpoints)
    for chat, _box in job:
        chats.append(chat)
        if waiting and waiting[0][0](chat):
            waiting.pop(0)[1]()
    chats.append(job.result()[0])
    assert not waiting, f"{len(waiting)} checkpoint(s) never seen on the page"
    return chats


def pending_text(chat: list[dict]) -> str | None:
    last = chat[-1]
    return text(last) if (last.get("metadata") or {}).get("status") == "pending" else None


def test_two_turns_stream_steps_in_order_and_keep_history(start_page):
    model = LiveModel([
        ["Thought: I need to look", PAUSE, ' this up.\nAction: lookup\nAction Input: {"name": "Jay Chou"}'],
        ["Thought: I now", PAUSE, " know the final answer\nFinal Answer: 1979"],
        "Thought: The first turn named him.\nFinal Answer: Jay (2000)",
        "Final Answer: no history here",
    ])
    client = Client(start_page(agents_of(model)), verbose=False)

    chats = follow(client.submit("Which year was Jay Chou born?", api_name="/respond"),
                   (lambda chat: pending_text(chat) == "Thought: I need to look", model.resume.release),
                   (lambda chat: pending_text(chat) == "Thought: I now", model.resume.release))

    def first(predicate) -> int:
        return next(i for i, chat in enumerate(chats) if predicate(chat))

    partial = first(lambda c: pending_text(c) == "Thought: I need to look")
    observed = first(lambda c: len(c) > 1 and "Observation: Jay Chou was born in 1979." in text(c[1]))
    answered = first(lambda c: text(c[-1]).startswith("1979"))
    assert [m["role"] for m in chats[0]] == ["user"] and partial < observed < answered
    assert not any(text(m).startswith("1979") for m in chats[observed])   # the step shows before the answer
    assert (chats[observed][1]["metadata"].get("status")) != "done"    # open while the run goes on
    final = chats[-1]
    assert [m["role"] for m in final] == ["user", "assistant", "assistant", "assistant"]
    step1, step2, answer = final[1:]
    assert step1["metadata"]["title"] == "Step 1 · lookup"
    assert step1["metadata"]["log"] == '{"name": "Jay Chou"}' and "duration" in step1["metadata"]
    assert text(step1).startswith('Thought: I need to look this up.\nAction: lookup\nAction Input: {"name"')
    assert step2["metadata"]["title"] == "Step 2 · final answer"
    assert {step1["metadata"]["status"], step2["metadata"]["status"]} == {"done"}   # folded under the answer
    assert answer["metadata"] is None
    assert text(answer).startswith("1979\n\n*[2 steps, 110 tokens (100 prompt + 10 generated), ")

    second, _ = client.predict("What was his first album?", api_name="/respond")
    assert second[:4] == final and text(second[4]) == "What was his first album?"
    assert text(second[-1]).startswith("Jay (2000)\n\n*[1 step, ")
    sent = model.calls[2]["messages"]
    assert [m["content"] for m in sent if m["role"] != "system"][:3] == [
        "Which year was Jay Chou born?", "1979", "What was his first album?"]

    assert client.predict(api_name="/clear") == []
    after, _ = client.predict("Anything?", api_name="/respond")
    assert [text(m) for m in after if m["role"] == "user"] == ["Anything?"]
    assert [m["role"] for m in model.calls[3]["messages"]] == ["system", "user"]


class EchoModel(ScriptedModel):
    """Answers with every question of the conversation so far; the first `together` calls wait for each
    other, so they only finish if the server runs them at the same time."""

    def __init__(self, together: int):
        super().__init__([])
        self.barrier = threading.Barrier(together, timeout=WAIT_S)
        self.lock = threading.Lock()

    def generate(self, messages, stop=None, **kwargs):
        with self.lock:
            self.calls.append(messages)
            first_round = len(self.calls) <= self.barrier.parties
        if first_round:
            self.barrier.wait()
        asked = [m["content"] for m in messages if m["role"] == "user"]
        return "Final Answer: heard " + " | ".join(asked)


def test_two_clients_run_at_once_and_keep_separate_histories(start_page):
    url = start_page(agents_of(EchoModel(together=2)))
    alice, bob = Client(url, verbose=False), Client(url, verbose=False)
    jobs = [alice.submit("apple", api_name="/respond"), bob.submit("banana", api_name="/respond")]
    firsts = [job.result()[0] for job in jobs]   # each waited at the barrier for the other: concurrent
    assert text(firsts[0][-1]).startswith("heard apple\n") and text(firsts[1][-1]).startswith("heard banana\n")
    chat_a, _ = alice.predict("apricot", api_name="/respond")
    chat_b, _ = bob.predict("blueberry", api_name="/respond")
    assert text(chat_a[-1]).startswith("heard apple | apricot\n")
    assert text(chat_b[-1]).startswith("heard banana | blueberry\n")
    assert [text(m) for m in chat_a if m["role"] == "user"] == ["apple", "apricot"]
    assert [text(m) for m in chat_b if m["role"] == "user"] == ["banana", "blueberry"]


def test_stop_ends_the_run_after_the_step_in_progress(start_page):
    entered, release = threading.Event(), threading.Event()

    @tool
    def slow_search(query: str) -> str:
        """Search slowly."""
        entered.set()
        assert release.wait(WAIT_S), "the test never released the tool"
        return "a slow result"

    model = LiveModel([
        'Thought: search.\nAction: slow_search\nAction Input: {"query": "x"}',
        'Thought: search again.\nAction: slow_search\nAction Input: {"query": "y"}',
        "Final Answer: never reached",
    ])
    client = Client(start_page(agents_of(model, tools=[slow_search])), verbose=False)
    job = client.submit("Find x", api_name="/respond")
    assert entered.wait(WAIT_S)
    client.predict(api_name="/stop")   # returns once the stop is registered
    release.set()
    chat = job.result()[0]
    assert len(model.calls) == 1   # no second step
    assert [m["metadata"]["title"] for m in chat[1:-1]] == ["Step 1 · slow_search"]
    assert "Observation: a slow result" in text(chat[1])
    assert text(chat[-1]).startswith("Stopped after 1 step(s).\n\n*[1 step, ")
    after, _ = client.predict("Again?", api_name="/respond")   # the next question runs in full
    assert after[:len(chat)] == chat and text(after[-1]).startswith("never reached\n\n*[2 steps, ")


class FailingModel(LiveModel):
    def generate(self, messages, stop=None, on_text=None, **kwargs):
        if len(self.calls) == len(self.chunks) - 1:
            raise RuntimeError("server said: bad key sekrit-value-123\nTraceback (most recent call last): ...")
        return super().generate(messages, stop=stop, on_text=on_text, **kwargs)


def test_errors_are_chat_messages_and_secrets_never_reach_the_page(start_page, monkeypatch):
    monkeypatch.setenv("SERPER_API_KEY", "sekrit-value-123")
    model = FailingModel([
        ["Thought: my key is sekr", PAUSE, 'it-value-123.\nAction: lookup\nAction Input: {"name": "sekrit-value-123"}'],
        "unused: this call raises",
    ])
    client = Client(start_page(agents_of(model)), verbose=False)
    chats = follow(client.submit("What is my key?", api_name="/respond"),
                   (lambda chat: pending_text(chat) == "Thought: my key is ", model.resume.release))
    shown = json.dumps(chats)
    assert "sekr" not in shown and "[REDACTED]" in shown
    final = chats[-1]
    assert text(final[1]).startswith("Thought: my key is [REDACTED].") and "Observation: [REDACTED] was born" in text(final[1])
    assert text(final[-1]).startswith("Error: RuntimeError: server said: bad key [REDACTED]")
    assert "Traceback" not in shown


def test_shown_holds_back_a_tail_that_could_start_a_secret(monkeypatch):
    monkeypatch.setattr(tracing, "_extra_secrets", set())
    monkeypatch.setenv("SERPER_API_KEY", "sekrit-value-123")
    assert web.shown("key: sekrit-va") == "key: "
    assert web.shown("key: sekrit-value-123 and s") == "key: [REDACTED] and "
    assert web.shown("key: sekrit-va", final=True) == "key: sekrit-va"
    assert web.shown("plain text") == "plain text"
