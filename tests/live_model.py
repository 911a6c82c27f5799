"""Scripted models that stream and pause, and the agents they run in, for the chat page's tests
(tests/test_web.py through gradio_client, tests_browser/test_page.py in chromium).

A LiveModel reply given as chunks stops at each PAUSE until the test releases it, so a test can
look at the page while a step is half written: proof of live streaming without sleeps."""

import threading

from conftest import ScriptedModel

from tinyagent.agent import Agent, ReAct
from tinyagent.tools.tool import tool

#: ReAct from the first reply: these tests drive the loop itself (the working first: test_working.py)
CLASSIC = ReAct(working_first=False, search="tool")

PAUSE = object()  # in a reply given as chunks: wait here until the test calls `model.resume.release()`
WAIT_S = 30  # how long a scripted model waits for the test before failing the run


class LiveModel(ScriptedModel):
    """Scripted replies streamed to `on_text`; a reply given as a list is streamed chunk by chunk and
    waits at each PAUSE until the test releases `resume` once."""

    def __init__(self, replies, usage=(50, 5)):
        super().__init__(
            ["".join(c for c in r if c is not PAUSE) if isinstance(r, list) else r for r in replies], usage=usage
        )
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


@tool
def lookup(name: str) -> str:
    """Look up a person."""
    return f"{name} was born in 1979."


def agents_of(model, tools=(lookup,)):
    """The page's agent factory: one Agent per browser session, all on `model`."""
    return lambda **callbacks: Agent(model, tools=list(tools), max_turns=3, **callbacks, protocol=CLASSIC)
