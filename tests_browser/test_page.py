"""The chat page in a real browser: headless chromium (the system's, `apt-get install chromium`)
driven by playwright. Run with `make test-browser`; `make test` does not collect this folder.

A person's view: type a question, watch the step appear and stream, see it fold away under the
answer, open it again, ask a follow-up, chat in a second tab, clear the chat; approve a tool call
on its card after editing its arguments, and refuse the next one with a reason."""

import re
import shutil
import socket
import sys
import threading
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from live_model import PAUSE, LiveModel, agents_of, lookup  # noqa: E402  (the scripted models of tests/)
from playwright.sync_api import expect, sync_playwright  # noqa: E402  (make test-browser installs it)

from tinyagent.agent import Agent  # noqa: E402
from tinyagent.agent.approval import Approver  # noqa: E402
from tinyagent.web import page as web

pytestmark = pytest.mark.filterwarnings("ignore:::gradio.queueing")

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
TIMEOUT_MS = 30_000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def browser():
    if not Path(CHROMIUM).exists():
        pytest.fail("no chromium: on Debian, apt-get install chromium (see README, 'The chat page')")
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield chromium
        chromium.close()


def serve(chat_page) -> tuple:
    """The page's server, started on a free port, and its URL."""
    server = chat_page.build()
    return server, web.serve(server, "127.0.0.1", free_port())[0]


def open_page(browser, url: str):
    page = browser.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    page.goto(url)
    return page


def test_ask_watch_the_steps_fold_and_follow_up(browser):
    model = LiveModel(
        [
            ["Thought: I need to look", PAUSE, ' this up.\nAction: lookup\nAction Input: {"name": "Jay Chou"}'],
            ["Thought: I now", PAUSE, " know the final answer\nFinal Answer: 1979"],
            "Thought: The first turn named him.\nFinal Answer: Jay (2000)",
            "Final Answer: from the second tab",
            "Final Answer: still the first tab",
            "Final Answer: the first tab again",
            "Final Answer: after the Clear button",
            "Final Answer: after the bin icon",
        ]
    )
    clock = [0.0]
    chat_page = web.ChatPage(agents_of(model), "Model: scripted.", session_ttl=600, clock=lambda: clock[0])
    clear, cleared = chat_page.clear, threading.Semaphore(0)
    chat_page.clear = lambda key: (clear(key), cleared.release())[0]  # so the test knows the server did it
    server, url = serve(chat_page)
    try:
        page = open_page(browser, url)
        steps = page.locator("#chat .thought-group")
        question = page.locator("#question textarea")

        question.fill("Which year was Jay Chou born?")
        question.press("Enter")
        expect(steps.first).to_contain_text("Thought: I need to look")  # streaming, half written
        expect(steps.first).to_contain_text("Step 1")
        expect(steps).to_have_count(1)
        model.resume.release()

        observation = page.get_by_text("Observation: Jay Chou was born in 1979.")
        expect(observation).to_be_visible()  # the tool returned; still open
        expect(steps.first).to_contain_text("Step 1 · lookup")
        expect(steps.first).to_contain_text('{"name": "Jay Chou"}')
        expect(steps.nth(1)).to_contain_text("Thought: I now")  # the next step is being written
        model.resume.release()

        expect(page.get_by_text("1979", exact=True)).to_be_visible()  # the answer as the message
        expect(page.get_by_text(re.compile(r"^\[2 steps, 110 tokens \(100 prompt \+ 10 generated\), "))).to_be_visible()
        expect(steps).to_have_count(2)
        expect(observation).to_be_hidden()  # the steps folded away
        expect(page.get_by_text("Thought: I now know the final answer")).to_be_hidden()
        steps.first.locator(".title").click()  # and open again on a click
        expect(observation).to_be_visible()

        question.fill("What was his first album?")
        page.locator("#send").click()
        expect(page.get_by_text("Jay (2000)", exact=True)).to_be_visible()
        expect(page.locator("#chat [data-testid=user]")).to_have_count(2)
        assert [m["content"] for m in model.calls[2]["messages"] if m["role"] != "system"] == [
            "Which year was Jay Chou born?",
            "1979",
            "What was his first album?",
        ]  # history went along

        users = page.locator("#chat [data-testid=user]")
        tab = open_page(browser, url)  # a second tab: its own conversation
        tab.locator("#question textarea").fill("Another tab?")
        tab.locator("#question textarea").press("Enter")
        expect(tab.get_by_text("from the second tab", exact=True)).to_be_visible()
        expect(tab.locator("#chat [data-testid=user]")).to_have_count(1)
        assert [m["role"] for m in model.calls[-1]["messages"]] == ["system", "user"]
        assert len(chat_page.sessions) == 2
        tab.close()  # its session stays until idle for session_ttl
        for now, answer in ((300, "still the first tab"), (700, "the first tab again")):
            clock[0] = now
            question.fill("Still me?")
            question.press("Enter")  # at 700 s the second tab's session is idle past 600 s
            expect(page.get_by_text(answer, exact=True)).to_be_visible()
        assert len(chat_page.sessions) == 1
        expect(users).to_have_count(4)

        for button, answer in (
            (page.locator("#clear"), "after the Clear button"),
            (page.get_by_role("button", name="Clear", exact=True), "after the bin icon"),
        ):
            button.click()  # either one forgets the conversation
            expect(users).to_have_count(0)
            assert cleared.acquire(timeout=30)
            question.fill("Anything?")
            question.press("Enter")
            expect(page.get_by_text(answer, exact=True)).to_be_visible()
            expect(users).to_have_count(1)
            assert [m["role"] for m in model.calls[-1]["messages"]] == ["system", "user"]
    finally:
        server.close()


def test_approve_edit_and_refuse_a_tool_call_on_its_card(browser):
    model = LiveModel(
        [
            'Thought: look.\nAction: lookup\nAction Input: {"name": "Jay Chou"}',
            'Thought: and her.\nAction: lookup\nAction Input: {"name": "Faye Wong"}',
            "Final Answer: both born in 1979 and 1969",
        ]
    )
    chat_page = web.ChatPage(
        lambda **callbacks: Agent(
            model, tools=[lookup], max_turns=3, approve=Approver(None, {"lookup": "ask"}), **callbacks
        )
    )
    server, url = serve(chat_page)
    try:
        page = open_page(browser, url)
        card = page.locator("#approval").first  # gradio puts a group's id on two nested elements
        expect(card).to_be_hidden()
        page.locator("#question textarea").fill("When were they born?")
        page.locator("#question textarea").press("Enter")

        expect(card).to_be_visible()  # the run waits for the person
        expect(page.locator("#approval-text")).to_contain_text("lookup wants to run with these arguments")
        expect(page.locator("#chat .thought-group").first).to_contain_text("waiting for your approval")
        editor = page.locator("#approval-arguments .cm-content")
        expect(editor).to_contain_text('"name": "Jay Chou"')
        editor.click()
        page.keyboard.press("Control+a")
        page.keyboard.type('{"name": "周杰伦"}')
        page.locator("#approval-edit").click()  # run with the edited arguments
        expect(page.get_by_text("Observation: 周杰伦 was born in 1979.")).to_be_visible()

        expect(page.locator("#approval-text")).to_be_visible()  # the second call: its own card
        expect(editor).to_contain_text('"name": "Faye Wong"')
        page.locator("#approval-reason textarea").fill("not her")
        page.locator("#approval-refuse").click()
        expect(page.get_by_text("both born in 1979 and 1969", exact=True)).to_be_visible()
        expect(card).to_be_hidden()
        assert "refused, so it did not run: not her." in model.calls[2]["messages"][-1]["content"]
        titles = page.locator("#chat .thought-group .title")
        expect(titles.nth(0)).to_contain_text("Step 1 · lookup · edited")
        expect(titles.nth(1)).to_contain_text("Step 2 · lookup · refused")
    finally:
        server.close()
