"""The chat page (tinyagent.web): its Gradio server runs for real on 127.0.0.1 and is driven through
its HTTP API with gradio_client, as another program (or the page itself) would.

The scripted models here stream their replies to `on_text` and can pause mid-reply until the test
has seen the page show that text: proof that steps stream live, with no sleeps."""

import contextlib
import importlib.util
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading

import gradio
import pytest
import requests
from conftest import ScriptedModel, built_as
from gradio_client import Client
from live_model import PAUSE, WAIT_S, LiveModel, agents_of, lookup
from openai_stub import OpenAIStub
from test_cli import ROOT, SEARCH_THEN_ANSWER, SECRET, TINYAGENT, free_port
from test_mcp import live_children

from tinyagent import redaction as secret_store
from tinyagent.agent import Agent
from tinyagent.cli import commands as cli
from tinyagent.store import SQLiteStore
from tinyagent.tools.tool import tool
from tinyagent.web import page as web
from tinyagent.web import reply as web_reply

# gradio's queue calls a pandas option that pandas 3 deprecates: not ours to fix
pytestmark = pytest.mark.filterwarnings("ignore:::gradio.queueing")


@pytest.fixture
def start_page(monkeypatch):
    """start_page(factory) -> URL of a running page; servers are closed after the test."""
    monkeypatch.setattr(secret_store, "_extra_secrets", set())
    pages = []

    def start(factory, auth=None, **limits) -> str:
        page = web.ChatPage(factory, "Model: scripted.", **limits).build()
        pages.append(page)
        return web.serve(page, "127.0.0.1", free_port(), auth=auth)[0]

    yield start
    for page in pages:
        page.close()


def text(message: dict) -> str:
    return "".join(part["text"] for part in message["content"])


class Visitor:
    """One visitor of the page through its HTTP API, keeping the session id the page hands out (the page
    itself keeps it in a hidden field): /respond takes (question, id) and gives (chat, box, id, and the
    approval card's text, arguments and reason)."""

    def __init__(self, url: str, **kwargs):
        self.client, self.key = Client(url, verbose=False, **kwargs), ""
        self.call = ""  # the id of the call the approval card showed last

    def ask(self, question: str) -> tuple[list[dict], str]:
        chat, box, self.key, *_card = self.client.predict(question, self.key, api_name="/respond")
        return chat, box

    def submit(self, question: str):
        return self.client.submit(question, self.key, api_name="/respond")

    def joined(self, job) -> str:
        """The session id of a running (or finished) job: its latest output's (waiting for a first one)."""
        self.key = (job.outputs() or [next(job)])[-1][2]
        return self.key

    def stop(self) -> None:
        self.client.predict(self.key, api_name="/stop")

    def approve(self, decision: str, arguments: str = "", reason: str = "", call: str | None = None) -> bool:
        """Answer the call the card shows (`call`: its id; default the one the card showed last)."""
        call = self.call if call is None else call
        return self.client.predict(decision, arguments, reason, self.key, call, api_name="/approve")

    def clear(self) -> list:
        return self.client.predict(self.key, api_name="/clear")


def follow(job, *checkpoints, visitor: Visitor | None = None) -> list[list[dict]]:
    """Every chat the job streamed. `checkpoints` are (predicate, action) pairs, taken in order: the
    action runs at the first chat that meets its predicate; all must be met."""
    chats, waiting = [], list(checkpoints)
    for chat, *_ in job:
        chats.append(chat)
        if waiting and waiting[0][0](chat):
            waiting.pop(0)[1]()
    chats.append(job.result()[0])
    if visitor is not None:
        visitor.key = job.result()[2]
    assert not waiting, f"{len(waiting)} checkpoint(s) never seen on the page"
    return chats


def pending_text(chat: list[dict]) -> str | None:
    last = chat[-1]
    return text(last) if (last.get("metadata") or {}).get("status") == "pending" else None


def test_two_turns_stream_steps_in_order_and_keep_history(start_page):
    model = LiveModel(
        [
            ["Thought: I need to look", PAUSE, ' this up.\nAction: lookup\nAction Input: {"name": "Jay Chou"}'],
            ["Thought: I now", PAUSE, " know the final answer\nFinal Answer: 1979"],
            "Thought: The first turn named him.\nFinal Answer: Jay (2000)",
            "Final Answer: no history here",
        ]
    )
    client = Visitor(start_page(agents_of(model)))

    chats = follow(
        client.submit("Which year was Jay Chou born?"),
        (lambda chat: pending_text(chat) == "Thought: I need to look", model.resume.release),
        (lambda chat: pending_text(chat) == "Thought: I now", model.resume.release),
        visitor=client,
    )

    def first(predicate) -> int:
        return next(i for i, chat in enumerate(chats) if predicate(chat))

    partial = first(lambda c: pending_text(c) == "Thought: I need to look")
    observed = first(lambda c: len(c) > 1 and "Observation: Jay Chou was born in 1979." in text(c[1]))
    answered = first(lambda c: text(c[-1]).startswith("1979"))
    assert [m["role"] for m in chats[0]] == ["user"] and partial < observed < answered
    assert not any(text(m).startswith("1979") for m in chats[observed])  # the step shows before the answer
    assert (chats[observed][1]["metadata"].get("status")) != "done"  # open while the run goes on
    final = chats[-1]
    assert [m["role"] for m in final] == ["user", "assistant", "assistant", "assistant"]
    step1, step2, answer = final[1:]
    assert step1["metadata"]["title"] == "Step 1 · lookup"
    assert step1["metadata"]["log"] == '{"name": "Jay Chou"}' and "duration" in step1["metadata"]
    assert text(step1).startswith('Thought: I need to look this up.\nAction: lookup\nAction Input: {"name"')
    assert step2["metadata"]["title"] == "Step 2 · final answer"
    assert {step1["metadata"]["status"], step2["metadata"]["status"]} == {"done"}  # folded under the answer
    assert answer["metadata"] is None
    assert text(answer).startswith("1979\n\n*[2 steps, 110 tokens (100 prompt + 10 generated), ")

    second, _ = client.ask("What was his first album?")
    assert second[:4] == final and text(second[4]) == "What was his first album?"
    assert text(second[-1]).startswith("Jay (2000)\n\n*[1 step, ")
    sent = model.calls[2]["messages"]
    assert [m["content"] for m in sent if m["role"] != "system"][:3] == [
        "Which year was Jay Chou born?",
        "1979",
        "What was his first album?",
    ]

    assert client.clear() == []
    after, _ = client.ask("Anything?")
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
    alice, bob = Visitor(url), Visitor(url)
    jobs = [alice.submit("apple"), bob.submit("banana")]
    firsts = [job.result()[0] for job in jobs]  # each waited at the barrier for the other: concurrent
    assert alice.joined(jobs[0]) != bob.joined(jobs[1])
    assert text(firsts[0][-1]).startswith("heard apple\n") and text(firsts[1][-1]).startswith("heard banana\n")
    chat_a, _ = alice.ask("apricot")
    chat_b, _ = bob.ask("blueberry")
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

    model = LiveModel(
        [
            'Thought: search.\nAction: slow_search\nAction Input: {"query": "x"}',
            'Thought: search again.\nAction: slow_search\nAction Input: {"query": "y"}',
            "Final Answer: never reached",
        ]
    )
    client = Visitor(start_page(agents_of(model, tools=[slow_search])))
    job = client.submit("Find x")
    assert entered.wait(WAIT_S)
    client.joined(job)
    busy = client.ask("Meanwhile?")  # one run at a time per conversation
    assert busy[1] == "Meanwhile?" and len(model.calls) == 1  # the question stays in the box
    client.stop()  # returns once the stop is registered
    release.set()
    chat = job.result()[0]
    assert len(model.calls) == 1  # no second step
    assert [m["metadata"]["title"] for m in chat[1:-1]] == ["Step 1 · slow_search"]
    assert "Observation: a slow result" in text(chat[1])
    assert text(chat[-1]).startswith("Stopped after 1 step(s).\n\n*[1 step, ")
    after, _ = client.ask("Again?")  # the next question runs in full
    assert after[: len(chat)] == chat and text(after[-1]).startswith("never reached\n\n*[2 steps, ")


class FailingModel(LiveModel):
    """A LiveModel whose second call raises (its scripted reply is used up all the same)."""

    def generate(self, messages, stop=None, on_text=None, **kwargs):
        if len(self.calls) == 1:
            self.calls.append(messages)
            self.replies.pop(0)
            raise RuntimeError("server said: bad key sekrit-value-123\nTraceback (most recent call last): ...")
        return super().generate(messages, stop=stop, on_text=on_text, **kwargs)


class BuggyAgent(Agent):
    """An agent with a bug after its first step: the page must survive it too."""

    def chat(self, question):
        super().chat(question)
        raise RuntimeError("agent bug near sekrit-value-123\nsecond line")


@pytest.mark.parametrize(
    "agent_class, error",
    [
        (Agent, "Error: RuntimeError: server said: bad key [REDACTED]\n\n*[2 steps, "),  # the model fails
        (BuggyAgent, "Error: RuntimeError: agent bug near [REDACTED]"),  # the agent raises
    ],
)
def test_errors_are_chat_messages_and_secrets_never_reach_the_page(start_page, monkeypatch, agent_class, error):
    monkeypatch.setenv("SERPER_API_KEY", "sekrit-value-123")
    model = FailingModel(
        [
            [
                "Thought: my key is sekr",
                PAUSE,
                'it-value-123.\nAction: lookup\nAction Input: {"name": "sekrit-value-123"}',
            ],
            "unused: this call raises",
            "Final Answer: still here",
        ]
    )
    client = Visitor(start_page(lambda **callbacks: agent_class(model, tools=[lookup], **callbacks)))
    chats = follow(
        client.submit("What is my key?"),
        (lambda chat: pending_text(chat) == "Thought: my key is ", model.resume.release),
        visitor=client,
    )
    shown = json.dumps(chats)
    assert "sekr" not in shown and "[REDACTED]" in shown and "Traceback" not in shown
    final = chats[-1]
    assert [m["metadata"]["title"] for m in final[1:-1]] == ["Step 1 · lookup"]
    assert text(final[1]).startswith("Thought: my key is [REDACTED].")
    assert "Observation: [REDACTED] was born" in text(final[1])
    assert text(final[-1]).startswith(error) and "second line" not in text(final[-1])
    if agent_class is Agent:  # the CLI's summary line, and the chat goes on after a model error
        assert text(final[-1]).endswith(", stopped: the model failed]*")
        chat, _ = client.ask("Still there?")
        assert text(chat[-1]).startswith("still here") and chat[: len(final)] == final


def test_shown_holds_back_a_tail_that_could_start_a_secret(monkeypatch):
    monkeypatch.setattr(secret_store, "_extra_secrets", set())
    monkeypatch.setenv("SERPER_API_KEY", "sekrit-value-123")
    assert web_reply.shown("key: sekrit-va") == "key: "
    assert web_reply.shown("key: sekrit-value-123 and s") == "key: [REDACTED] and "
    assert web_reply.shown("key: sekrit-va", final=True) == "key: sekrit-va"
    assert web_reply.shown("plain text") == "plain text"


# --- whose conversation, and how much of the page -------------------------------------------------


class Memory(ScriptedModel):
    """Answers with every question of the conversation so far."""

    def generate(self, messages, stop=None, **kwargs):
        self.calls.append(messages)
        return "Final Answer: heard " + " | ".join(m["content"] for m in messages if m["role"] == "user")


def test_a_client_that_sends_anothers_session_hash_or_a_made_up_id_gets_its_own_conversation(start_page):
    url = start_page(agents_of(Memory([])))
    alice, mallory = Visitor(url), Visitor(url)
    alice.ask("my password is swordfish")
    mallory.client.session_hash = alice.client.session_hash  # Gradio's session id is the client's to choose
    for key in ("", "made-up-id", alice.key[:-1]):
        mallory.key = key
        chat, _ = mallory.ask("what did they say?")
        assert "swordfish" not in json.dumps(chat) and mallory.key not in ("", "made-up-id", alice.key)
    mallory.key = "made-up-id"
    mallory.clear()
    mallory.stop()
    chat, _ = alice.ask("and again?")
    assert text(chat[-1]).startswith("heard my password is swordfish | and again?")  # nothing reached it


def test_no_unload_handler_can_end_a_conversation(start_page):
    """Gradio calls unload handlers when anyone's heartbeat for a session hash disconnects."""
    page = web.ChatPage(agents_of(Memory([]))).build()
    assert not any(target[1] == "unload" for dependency in page.fns.values() for target in dependency.targets)


def test_a_question_over_the_length_cap_is_refused_and_stays_in_the_box(start_page):
    model = Memory([])
    visitor = Visitor(start_page(agents_of(model), max_question_chars=50))
    chat, box = visitor.ask("x" * 51)
    assert box == "x" * 51 and model.calls == []
    chat, _ = visitor.ask("y" * 50)
    assert text(chat[-1]).startswith("heard " + "y" * 50)
    assert web.ChatPage(agents_of(model), max_question_chars=50).warning("too_long", "x" * 51) == (
        "The question is too long (51 characters; the limit is 50)."
    )


def test_runs_past_the_cap_wait_in_line_and_are_told_their_place(start_page):
    from gradio_client.utils import Status

    entered, release = threading.Event(), threading.Event()

    @tool
    def slow(query: str) -> str:
        """Work slowly."""
        entered.set()
        assert release.wait(WAIT_S)
        return "done"

    model = LiveModel(['Action: slow\nAction Input: {"query": "a"}', "Final Answer: first", "Final Answer: second"])
    url = start_page(agents_of(model, tools=[slow]), max_runs=1)
    alice, bob = Visitor(url), Visitor(url)
    first = alice.submit("first question")
    assert entered.wait(WAIT_S)
    second = bob.submit("second question")
    status = second.status()
    while status.code in (Status.STARTING, Status.JOINING_QUEUE, Status.SENDING_DATA):  # until the server says
        status = second.status()
    assert (status.code, status.rank, len(model.calls)) == (Status.IN_QUEUE, 0, 1)  # first in line, not started
    release.set()
    assert text(first.result()[0][-1]).startswith("first") and text(second.result()[0][-1]).startswith("second")


def test_idle_sessions_are_forgotten_after_their_ttl():
    clock = [0.0]
    page = web.ChatPage(agents_of(Memory([])), session_ttl=60, max_sessions=10, clock=lambda: clock[0])
    key = [k for k, chat, _ in page.respond("", "hello")][-1]
    assert page.sessions.find(key) is not None
    clock[0] = 61
    list(page.respond("", "someone else"))
    assert page.sessions.find(key) is None and len(page.sessions) == 1
    for _ in range(30):  # visitors that never come back: at most the cap is kept
        list(page.respond("", "hi"))
    assert len(page.sessions) == 10


def test_a_login_keeps_out_clients_without_it(start_page):
    url = start_page(agents_of(Memory([])), auth=("alice", "correct-horse-42"))
    with pytest.raises(Exception):  # noqa: B017 - gradio_client's own error for a page it may not open
        Visitor(url).ask("hi")
    assert text(Visitor(url, auth=("alice", "correct-horse-42")).ask("hi")[0][-1]).startswith("heard hi")
    assert requests.get(f"{url}config", timeout=10).status_code == 401


def test_a_steps_argument_line_is_redacted_before_it_is_cut(monkeypatch):
    from tinyagent.agent import Step, StepKind

    monkeypatch.setattr(secret_store, "_extra_secrets", set())
    key = "sk-page-0123456789abcdefghijklmnopqrstuv"
    secret_store.register_secret(key)
    reply = web_reply.PageReply("en")
    reply.on_step(
        Step(index=0, text="Thought: x", kind=StepKind.ACTION, action="lookup", arguments={"name": "n" * 170 + key})
    )
    log = reply.messages()[0]["metadata"]["log"]
    assert log.startswith('{"name": "' + "n" * 170) and not any(key[:k] in log for k in range(4, len(key) + 1))


# --- the commands: `tinyagent web` and `run_demo.py --web`, as real processes --------------------


@contextlib.contextmanager
def running(command: list[str], env: dict | None = None):
    """Start `command`; yield (process, page URL) once it says the page is up; Ctrl-C it afterwards."""
    environment = {k: v for k, v in os.environ.items() if k not in ("SERPER_API_KEY", "OPENAI_API_KEY")}
    environment.update({"HF_HUB_OFFLINE": "1", **(env or {})})
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment, cwd=ROOT
    )
    lines: queue.Queue = queue.Queue()
    threading.Thread(
        target=lambda: [lines.put(line) for line in process.stderr] + [lines.put(None)], daemon=True
    ).start()
    seen = []
    try:
        while True:
            line = lines.get(timeout=120)
            assert line is not None, f"exited {process.wait()} before serving: {''.join(seen)}"
            seen.append(line)
            if line.startswith("tinyagent: Chat page at "):
                yield process, line.split()[4], seen
                break
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:  # fail, but leave no server behind
            process.kill()
            process.wait()
            raise


def test_tinyagent_web_serves_the_configured_model_until_ctrl_c():
    with OpenAIStub(replies=[*SEARCH_THEN_ANSWER, "Final Answer: 1979"], require_key=SECRET) as stub:
        args = [
            "--base-url",
            stub.base_url,
            "--model",
            "stub-model",
            "--tools",
            "calculator",
            "--port",
            str(free_port()),
        ]
        with running([TINYAGENT, "web", *args], env={"OPENAI_API_KEY": SECRET}) as (process, url, stderr):
            client = Visitor(url)
            chat, _ = client.ask("What is 6*7?")
            assert "Observation: 42" in text(chat[1]) and text(chat[-1]).startswith("42\n\n*[2 steps, ")
            chat, _ = client.ask("Which year was Jay Chou born?")
            assert text(chat[-1]).startswith("1979")
        assert process.returncode == 0
        sent = stub.requests[-1]["body"]["messages"]  # working first (decoded free): no system prompt before it
        assert sent[0]["content"] == "What is 6*7?" and sent[1]["content"].startswith("42")  # the history went along
        everything = "".join(stderr) + process.stderr.read() + process.stdout.read()
        assert SECRET not in everything and "Traceback" not in everything
        assert "tinyagent: Using model stub-model at " in everything  # the model is set up before the page


def test_web_serves_the_tools_of_an_mcp_server_and_stops_it_on_exit(monkeypatch):
    model = LiveModel(
        ['Thought: ask the clock.\nAction: get_current_time\nAction Input: {"timezone": "UTC"}', "Final Answer: now"]
    )
    monkeypatch.setattr(cli.configuration, "build_model", lambda cfg: model)
    closed, chats = [], []
    close_tools = cli.configuration.close_tools
    monkeypatch.setattr(cli.configuration, "close_tools", lambda tools: (closed.extend(tools), close_tools(tools)))

    def ask_then_close(page) -> None:  # instead of waiting for Ctrl-C
        chats.append(Visitor(page.local_url).ask("What time is it?")[0])
        page.close()

    monkeypatch.setattr(gradio.Blocks, "block_thread", ask_then_close)
    before = live_children()
    assert (
        cli.main(
            [
                "web",
                "--tools",
                "calculator",
                "--mcp",
                f"{sys.executable} -m mcp_server_time",
                "--port",
                str(free_port()),
            ]
        )
        == 0
    )
    step = chats[0][1]
    assert step["metadata"]["title"] == "Step 1 · get_current_time" and '"timezone": "UTC"' in text(step)
    assert "Observation: " in text(step) and "Error" not in text(step)
    assert {t.name_for_model for t in closed} >= {"calculator", "get_current_time", "convert_time"}
    assert live_children() == before  # the MCP server process is gone


def serve_once(monkeypatch, argv: list[str], visit) -> int:
    """`tinyagent web ARGV` on a free port, `visit(page)` instead of waiting for Ctrl-C; the exit code."""
    monkeypatch.setattr(cli.configuration, "build_model", built_as(Memory([])))

    def visit_then_close(page) -> None:
        try:
            visit(page)
        finally:
            page.close()

    monkeypatch.setattr(gradio.Blocks, "block_thread", visit_then_close)
    return cli.main(["web", "--tools", "calculator", "--port", str(free_port()), *argv])


def test_credentials_in_the_base_url_reach_neither_the_page_nor_its_config(monkeypatch, capsys):
    monkeypatch.setattr(secret_store, "_extra_secrets", set())
    password, key, seen = "pw-for-the-page-9931", "qk-page-5566aa", []
    url = f"http://bob:{password}@127.0.0.1:9/v1?api-key={key}"

    def visit(page) -> None:
        seen.append(requests.get(f"{page.local_url}config", timeout=10).text)
        seen.append(json.dumps(Visitor(page.local_url).ask("hi")[0]))

    assert serve_once(monkeypatch, ["--base-url", url, "--model", "m"], visit) == 0
    seen.append(capsys.readouterr().err)
    assert "Model: model m at http://[REDACTED]@127.0.0.1:9/v1?api-key=[REDACTED]" in seen[0]
    assert not any(password in text or key in text or "bob:" in text for text in seen)


@pytest.mark.parametrize(
    "argv, warned",
    [
        (["--host", "0.0.0.0"], "open to other machines (0.0.0.0) without a login"),
        (["--host", "127.0.0.1"], None),
        (["--host", "0.0.0.0", "--auth", "alice:correct-horse-42"], None),
    ],
)
def test_a_page_open_beyond_this_machine_without_a_login_gets_a_warning(monkeypatch, capsys, argv, warned):
    answers = []

    def visit(page) -> None:
        login = {"auth": ("alice", "correct-horse-42")} if "--auth" in argv else {}
        answers.append(Visitor(page.local_url, **login).ask("hi")[0])

    assert serve_once(monkeypatch, argv, visit) == 0
    err = capsys.readouterr().err
    assert text(answers[0][-1]).startswith("heard hi") and "correct-horse-42" not in err
    assert (warned in err) if warned else "without a login" not in err


def test_a_login_takes_its_password_from_the_environment(monkeypatch, capsys):
    monkeypatch.setattr(secret_store, "_extra_secrets", set())
    assert cli.main(["web", "--auth", "alice", "--tools", "calculator"]) == 2
    assert capsys.readouterr().err.strip() == (
        "tinyagent: error: web.auth_user: a login needs a user and a password: "
        "--auth USER:PASSWORD, or the password in TINYAGENT_WEB_PASSWORD"
    )
    monkeypatch.setenv("TINYAGENT_WEB_PASSWORD", "from-the-env-77")
    answers = []
    visit = lambda page: answers.append(Visitor(page.local_url, auth=("alice", "from-the-env-77")).ask("hi")[0])  # noqa: E731
    assert serve_once(monkeypatch, ["--auth", "alice"], visit) == 0
    assert text(answers[0][-1]).startswith("heard hi") and "from-the-env-77" in secret_store.secrets()


def test_web_takes_the_model_and_agent_options_of_ask():
    done = subprocess.run([TINYAGENT, "web", "--help"], capture_output=True, text=True, check=False)
    assert done.returncode == 0
    for option in (
        "--config",
        "--model",
        "--base-url",
        "--tools",
        "--max-turns",
        "--host",
        "--port",
        "--share",
        "--auth",
        "--max-question-chars",
        "--max-sessions",
        "--session-ttl",
        "--max-runs",
    ):
        assert option in done.stdout


@pytest.mark.parametrize(
    "args, code, message",
    [
        (["--config", "configs/missing.yaml"], 2, "tinyagent: error: configs/missing.yaml: no such config file"),
        (["--max-turns", "0"], 2, "tinyagent: error: agent.max_turns: must be at least 1, not 0"),
        (["--port", "many"], 2, "tinyagent web: error: argument --port: invalid int value: 'many'"),
    ],
)
def test_bad_options_are_one_line_errors(args, code, message, capsys):
    assert cli.main(["web", *args]) == code
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1] == message and "Traceback" not in err


def test_run_demo_web_serves_the_demo_agent(monkeypatch, capsys):
    spec = importlib.util.spec_from_file_location("run_demo", ROOT / "run_demo.py")
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    model, answers = LiveModel(["Thought: easy.\nFinal Answer: hello"]), []
    model.prefers_constrained = True  # as the embedded model the demo runs

    def ask_then_close(page) -> None:  # instead of waiting for Ctrl-C
        answers.append(Visitor(page.local_url).ask("Hi?")[0])
        page.close()

    monkeypatch.setattr(gradio.Blocks, "block_thread", ask_then_close)
    monkeypatch.delenv("SERPER_API_KEY", raising=False)
    assert demo.main(["--web", "--port", str(free_port())], model=model) == 0
    # the demo searches the question first (twice: "Hi?", then its words, find nothing), then the model answers
    assert text(answers[0][-1]).startswith("hello\n\n*[3 steps, ")
    assert "local_search" in model.calls[0]["messages"][0]["content"]  # the demo's config and tools
    assert "tinyagent: Chat page at http://127.0.0.1:" in capsys.readouterr().err


def test_a_port_in_use_is_a_one_line_error(capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = cli.main(
            ["web", "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--tools", "calculator", "--port", str(port)]
        )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and err[-1] == (
        f"tinyagent: error: could not serve the page on 127.0.0.1:{port}: the port "
        "is in use or not allowed (OSError); choose another with --port"
    )


def test_without_gradio_the_command_says_how_to_install_it(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "gradio", None)  # `import gradio` now raises ImportError
    assert cli.main(["web", "--tools", "calculator"]) == 1
    assert (
        capsys.readouterr().err.strip() == "tinyagent: error: the chat page needs gradio: pip install 'tinyagent[web]'"
    )


def test_a_chinese_question_gets_chinese_step_titles(start_page):
    model = LiveModel(
        [
            'Thought: 我需要查一下。\nAction: lookup\nAction Input: {"name": "周杰伦"}',
            "Thought: 我现在知道最终答案了\nFinal Answer: 1979年",
        ]
    )
    chat, _ = Visitor(start_page(agents_of(model))).ask("周杰伦哪年出生？")
    assert [m["metadata"]["title"] for m in chat[1:-1]] == ["第 1 步 · lookup", "第 2 步 · 最终答案"]
    assert chat[1]["metadata"]["log"] == '{"name": "周杰伦"}' and "Observation: 周杰伦 was born" in text(chat[1])
    assert text(chat[-1]).startswith("1979年\n\n*[2 steps, ")


def test_the_answer_lists_the_sources_of_its_passages(start_page):
    """A corpus folder on the page: the answer shows, under it, where its passages came from."""
    from tinyagent.tools import LocalSearch

    docs = LocalSearch(ROOT / "examples" / "docs")
    model = LiveModel(
        [
            'Thought: I will search.\nAction: local_search\nAction Input: {"search_query": "error E2"}',
            "Thought: I now know the final answer\nFinal Answer: The base cannot sense the kettle.",
            'Thought: 搜索。\nAction: local_search\nAction Input: {"search_query": "保修期"}',
            "Thought: 我现在知道最终答案了\nFinal Answer: 保修两年。",
        ]
    )
    visitor = Visitor(start_page(agents_of(model, tools=[docs])))
    chat, _ = visitor.ask("What does error E2 mean?")
    assert "Observation: [1] kettle-manual.pdf p. 3\nError codes" in text(chat[1])
    assert text(chat[-1]).startswith(
        "The base cannot sense the kettle.\n\nSources:\n- kettle-manual.pdf p. 3\n\n*[2 steps"
    )
    chat, _ = visitor.ask("保修期多长？")
    assert text(chat[-1]).startswith("保修两年。\n\n出处：\n- zh/常见问题.md § 保修期多长？\n\n*[2 steps")


# --- conversations kept in the conversation store (web.store) ------------------------------------------


def test_with_a_store_a_conversation_comes_back_after_a_restart(start_page, tmp_path):
    path = tmp_path / "c.sqlite3"
    url = start_page(agents_of(Memory([])), store=SQLiteStore(path))
    visitor = Visitor(url)
    shown, _ = visitor.ask("my name is Ada")
    restarted = start_page(agents_of(Memory([])), store=SQLiteStore(path))  # a new server, the same file
    again = Visitor(restarted)
    again.key = visitor.key  # the tab kept its conversation's id
    chat, _ = again.ask("what is my name?")
    assert again.key == visitor.key
    assert chat[: len(shown)] == shown  # the turn before the restart, as it was shown
    assert text(chat[-1]).startswith("heard my name is Ada | what is my name?")  # the agent has its history
    stranger = Visitor(restarted)
    chat, _ = stranger.ask("hello")
    assert text(chat[-1]).startswith("heard hello") and "Ada" not in json.dumps(chat)
    stranger.key = visitor.key
    stranger.clear()  # Clear forgets it in the store too
    assert SQLiteStore(path).load(visitor.key, owner=web.owner_of(None)) == []


def test_with_a_login_the_page_opens_on_the_users_latest_conversation_and_no_one_elses(start_page, tmp_path):
    path, login = tmp_path / "c.sqlite3", ("alice", "correct-horse-42")
    alice = Visitor(start_page(agents_of(Memory([])), auth=login, store=SQLiteStore(path)), auth=login)
    alice.ask("remember 7")
    fresh = Visitor(start_page(agents_of(Memory([])), auth=login, store=SQLiteStore(path)), auth=login)
    chat, fresh.key = fresh.client.predict(api_name="/restore")  # what a page that opens asks for
    assert fresh.key == alice.key and text(chat[-1]).startswith("heard remember 7")
    chat, _ = fresh.ask("and?")
    assert text(chat[-1]).startswith("heard remember 7 | and?")
    page = web.ChatPage(agents_of(Memory([])), store=SQLiteStore(path))  # bob, on the same store
    assert page.latest("bob") == ([], "") and page.latest(None) == ([], "")
    *_, (key, chat, label) = page.respond(alice.key, "what was it?", user="bob")
    assert label is None and key != alice.key and "remember" not in json.dumps(chat)
    assert page.latest("alice")[1] == alice.key
