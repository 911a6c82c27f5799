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
from conftest import ScriptedModel
from gradio_client import Client
from live_model import PAUSE, WAIT_S, LiveModel, agents_of, lookup
from openai_stub import OpenAIStub
from test_cli import ROOT, SEARCH_THEN_ANSWER, SECRET, TINYAGENT, free_port
from test_mcp import live_children

from tinyagent import cli, web
from tinyagent import secrets as secret_store
from tinyagent.agent import Agent
from tinyagent.tools.base import tool

# gradio's queue calls a pandas option that pandas 3 deprecates: not ours to fix
pytestmark = pytest.mark.filterwarnings("ignore:::gradio.queueing")


@pytest.fixture
def start_page(monkeypatch):
    """start_page(factory) -> URL of a running page; servers are closed after the test."""
    monkeypatch.setattr(secret_store, "_extra_secrets", set())
    pages = []

    def start(factory) -> str:
        page = web.ChatPage(factory, "Model: scripted.").build()
        pages.append(page)
        return web.serve(page, "127.0.0.1", free_port())[0]

    yield start
    for page in pages:
        page.close()


def text(message: dict) -> str:
    return "".join(part["text"] for part in message["content"])


def follow(job, *checkpoints) -> list[list[dict]]:
    """Every chat the job streamed. `checkpoints` are (predicate, action) pairs, taken in order: the
    action runs at the first chat that meets its predicate; all must be met."""
    chats, waiting = [], list(checkpoints)
    for chat, *_ in job:
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

    second, *_ = client.predict("What was his first album?", api_name="/respond")
    assert second[:4] == final and text(second[4]) == "What was his first album?"
    assert text(second[-1]).startswith("Jay (2000)\n\n*[1 step, ")
    sent = model.calls[2]["messages"]
    assert [m["content"] for m in sent if m["role"] != "system"][:3] == [
        "Which year was Jay Chou born?", "1979", "What was his first album?"]

    assert client.predict(api_name="/clear") == []
    after, *_ = client.predict("Anything?", api_name="/respond")
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
    chat_a, *_ = alice.predict("apricot", api_name="/respond")
    chat_b, *_ = bob.predict("blueberry", api_name="/respond")
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
    busy = client.predict("Meanwhile?", api_name="/respond")   # one run at a time per conversation
    assert busy[1] == "Meanwhile?" and len(model.calls) == 1    # the question stays in the box
    client.predict(api_name="/stop")   # returns once the stop is registered
    release.set()
    chat = job.result()[0]
    assert len(model.calls) == 1   # no second step
    assert [m["metadata"]["title"] for m in chat[1:-1]] == ["Step 1 · slow_search"]
    assert "Observation: a slow result" in text(chat[1])
    assert text(chat[-1]).startswith("Stopped after 1 step(s).\n\n*[1 step, ")
    after, *_ = client.predict("Again?", api_name="/respond")   # the next question runs in full
    assert after[:len(chat)] == chat and text(after[-1]).startswith("never reached\n\n*[2 steps, ")


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


@pytest.mark.parametrize("agent_class, error", [
    (Agent, "Error: RuntimeError: server said: bad key [REDACTED]\n\n*[2 steps, "),  # the model fails
    (BuggyAgent, "Error: RuntimeError: agent bug near [REDACTED]"),                  # the agent raises
])
def test_errors_are_chat_messages_and_secrets_never_reach_the_page(start_page, monkeypatch, agent_class, error):
    monkeypatch.setenv("SERPER_API_KEY", "sekrit-value-123")
    model = FailingModel([
        ["Thought: my key is sekr", PAUSE, 'it-value-123.\nAction: lookup\nAction Input: {"name": "sekrit-value-123"}'],
        "unused: this call raises",
        "Final Answer: still here",
    ])
    client = Client(start_page(lambda **callbacks: agent_class(model, tools=[lookup], **callbacks)), verbose=False)
    chats = follow(client.submit("What is my key?", api_name="/respond"),
                   (lambda chat: pending_text(chat) == "Thought: my key is ", model.resume.release))
    shown = json.dumps(chats)
    assert "sekr" not in shown and "[REDACTED]" in shown and "Traceback" not in shown
    final = chats[-1]
    assert [m["metadata"]["title"] for m in final[1:-1]] == ["Step 1 · lookup"]
    assert text(final[1]).startswith("Thought: my key is [REDACTED].")
    assert "Observation: [REDACTED] was born" in text(final[1])
    assert text(final[-1]).startswith(error) and "second line" not in text(final[-1])
    if agent_class is Agent:   # the CLI's summary line, and the chat goes on after a model error
        assert text(final[-1]).endswith(", stopped: the model failed]*")
        chat, *_ = client.predict("Still there?", api_name="/respond")
        assert text(chat[-1]).startswith("still here") and chat[:len(final)] == final


def test_shown_holds_back_a_tail_that_could_start_a_secret(monkeypatch):
    monkeypatch.setattr(secret_store, "_extra_secrets", set())
    monkeypatch.setenv("SERPER_API_KEY", "sekrit-value-123")
    assert web.shown("key: sekrit-va") == "key: "
    assert web.shown("key: sekrit-value-123 and s") == "key: [REDACTED] and "
    assert web.shown("key: sekrit-va", final=True) == "key: sekrit-va"
    assert web.shown("plain text") == "plain text"


# --- the commands: `tinyagent web` and `run_demo.py --web`, as real processes --------------------

@contextlib.contextmanager
def running(command: list[str], env: dict | None = None):
    """Start `command`; yield (process, page URL) once it says the page is up; Ctrl-C it afterwards."""
    environment = {k: v for k, v in os.environ.items() if k not in ("SERPER_API_KEY", "OPENAI_API_KEY")}
    environment.update({"HF_HUB_OFFLINE": "1", **(env or {})})
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=environment, cwd=ROOT)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in process.stderr] + [lines.put(None)],
                     daemon=True).start()
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
        args = ["--base-url", stub.base_url, "--model", "stub-model", "--tools", "calculator", "--port",
                str(free_port())]
        with running([TINYAGENT, "web", *args], env={"OPENAI_API_KEY": SECRET}) as (process, url, stderr):
            client = Client(url, verbose=False)
            chat, *_ = client.predict("What is 6*7?", api_name="/respond")
            assert "Observation: 42" in text(chat[1]) and text(chat[-1]).startswith("42\n\n*[2 steps, ")
            chat, *_ = client.predict("Which year was Jay Chou born?", api_name="/respond")
            assert text(chat[-1]).startswith("1979")
        assert process.returncode == 0
        assert stub.requests[-1]["body"]["messages"][1]["content"] == "What is 6*7?"   # the history went along
        everything = "".join(stderr) + process.stderr.read() + process.stdout.read()
        assert SECRET not in everything and "Traceback" not in everything
        assert "tinyagent: Using model stub-model at " in everything   # the model is set up before the page


def test_web_serves_the_tools_of_an_mcp_server_and_stops_it_on_exit(monkeypatch):
    model = LiveModel(['Thought: ask the clock.\nAction: get_current_time\nAction Input: {"timezone": "UTC"}',
                       "Final Answer: now"])
    monkeypatch.setattr(cli.configuration, "build_model", lambda cfg: model)
    closed, chats = [], []
    close_tools = cli.configuration.close_tools
    monkeypatch.setattr(cli.configuration, "close_tools", lambda tools: (closed.extend(tools), close_tools(tools)))

    def ask_then_close(page) -> None:  # instead of waiting for Ctrl-C
        chats.append(Client(page.local_url, verbose=False).predict("What time is it?", api_name="/respond")[0])
        page.close()

    monkeypatch.setattr(gradio.Blocks, "block_thread", ask_then_close)
    before = live_children()
    assert cli.main(["web", "--tools", "calculator", "--mcp", f"{sys.executable} -m mcp_server_time",
                     "--port", str(free_port())]) == 0
    step = chats[0][1]
    assert step["metadata"]["title"] == "Step 1 · get_current_time" and '"timezone": "UTC"' in text(step)
    assert "Observation: " in text(step) and "Error" not in text(step)
    assert {t.name_for_model for t in closed} >= {"calculator", "get_current_time", "convert_time"}
    assert live_children() == before   # the MCP server process is gone


def test_web_takes_the_model_and_agent_options_of_ask():
    done = subprocess.run([TINYAGENT, "web", "--help"], capture_output=True, text=True, check=False)
    assert done.returncode == 0
    for option in ("--config", "--model", "--base-url", "--tools", "--max-turns", "--host", "--port", "--share"):
        assert option in done.stdout


@pytest.mark.parametrize("args, code, message", [
    (["--config", "configs/missing.yaml"], 2, "tinyagent: error: configs/missing.yaml: no such config file"),
    (["--max-turns", "0"], 2, "tinyagent: error: agent.max_turns: must be at least 1, not 0"),
    (["--port", "many"], 2, "tinyagent web: error: argument --port: invalid int value: 'many'"),
])
def test_bad_options_are_one_line_errors(args, code, message, capsys):
    assert cli.main(["web", *args]) == code
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1] == message and "Traceback" not in err


def test_run_demo_web_serves_the_demo_agent(monkeypatch, capsys):
    spec = importlib.util.spec_from_file_location("run_demo", ROOT / "run_demo.py")
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    model, answers = LiveModel(["Thought: easy.\nFinal Answer: hello"]), []

    def ask_then_close(page) -> None:  # instead of waiting for Ctrl-C
        answers.append(Client(page.local_url, verbose=False).predict("Hi?", api_name="/respond")[0])
        page.close()

    monkeypatch.setattr(gradio.Blocks, "block_thread", ask_then_close)
    monkeypatch.delenv("SERPER_API_KEY", raising=False)
    assert demo.main(["--web", "--port", str(free_port())], model=model) == 0
    assert text(answers[0][-1]).startswith("hello\n\n*[1 step, ")
    assert "local_search" in model.calls[0]["messages"][0]["content"]   # the demo's config and tools
    assert "tinyagent: Chat page at http://127.0.0.1:" in capsys.readouterr().err


def test_a_port_in_use_is_a_one_line_error(capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = cli.main(["web", "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--tools", "calculator",
                         "--port", str(port)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and err[-1] == (f"tinyagent: error: could not serve the page on 127.0.0.1:{port}: the port "
                                     "is in use or not allowed (OSError); choose another with --port")


def test_without_gradio_the_command_says_how_to_install_it(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "gradio", None)   # `import gradio` now raises ImportError
    assert cli.main(["web", "--tools", "calculator"]) == 1
    assert capsys.readouterr().err.strip() == "tinyagent: error: the chat page needs gradio: pip install 'tinyagent[web]'"


def test_a_chinese_question_gets_chinese_step_titles(start_page):
    model = LiveModel(['Thought: 我需要查一下。\nAction: lookup\nAction Input: {"name": "周杰伦"}',
                       "Thought: 我现在知道最终答案了\nFinal Answer: 1979年"])
    chat, *_ = Client(start_page(agents_of(model)), verbose=False).predict("周杰伦哪年出生？", api_name="/respond")
    assert [m["metadata"]["title"] for m in chat[1:-1]] == ["第 1 步 · lookup", "第 2 步 · 最终答案"]
    assert chat[1]["metadata"]["log"] == '{"name": "周杰伦"}' and "Observation: 周杰伦 was born" in text(chat[1])
    assert text(chat[-1]).startswith("1979年\n\n*[2 steps, ")
