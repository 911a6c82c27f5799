"""How much of an answer OpenAIChatModel reads (tinyagent.models.sse), against the stub server: a stream
is closed at the stop string or past max_new_tokens, a call ends at its deadline, no body is read past
its byte cap; the context window comes from the server's model list and the agent fits prompts to it."""

from __future__ import annotations

import threading

import pytest
from openai_stub import OpenAIStub

from tinyagent import Agent, ReAct
from tinyagent.jsonhttp import RequestFailed
from tinyagent.models import OpenAIChatModel
from tinyagent.text import estimate_tokens
from tinyagent.tools import Calculator

#: ReAct from the first reply: these tests drive the loop itself (the working first: test_working.py)
CLASSIC = ReAct(working_first=False, search="tool")

USER = [{"role": "user", "content": "What is 6 times 7?"}]
CALL = 'Thought: multiply\nAction: calculator\nAction Input: {"expression": "6*7"}\nObservation: 41'
HANG_GUARD_S = 60  # not a measurement: a client that never stops reading would otherwise hang the suite


def model_for(stub: OpenAIStub, **kwargs) -> OpenAIChatModel:
    return OpenAIChatModel(stub.base_url, stub.model, **{"backoff": 0.01, "max_retries": 0, **kwargs})


def finishes(call):
    """call()'s result or exception, failing the test if it has not returned within HANG_GUARD_S."""
    outcome: dict = {}

    def work() -> None:
        try:
            outcome["value"] = call()
        except Exception as e:  # noqa: BLE001 - handed back to the test
            outcome["error"] = e

    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    worker.join(HANG_GUARD_S)
    assert not worker.is_alive(), "the call is still reading"
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def test_a_stream_is_closed_at_the_stop_string_and_its_usage_estimated():
    shown: list[str] = []
    with OpenAIStub(CALL, script=["endless_stream"]) as stub:  # after the reply, the server never stops
        model = model_for(stub)
        text = finishes(lambda: model.generate(USER, stop=["\nObservation:"], on_text=shown.append))
    cut = CALL[: CALL.index("\nObservation:")]
    assert text.text == cut == "".join(shown)
    assert text.prompt_tokens == model.count_tokens(USER) and text.completion_tokens >= estimate_tokens(cut)


def test_streamed_content_past_max_new_tokens_ends_the_reply():
    with OpenAIStub("one two three four five six", script=["endless_stream"], chunk_chars=2) as stub:
        text = finishes(lambda: model_for(stub).generate(USER, max_new_tokens=5, on_text=lambda _: None))
    assert text.text == "one two th" and text.completion_tokens == 5  # five 2-character pieces: five tokens at least


def test_the_deadline_ends_a_stream_that_sends_no_content():
    with OpenAIStub("never", script=["idle_stream"]) as stub:  # an event every millisecond: no read times out
        model = model_for(stub, timeout=30, deadline=0.5)
        with pytest.raises(RequestFailed) as e:
            finishes(lambda: model.generate(USER, on_text=lambda _: None))
    assert str(e.value) == f"{model.url} gave no complete answer within 0.5s (the call's deadline)"


def test_the_deadline_covers_retries():
    with OpenAIStub("ok", script=["slow", "slow", "slow"], slow_seconds=2) as stub:
        model = model_for(stub, timeout=0.4, max_retries=5, backoff=0.3, deadline=1.0)
        with pytest.raises(RequestFailed, match="the call's deadline"):
            finishes(lambda: model.generate(USER))
    assert stub.chat_requests < 6  # the retries left were not made


@pytest.mark.parametrize("fault", ["huge_body", "huge_chunked"])
def test_no_body_is_read_past_the_byte_cap(fault):
    with OpenAIStub("unused", script=[fault]) as stub:  # 30 MB with its length said, or endless chunks
        model = model_for(stub, max_response_bytes=1_000_000)
        with pytest.raises(RequestFailed) as e:
            finishes(lambda: model.generate(USER))
        assert str(e.value) == f"{model.url} sent an answer over 1000000 bytes (the limit); it was not read further"
        assert stub.bytes_sent < 30_000_000


def test_the_default_byte_cap_refuses_a_30_megabyte_body():
    with OpenAIStub("unused", script=["huge_body"]) as stub:
        with pytest.raises(RequestFailed, match="bytes \\(the limit\\)"):
            finishes(lambda: model_for(stub).generate(USER))


def test_the_context_window_is_read_once_from_the_model_list():
    with OpenAIStub(
        "ok",
        models=[{"id": "other", "max_model_len": 99}, {"id": "stub-model", "object": "model", "max_model_len": 2048}],
    ) as stub:
        model = model_for(stub)
        assert (model.context_window, model.context_window, stub.model_list_requests) == (2048, 2048, 1)
        assert model_for(stub, context_window=512).context_window == 512 and stub.model_list_requests == 1
    with OpenAIStub("ok", models=[{"id": "stub-model", "meta": {"n_ctx": 4096}}]) as stub:  # llama.cpp's place
        assert model_for(stub).context_window == 4096
    with OpenAIStub("ok") as stub:  # a list that does not say: no window, prompts are sent as they are
        assert model_for(stub).context_window is None


def test_the_agent_fits_a_long_chat_to_the_server_window():
    history = [(f"question {i} " + "words " * 300, f"answer {i}") for i in range(20)]  # ~12,000 estimated tokens
    with OpenAIStub("Final Answer: ok", models=[{"id": "stub-model", "max_model_len": 4096}]) as stub:
        agent = Agent(model_for(stub), tools=[Calculator()], max_new_tokens=256, protocol=CLASSIC)
        result = agent.run("the last question", history=history)
        sent = stub.requests[0]["body"]["messages"]
    assert result.answer == "ok"
    assert (
        agent.model.count_tokens(sent)
        <= 4096 - 256
        < agent.model.count_tokens([{"role": "user", "content": q + a} for q, a in history])
    )
    assert "earlier conversation turn(s) omitted" in sent[0]["content"] and sent[-1]["content"] == "the last question"
