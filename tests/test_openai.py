"""OpenAIChatModel against a real `transformers serve` process and the fault-injecting stub server."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from openai_stub import OpenAIStub, count_words

from tinyagent import Agent, ReAct, Tools
from tinyagent.format.prompts import STOP_WORDS
from tinyagent.format.templates import shipped
from tinyagent.jsonhttp import RequestFailed
from tinyagent.models import OpenAIChatModel
from tinyagent.text import estimate_tokens
from tinyagent.tools import Calculator

#: ReAct from the first reply: these tests drive the loop itself (the working first: test_working.py)
CLASSIC = ReAct(working_first=False, search="tool")

FOLD_INSTRUCTION = {lang: shipped().text("common.fold", lang) for lang in ("en", "zh")}

KEY = "sk-test-6f1c2e9a-do-not-leak"
USER = [{"role": "user", "content": "What is 6 times 7?"}]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- a real transformers serve process, one per module ---------------------------------------


@pytest.fixture(scope="module")
def server(tiny_llama_dir, tmp_path_factory):
    """`transformers serve` on 127.0.0.1 serving the tiny Llama folder; stopped (process group) after."""
    exe = Path(sys.executable).with_name("transformers")
    exe = str(exe) if exe.exists() else shutil.which("transformers")
    assert exe, "the transformers CLI is missing: pip install 'transformers[serving]'"
    port, log_path = free_port(), tmp_path_factory.mktemp("serve") / "serve.log"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(
            [exe, "serve", str(tiny_llama_dir), "--host", "127.0.0.1", "--port", str(port), "--device", "cpu"],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    try:
        started, deadline = time.monotonic(), time.monotonic() + 180
        while True:
            assert proc.poll() is None, f"transformers serve exited:\n{log_path.read_text()[-2000:]}"
            assert time.monotonic() < deadline, f"transformers serve not healthy:\n{log_path.read_text()[-2000:]}"
            try:
                if requests.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            time.sleep(0.2)
        logging.getLogger(__name__).info("transformers serve healthy after %.1fs", time.monotonic() - started)
        yield {"base_url": f"http://127.0.0.1:{port}/v1", "model": str(tiny_llama_dir), "dir": tiny_llama_dir}
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def real_model(server, **kwargs) -> OpenAIChatModel:
    kwargs = {"scratchpad": "fold", "temperature": 0.0, "max_new_tokens": 24, **kwargs}
    return OpenAIChatModel(server["base_url"], server["model"], **kwargs)


def test_real_round_trip_reports_usage_from_the_server(server):
    from transformers import AutoTokenizer

    from tinyagent.models import HFChatModel

    text = real_model(server).generate(USER)
    tokenizer = AutoTokenizer.from_pretrained(server["dir"])
    expected_prompt = len(
        tokenizer.apply_chat_template(USER, add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]
    )
    local = HFChatModel(str(server["dir"]), device="cpu", max_new_tokens=24).generate(USER)  # greedy, in-process
    assert text.text == local.text and text.text.strip()
    assert (text.prompt_tokens, text.completion_tokens) == (expected_prompt, local.completion_tokens)


def test_real_streaming_chunks_concatenate_to_the_same_text(server):
    model = real_model(server)
    plain = model.generate(USER)
    chunks: list[str] = []
    streamed = model.generate(USER, on_text=chunks.append)
    assert len(chunks) > 1 and "".join(chunks) == streamed.text == plain.text  # greedy: same text both ways
    assert (streamed.prompt_tokens, streamed.completion_tokens) == (plain.prompt_tokens, plain.completion_tokens)


def test_real_server_keeps_the_stop_string_and_the_model_trims_it(server):
    model = real_model(server, max_new_tokens=40)
    full = str(model.generate(USER))
    stop = next(
        full[i : i + 3]
        for i in range(1, len(full) - 3)
        if full[i : i + 3].isprintable() and full[i : i + 3].strip() and full.find(full[i : i + 3]) == i
    )
    raw = requests.post(model.url, json=model.build_payload(USER, [stop]), timeout=60).json()
    assert stop in raw["choices"][0]["message"]["content"]  # transformers serve does not trim
    chunks: list[str] = []
    for text in (model.generate(USER, stop=[stop]), model.generate(USER, stop=[stop], on_text=chunks.append)):
        assert text.text == full[: full.index(stop)]
    assert "".join(chunks) == full[: full.index(stop)]


def test_real_server_refuses_continue_and_the_error_says_use_fold(server):
    model = real_model(server, scratchpad="continue", api_key=KEY)
    assert model.continue_supported
    with pytest.raises(RequestFailed) as e:
        model.generate(USER + [{"role": "assistant", "content": "Thought: I should calculate."}])
    message = str(e.value)
    assert e.value.status == 422 and model.url in message and "scratchpad='fold'" in message
    assert "continue_final_message" in message and KEY not in message


def test_real_agent_episode_runs_to_completion_over_http(server, caplog):
    """The episode over HTTP is the episode the same weights give in-process: every step, the stop
    reason, the answer and the token counts (greedy decoding; the in-process model sees the scratchpad
    folded into the user message, as the server does)."""
    from tinyagent.format.messages import fold_scratchpad
    from tinyagent.models import BaseModel, HFChatModel

    class Folded(BaseModel):
        def __init__(self, model):
            self.model = model

        def generate(self, messages, stop=None, **kwargs):
            folded = fold_scratchpad(messages) if messages[-1]["role"] == "assistant" else messages
            return self.model.generate(folded, stop, **kwargs)

    caplog.set_level(logging.DEBUG)
    model = real_model(server, api_key=KEY, max_new_tokens=16)
    assert not model.continue_supported
    question, kwargs = "What is 6 times 7?", {"tools": [Calculator()], "max_turns": 2}
    result = Agent(model, **kwargs, protocol=CLASSIC).run(question)
    local = Agent(
        Folded(HFChatModel(str(server["dir"]), device="cpu", max_new_tokens=16, temperature=0.0)),
        **kwargs,
        protocol=CLASSIC,
    ).run(question)
    assert [s.text for s in result.steps] == [s.text for s in local.steps] and result.steps[0].text.strip()
    assert (result.stop_reason, result.finished, result.answer) == (local.stop_reason, local.finished, local.answer)
    assert result.finished and result.stop_reason in ("final_answer", "no_action", "max_turns")
    assert [(s.prompt_tokens, s.completion_tokens) for s in result.steps] == [
        (s.prompt_tokens, s.completion_tokens) for s in local.steps
    ]
    assert result.generate_calls == len(result.steps)
    assert result.completion_tokens == sum(s.completion_tokens for s in result.steps)
    assert KEY not in caplog.text and KEY not in repr(model)


# --- the stub server: canned replies and failures on demand ------------------------------------

TOOL_REPLY = (
    'Thought: I should multiply.\nAction: calculator\nAction Input: {"expression": "6*7"}\n'
    'Observation: made up by the model'
)
FINAL_REPLY = "Thought: I now know the final answer.\nFinal Answer: 42"


def stub_model(stub: OpenAIStub, **kwargs) -> OpenAIChatModel:
    return OpenAIChatModel(stub.base_url, "stub-model", **{"backoff": 0.01, **kwargs})


@pytest.mark.parametrize("stream", [False, True])
def test_agent_calls_a_tool_and_answers_through_the_stub(stream):
    chunks: list[str] = []
    with OpenAIStub([TOOL_REPLY, FINAL_REPLY]) as stub:
        agent = Agent(
            stub_model(stub, api_key=KEY),
            tools=[Calculator()],
            max_new_tokens=64,
            on_text=chunks.append if stream else None,
            protocol=CLASSIC,
        )
        result = agent.run("What is 6 times 7?")
    assert result.finished and result.answer == "42" and result.steps[0].observation == "42"
    first, second = (r["body"] for r in stub.requests)
    assert first["stop"] == STOP_WORDS and first["max_tokens"] == 64 and bool(first.get("stream")) == stream
    assert "continue_final_message" not in first and first["messages"][-1]["role"] == "user"
    assert second["continue_final_message"] is True and second["add_generation_prompt"] is False
    assert second["messages"][-1]["role"] == "assistant"
    assert second["messages"][-1]["content"].endswith("Observation: 42\n")
    assert "made up" not in second["messages"][-1]["content"]
    assert stub.requests[0]["headers"]["Authorization"] == f"Bearer {KEY}"
    assert result.steps[1].completion_tokens == count_words(FINAL_REPLY)  # the server's count
    if not stream:
        assert result.steps[0].completion_tokens == count_words(TOOL_REPLY)
    else:  # the stream was closed at the stop string, before the server's count came: estimated
        shown = TOOL_REPLY[: TOOL_REPLY.index("\nObservation:")]
        pieces = -(-(len(shown) + len("\nObservation:")) // 3)  # the stub's 3-character pieces up to the stop
        assert result.steps[0].completion_tokens == max(pieces, estimate_tokens(shown))
        assert "".join(chunks) == TOOL_REPLY[: TOOL_REPLY.index("\nObservation:")] + FINAL_REPLY
        assert not any("Obs" in c for c in chunks)


def test_fold_sends_the_scratchpad_inside_the_last_user_message():
    with OpenAIStub([TOOL_REPLY, FINAL_REPLY]) as stub:
        result = Agent(stub_model(stub, scratchpad="fold"), tools=[Calculator()], protocol=CLASSIC).run(
            "What is 6 times 7?"
        )
    assert result.answer == "42"
    second = stub.requests[1]["body"]
    assert "continue_final_message" not in second and [m["role"] for m in second["messages"]] == ["system", "user"]
    user = second["messages"][-1]["content"]
    assert user.startswith("What is 6 times 7?") and FOLD_INSTRUCTION["en"] in user
    assert user.endswith("Observation: 42\n")


def test_fold_instruction_follows_the_language_of_the_conversation():
    model = OpenAIChatModel("http://127.0.0.1:9/v1", "m", scratchpad="fold")
    payload = model.build_payload(
        [{"role": "user", "content": "六乘以七是多少？"}, {"role": "assistant", "content": "Thought: 计算"}]
    )
    assert payload["messages"] == [
        {"role": "user", "content": "六乘以七是多少？\n\n" + FOLD_INSTRUCTION["zh"] + "Thought: 计算"}
    ]


def test_generation_defaults_and_per_call_settings_reach_the_request():
    with OpenAIStub("Final Answer: ok", honour_stop=True) as stub:
        model = stub_model(stub, max_new_tokens=100, temperature=0.7, top_p=0.9)
        model.generate(USER)
        model.generate(USER, temperature=0.0, max_new_tokens=5, stop=["a", "b", "c", "d", "e", ""])
    first, second = (r["body"] for r in stub.requests)
    assert (first["max_tokens"], first["temperature"], first["top_p"]) == (100, 0.7, 0.9)
    assert (second["max_tokens"], second["temperature"], second["top_p"]) == (5, 0.0, 0.9)
    assert second["stop"] == ["a", "b", "c", "d"] and "stop" not in first
    with pytest.raises(
        TypeError,
        match=r"__init__\(\) got unknown keyword argument\(s\) 'max_length'; "
        r"valid: max_new_tokens, temperature, top_p$",
    ):
        OpenAIChatModel("http://x/v1", "m", max_length=5)
    with pytest.raises(ValueError, match="scratchpad"):
        OpenAIChatModel("http://x/v1", "m", scratchpad="prefix")


def test_unknown_generation_keywords_are_rejected_before_any_request():
    with OpenAIStub("Final Answer: ok") as stub:
        model = stub_model(stub)
        with pytest.raises(
            TypeError,
            match=r"generate\(\) got unknown keyword argument\(s\) 'max_tokens', 'seed'; "
            r"valid: constraint, max_new_tokens, on_text, temperature, tools, top_p$",
        ):
            model.generate(USER, max_tokens=5, seed=1)
        assert stub.requests == []
        model.generate(USER, max_new_tokens=5, on_text=None, constraint=None)  # what the agent passes
    assert len(stub.requests) == 1


def test_guided_decoding_without_outlines_fails_when_set(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *args: None if name == "outlines_core" else real(name, *args)
    )
    with pytest.raises(ImportError, match=r"pip install 'tinyagent\[constrained\]'"):
        OpenAIChatModel("http://x/v1", "m", guided_decoding="guided_regex")
    assert OpenAIChatModel("http://x/v1", "m").guided_decoding is None  # unset: nothing needed


def test_stop_strings_the_server_returns_are_trimmed_even_past_the_fourth():
    reply = "Thought: compute\nAction: calculator\nAction Input: {}\nObservation: 1"
    with OpenAIStub(reply) as stub:
        text = stub_model(stub).generate(USER, stop=["w", "x", "y", "z", "Observation:"])
    assert text.text == reply[: reply.index("Observation:")]


def test_streaming_holds_back_text_that_may_start_a_stop_string():
    seen: list[str] = []
    with OpenAIStub("Final Answer: O-ring Obs\nObservation: x", chunk_chars=2) as stub:
        text = stub_model(stub).generate(USER, stop=["Observation:"], on_text=seen.append)
    assert text.text == "Final Answer: O-ring Obs\n" == "".join(seen)


def test_api_key_comes_from_the_environment_and_is_never_shown(monkeypatch, caplog):
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with OpenAIStub("Final Answer: ok", require_key=KEY) as stub:
        model = stub_model(stub)
        assert model.generate(USER).text == "Final Answer: ok"
        wrong = stub_model(stub, api_key="sk-wrong-key-000")
        with pytest.raises(RequestFailed) as e:
            wrong.generate(USER)
    assert e.value.status == 401 and "invalid API key" in str(e.value) and wrong.url in str(e.value)
    for text in (str(e.value), caplog.text, repr(model), repr(wrong)):
        assert KEY not in text and "sk-wrong-key-000" not in text


def test_server_down_is_a_clear_error_naming_the_url(caplog):
    caplog.set_level(logging.DEBUG)
    model = OpenAIChatModel(f"http://127.0.0.1:{free_port()}/v1/", "m", api_key=KEY, max_retries=1, backoff=0.01)
    with pytest.raises(RequestFailed) as e:
        model.generate(USER)
    message = str(e.value)
    assert model.url in message and "after 2 attempts" in message and "connection failed" in message
    assert "/v1//" not in model.url and KEY not in message and KEY not in caplog.text


@pytest.mark.parametrize("status", ["500", "503", "429"])
def test_retryable_statuses_are_retried_then_succeed(status):
    with OpenAIStub("Final Answer: ok", script=[status, status]) as stub:
        text = stub_model(stub, max_retries=2).generate(USER)
    assert text.text == "Final Answer: ok" and stub.chat_requests == 3


def test_persistent_500s_give_up_after_bounded_retries(caplog):
    caplog.set_level(logging.DEBUG)
    with OpenAIStub("never", fail_rate=1.0) as stub:
        model = stub_model(stub, api_key=KEY, max_retries=2)
        with pytest.raises(RequestFailed) as e:
            model.generate(USER)
    assert stub.chat_requests == 3 and e.value.status == 500 and e.value.retryable
    assert model.url in str(e.value) and "after 3 attempts: HTTP 500" in str(e.value)
    assert KEY not in str(e.value) and KEY not in caplog.text


def test_a_slow_server_hits_the_timeout_then_a_retry_succeeds():
    with OpenAIStub("Final Answer: ok", script=["slow"], slow_seconds=3) as stub:
        started = time.monotonic()
        with pytest.raises(RequestFailed, match="timeout") as e:
            stub_model(stub, timeout=0.3, max_retries=0).generate(USER)
        assert time.monotonic() - started < 2.5 and stub_model(stub).url in str(e.value)
        stub.push("slow")
        assert stub_model(stub, timeout=0.3, max_retries=1).generate(USER).text == "Final Answer: ok"


@pytest.mark.parametrize(
    "fault, words",
    [
        ("non_json", "non-JSON text"),
        ("no_choices", "without choices[0].message.content"),
        ("404", "HTTP 404: injected HTTP 404"),
        ("drop", "connection failed"),
    ],
)
def test_bad_answers_are_clear_errors_not_key_errors(fault, words):
    with OpenAIStub("unused", script=[fault]) as stub:
        model = stub_model(stub, max_retries=0)
        with pytest.raises(RequestFailed) as e:
            model.generate(USER)
    assert words in str(e.value) and model.url in str(e.value)


def test_a_broken_stream_is_a_clear_error():
    with OpenAIStub("Final Answer: a long enough reply", script=["bad_stream"]) as stub:
        model = stub_model(stub)
        with pytest.raises(RequestFailed, match="streamed non-JSON data") as e:
            model.generate(USER, on_text=lambda _: None)
    assert model.url in str(e.value)


def test_a_stalled_stream_names_the_url_and_how_far_it_got():
    seen: list[str] = []
    with OpenAIStub("Final Answer: ok", script=["stall_stream"], slow_seconds=2, chunk_chars=4) as stub:
        model = stub_model(stub, timeout=0.3)
        with pytest.raises(RequestFailed) as e:
            model.generate(USER, on_text=seen.append)
    assert f"the stream from {model.url} broke off after 4 characters: no data for 0.3s (timeout)" == str(e.value)
    assert seen == ["Fina"] and stub.chat_requests == 1  # text already shown is not asked for twice


# --- the tools protocol: tools= in the request, tool_calls in the response -------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_tool_calls_from_a_server_run_and_go_back_with_their_ids(stream):
    two = {
        "content": None,
        "tool_calls": [
            {"name": "calculator", "arguments": '{"expression": "6*7"}'},
            {"name": "calculator", "arguments": '{"expression": "6+7"'},
        ],
    }  # brace lost
    with OpenAIStub(replies=[two, "42 and 13"]) as stub:
        chunks: list[str] = []
        agent = Agent(
            stub_model(stub), tools=[Calculator()], on_text=chunks.append if stream else None, protocol=Tools()
        )
        result = agent.run("6*7 and 6+7?")
        first, second = (r["body"] for r in stub.requests)
    assert result.answer == "42 and 13" and [s.observation for s in result.steps[:2]] == ["42", "13"]
    assert first["tools"][0]["function"]["name"] == "calculator" and "stop" not in first
    assistant, *results = second["messages"][2:]
    assert [c["id"] for c in assistant["tool_calls"]] == ["call_0", "call_1"]
    assert [(m["role"], m["tool_call_id"], m["content"]) for m in results] == [
        ("tool", "call_0", "42"),
        ("tool", "call_1", "13"),
    ]


@pytest.mark.parametrize("protocol", ["tools", "auto"])
def test_the_tools_protocol_fits_its_prompt_to_a_window_the_model_list_states(protocol):
    """A server whose model list states a window (vLLM's max_model_len) with `protocol: tools` or `auto`: the prompt
    and the tools shown are counted against it (count_tokens takes `tools`; it raised TypeError on every run)."""
    models = [{"id": "stub-model", "max_model_len": 4096}]
    call = {"tool_calls": [{"name": "calculator", "arguments": '{"expression": "6*7"}'}]}
    with OpenAIStub(replies=[call, "42"], models=models) as stub:
        model = stub_model(stub)
        result = Agent(model, tools=[Calculator()], protocol=protocol, max_new_tokens=64).run("6*7?")
        sent = stub.requests[1]["body"]
    assert result.answer == "42" and result.stop_reason == "final_answer" and result.protocol == "tools"
    without = model.count_tokens(sent["messages"])
    assert model.count_tokens(sent["messages"], tools=sent["tools"]) > without  # the schemas count
    assert without > model.count_tokens([{**m, "tool_calls": None} for m in sent["messages"]])  # and the calls


def test_a_server_that_ignores_tools_is_read_from_its_text_and_broken_calls_are_observations():
    replies = [
        '<tool_call>\n{"name": "calculator", "arguments": {"expression": "2+2"}}\n</tool_call>',
        {"tool_calls": [{"name": "calculator", "arguments": "{expression: }"}]},
        "4",
    ]
    with OpenAIStub(replies=replies) as stub:
        result = Agent(stub_model(stub), tools=[Calculator()], protocol=Tools()).run("2+2?")
    assert [s.kind for s in result.steps] == ["action", "bad_input", "final_answer"]
    assert "Error: bad arguments for calculator" in result.steps[1].observation


def test_real_server_renders_tools_with_its_chat_template(server):
    """`transformers serve` takes tools= (the tiny model's ChatML template ignores them, so the prompt is
    the same), and a tools run through it ends with an answer or an error observation, never a traceback."""
    model = real_model(server)
    tools = [{"type": "function", "function": {"name": "calculator", "parameters": {"type": "object"}}}]
    with_tools = model.generate(USER, tools=tools, max_new_tokens=4)
    assert with_tools.prompt_tokens == model.generate(USER, max_new_tokens=4).prompt_tokens
    result = Agent(model, [Calculator()], max_turns=2, protocol=Tools()).run("What is 6 times 7?")
    assert result.protocol == "tools" and result.stop_reason in ("final_answer", "max_turns", "no_forced_answer")
    assert all(s.kind.has_reply for s in result.steps)
