"""Shared test fixtures. Model fixtures that need torch live further down and import it lazily."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest

from tinyagent import BaseModel, Reply
from tinyagent.format.prompts import THOUGHT_LEAD
from tinyagent.redaction import secret_scope
from tinyagent.text import trim_at_stop

# bench/ (not a package) holds ReplayModel and the recorded episodes that some tests drive; its scripts import
# each other by plain name, so the folder goes on the path, after everything else
sys.path.append(str(Path(__file__).resolve().parents[1] / "bench"))

# A shell without job control starts background commands with SIGINT ignored, and an ignored signal
# stays ignored in every child: the Ctrl-C tests' processes would never see their SIGINT. Catching it
# here gives the children the default disposition back (a handler, unlike "ignore", is reset by exec).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def forget_registered_secrets():
    """Each test starts with no registered secrets, and those it registers (keys passed to tools and
    models) are forgotten after it."""
    with secret_scope(fresh=True):
        yield


def continuing(messages, reply: str) -> str:
    """A scripted reply (written whole, as a step reads) as a model writes it after the agent's `Thought:`
    lead (`Agent(thought_first=True)`): what follows the lead, so the step reads as scripted."""
    pad = messages[-1]["content"] if messages and messages[-1].get("role") == "assistant" else ""
    if not pad.endswith(THOUGHT_LEAD) or not reply:
        return reply
    return reply[len(THOUGHT_LEAD) :] if reply.startswith(THOUGHT_LEAD) else "\n" + reply


class ScriptedModel(BaseModel):
    """A model that answers with canned replies, honours `stop`, and records every call."""

    def __init__(self, replies, usage: tuple[int, int] | None = None):
        self.replies = list(replies)
        self.calls: list[dict] = []
        self.usage = usage

    def generate(self, messages, stop=None, **kwargs):
        self.calls.append({"messages": [dict(m) for m in messages], "stop": stop, "kwargs": kwargs})
        if not self.replies:
            raise AssertionError("ScriptedModel ran out of replies")
        text = trim_at_stop(continuing(messages, self.replies.pop(0)), stop)
        if self.usage:
            return Reply(text, prompt_tokens=self.usage[0], completion_tokens=self.usage[1])
        return text


def built_as(model):
    """A stand-in for `config.build_model` that gives `model`, which then says of itself what the configured
    model would (the embedded one prefers constrained decoding, so its config runs ReAct steps)."""

    def build(cfg):
        model.prefers_constrained = cfg.model.backend == "embedded"
        return model

    return build


@pytest.fixture
def scripted():
    """Factory: scripted(["reply 1", "reply 2"]) -> ScriptedModel."""
    return ScriptedModel


# --- model fixtures (issue 3: models) ------------------------------------------------------
# Session-scoped: the tiny Llama takes a few seconds to build, the embedded SmolLM2 ~20 s to load.


@pytest.fixture(scope="session", autouse=True)
def model_cache(tmp_path_factory):
    """A temporary TINYAGENT_CACHE for the whole session (subprocesses inherit it): tests never
    write converted models into the user's ~/.cache/tinyagent."""
    import os

    folder = tmp_path_factory.mktemp("tinyagent_cache")
    before = os.environ.get("TINYAGENT_CACHE")
    os.environ["TINYAGENT_CACHE"] = str(folder)
    yield folder
    if before is None:
        os.environ.pop("TINYAGENT_CACHE", None)
    else:
        os.environ["TINYAGENT_CACHE"] = before


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory):
    """Path of a tiny random Llama chat model folder (ChatML template, trained BPE tokenizer)."""
    from tiny_models import build_tiny_llama  # tests/ is on sys.path (rootdir conftest)

    return build_tiny_llama(tmp_path_factory.mktemp("tiny_llama"))


@pytest.fixture(scope="session")
def embedded_model():
    """The embedded default model (SmolLM2-135M-Instruct GGUF) as users get it: on llama.cpp where the
    `llamacpp` extra is installed, else on transformers; loaded once per test session."""
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from tinyagent.models import default_model

    return default_model()


@pytest.fixture(scope="session")
def embedded_hf():
    """The embedded model on transformers, for tests of HFChatModel's own workings."""
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from tinyagent.models import default_model

    return default_model(runtime="hf")


# --- end of model fixtures ----------------------------------------------------------------


# --- property tests: the same examples on every run ------------------------------------------
from hypothesis import settings  # noqa: E402

settings.register_profile("tinyagent", derandomize=True, database=None, print_blob=True)
settings.load_profile("tinyagent")
