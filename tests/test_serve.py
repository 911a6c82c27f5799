"""`tinyagent serve`: the official `openai` client against the server started as a real process on 127.0.0.1,
its model a scripted OpenAI-compatible stub (tests/openai_stub.py) in this process: plain and streamed
answers, the client's messages as the agent's history, two conversations at once, a client that goes away
mid-run, keys, limits and failures. The request checks with no run behind them go through the app in
process (Starlette's test client)."""

from __future__ import annotations

import contextlib
import json
import signal
import sys
import threading
from pathlib import Path

import openai
import pytest
import requests
from conftest import ScriptedModel
from openai_stub import OpenAIStub, count_words
from serving import Process, Served, environment
from test_mcp import running

from tinyagent import Agent
from tinyagent.serve.conversation import BadRequest, conversation_of
from tinyagent.serve.openai_api import Limits, create_app
from tinyagent.tools import Calculator

pytestmark = pytest.mark.slow

ACT = 'Thought: I should compute it.\nAction: calculator\nAction Input: {"expression": "6*7"}'
ANSWER = "Thought: I now know the final answer\nFinal Answer: 42"
KEY = "sk-serve-test-key-0123456789"


def stub_args(stub: OpenAIStub, *more: str) -> list[str]:
    return ["--base-url", stub.base_url, "--model", "stub-model", "--tools", "calculator", *more]


def client(server: Served, key: str = "unused", **kwargs) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key=key, max_retries=0, timeout=60, **kwargs)


def asks(body: dict, text: str) -> bool:
    """Whether a request the agent sent the stub is about `text` (in a user message: the question, or the
    prompt that holds it)."""
    return any(text in str(m.get("content")) for m in body["messages"] if m["role"] == "user")


# --- answers ----------------------------------------------------------------------------------------


def test_a_plain_answer_has_the_steps_as_reasoning_and_usage_of_every_model_call():
    with OpenAIStub(replies=[ACT, ANSWER]) as stub, Served(*stub_args(stub)) as server:
        api = client(server)
        assert [m.id for m in api.models.list().data] == ["tinyagent"]
        reply = api.chat.completions.create(model="tinyagent", messages=[{"role": "user", "content": "6 times 7?"}])
        message = reply.choices[0].message
        assert message.content == "42" and reply.choices[0].finish_reason == "stop"
        reasoning = message.model_extra["reasoning_content"]
        assert "Action: calculator" in reasoning and "Observation: 42" in reasoning
        assert reasoning.index("Action: calculator") < reasoning.index("Observation: 42") < reasoning.index("Final")
        assert stub.chat_requests == 2
        prompts = sum(
            count_words(" ".join(str(m.get("content") or "") for m in r["body"]["messages"])) for r in stub.requests
        )
        assert reply.usage.prompt_tokens == prompts  # every model call of the run, as the model reported them
        assert reply.usage.completion_tokens == count_words(ACT) + count_words(ANSWER)
        assert reply.model_extra["tinyagent"]["stop_reason"] == "final_answer"
        assert reply.model_extra["tinyagent"]["model_calls"] == 2


def test_a_streamed_answer_sends_the_steps_live_then_the_answer_then_usage():
    seen_observation, chunks = threading.Event(), []

    def replies(body: dict) -> str:
        if any("Observation: 42" in str(m.get("content")) for m in body["messages"]):
            assert seen_observation.wait(30), "the client never saw the first step's observation"
            return ANSWER  # only once the client has read the first step: the stream is live
        return ACT

    with OpenAIStub(replies=replies) as stub, Served(*stub_args(stub), "--name", "helper") as server:
        stream = client(server).chat.completions.create(
            model="helper",
            messages=[{"role": "user", "content": "6 times 7?"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        for chunk in stream:
            chunks.append(chunk)
            if "Observation: 42" in "".join(
                c.choices[0].delta.model_extra.get("reasoning_content") or "" for c in chunks if c.choices
            ):
                seen_observation.set()
    assert chunks[0].choices[0].delta.role == "assistant"
    kinds = [
        "reasoning"
        if c.choices and c.choices[0].delta.model_extra.get("reasoning_content")
        else "content"
        if c.choices and c.choices[0].delta.content
        else "finish"
        if c.choices and c.choices[0].finish_reason
        else "usage"
        if c.usage
        else "other"
        for c in chunks[1:]
    ]
    assert kinds[-3:] == ["content", "finish", "usage"] and set(kinds[:-3]) == {"reasoning"}
    reasoning = "".join(c.choices[0].delta.model_extra["reasoning_content"] for c in chunks[1:-3])
    assert reasoning.startswith("Thought: I should compute it.") and "Observation: 42\n" in reasoning
    assert reasoning.rstrip().endswith("Final Answer: 42")
    assert chunks[-3].choices[0].delta.content == "42" and chunks[-2].choices[0].finish_reason == "stop"
    assert chunks[-1].usage.completion_tokens == count_words(ACT) + count_words(ANSWER)
    assert {c.model for c in chunks} == {"helper"}


def test_the_clients_messages_are_the_history_and_the_last_user_message_the_question():
    with (
        OpenAIStub(replies=["Final Answer: Lyon is 470 km away"]) as stub,
        Served(*stub_args(stub, "--no-working-first")) as server,
    ):
        reply = client(server).chat.completions.create(
            model="tinyagent",
            messages=[
                {"role": "system", "content": "You are a pirate."},
                {"role": "user", "content": "How far is Paris?"},
                {"role": "assistant", "content": "450 km."},
                {"role": "user", "content": [{"type": "text", "text": "And Lyon?"}]},
            ],
        )
        assert reply.choices[0].message.content == "Lyon is 470 km away"
        sent = stub.requests[0]["body"]["messages"]
    assert [(m["role"], m["content"]) for m in sent[1:]] == [
        ("user", "How far is Paris?"),
        ("assistant", "450 km."),
        ("user", "And Lyon?"),
    ]
    assert sent[0]["role"] == "system" and "pirate" not in json.dumps(sent)  # the agent's own system prompt


def test_two_conversations_run_at_once_each_with_its_own_answer():
    def replies(body: dict) -> str:
        return f"Final Answer: you asked {'alpha' if asks(body, 'say alpha') else 'beta'}"

    answers = {}
    with OpenAIStub(replies=replies, meet=2) as stub, Served(*stub_args(stub)) as server:
        api = client(server)

        def ask(word: str) -> None:
            reply = api.chat.completions.create(
                model="tinyagent", messages=[{"role": "user", "content": f"say {word}"}]
            )
            answers[word] = reply.choices[0].message.content

        threads = [threading.Thread(target=ask, args=(w,)) for w in ("alpha", "beta")]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert stub.max_in_flight == 2  # both runs were waiting on the model at the same time
    assert answers == {"alpha": "you asked alpha", "beta": "you asked beta"}


def test_a_client_that_goes_away_mid_run_stops_its_run():
    release = threading.Event()

    def replies(body: dict) -> str:
        steps = sum(str(m.get("content")).count("Observation:") for m in body["messages"])
        if asks(body, "next one"):
            return "Final Answer: still serving"
        if steps == 1:
            assert release.wait(30)
        return ACT.replace("6*7", f"6*{7 + steps}")  # a new call each step: the run would go on to the turn cap

    with OpenAIStub(replies=replies) as stub, Served(*stub_args(stub, "--verbose")) as server:
        api = client(server)
        with api.chat.completions.with_streaming_response.create(
            model="tinyagent", messages=[{"role": "user", "content": "count on"}], stream=True
        ) as response:
            for line in response.iter_lines():
                if "Observation" in line:
                    break  # the first step is done and the second is being asked: hang up
        server.wait_for("the client went away: its run stops after the step in progress")
        release.set()  # the step in progress ends; then the run must stop instead of asking the model again
        server.wait_for(r"run ended: stopped after 2 steps")
        assert stub.chat_requests == 2
        reply = api.chat.completions.create(model="tinyagent", messages=[{"role": "user", "content": "next one"}])
        assert reply.choices[0].message.content == "still serving"


# --- keys ------------------------------------------------------------------------------------------


def test_a_wrong_or_missing_key_is_refused_with_401():
    with OpenAIStub(replies=ANSWER) as stub, Served(*stub_args(stub), env=environment(TINYAGENT_API_KEY=KEY)) as server:
        with pytest.raises(openai.AuthenticationError) as e:
            client(server, key="sk-wrong-key-0123456789012").chat.completions.create(
                model="tinyagent", messages=[{"role": "user", "content": "hi"}]
            )
        assert e.value.status_code == 401 and e.value.body["code"] == "invalid_api_key"
        with pytest.raises(openai.AuthenticationError):
            client(server, key="wrong").models.list()
        bare = requests.post(
            f"{server.base_url}/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]}, timeout=30
        )  # no Authorization header at all
        assert bare.status_code == 401 and bare.headers["www-authenticate"] == "Bearer"
        assert requests.get(f"{server.base_url[:-3]}/health", timeout=30).json() == {"status": "ok"}
        assert stub.chat_requests == 0
        reply = client(server, key=KEY).chat.completions.create(
            model="tinyagent", messages=[{"role": "user", "content": "hi"}]
        )
        assert reply.choices[0].message.content == "42"
        assert KEY not in "".join(server.lines)


def test_listening_beyond_loopback_needs_a_key_and_a_long_one():
    with OpenAIStub() as stub:
        with Process("serve", "--host", "0.0.0.0", *stub_args(stub)) as proc:
            assert proc.proc.wait(30) == 2
        assert proc.lines[-1].startswith("tinyagent: error: serve: listening on 0.0.0.0 lets other machines in")
        assert "--api-key" in proc.lines[-1] and len(proc.lines) == 1
        with Process("serve", "--host", "0.0.0.0", "--api-key", "abc123xyz", *stub_args(stub)) as proc:
            assert proc.proc.wait(30) == 2
        assert "the API key is too short (9 characters; at least 16" in proc.lines[-1]
        assert "abc123xyz" not in "".join(proc.lines)
        assert stub.chat_requests == 0


# --- limits and failures ---------------------------------------------------------------------------------


def test_a_full_server_refuses_with_429_and_the_next_request_runs():
    release = threading.Event()

    def replies(body: dict) -> str:
        if asks(body, "slow"):
            assert release.wait(30)
        return ANSWER

    with (
        OpenAIStub(replies=replies) as stub,
        Served(*stub_args(stub, "--max-runs", "1", "--max-waiting", "0")) as server,
    ):
        api, outcome = client(server), {}
        slow = threading.Thread(
            target=lambda: outcome.setdefault(
                "slow", api.chat.completions.create(model="tinyagent", messages=[{"role": "user", "content": "slow"}])
            )
        )
        slow.start()
        try:
            while stub.chat_requests == 0:  # the slow run holds the one turn
                release.wait(0.01)
            with pytest.raises(openai.RateLimitError) as e:
                api.chat.completions.create(model="tinyagent", messages=[{"role": "user", "content": "fast"}])
            assert "try again" in e.value.message
        finally:
            release.set()
            slow.join(60)
        assert outcome["slow"].choices[0].message.content == "42"
        reply = api.chat.completions.create(model="tinyagent", messages=[{"role": "user", "content": "fast"}])
        assert reply.choices[0].message.content == "42"


def test_a_model_failure_is_one_error_not_retried_by_the_client():
    with OpenAIStub(replies=ANSWER, script=["400"]) as stub, Served(*stub_args(stub)) as server:
        api = openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=2, timeout=60)
        with pytest.raises(openai.APIStatusError) as e:
            api.chat.completions.create(model="tinyagent", messages=[{"role": "user", "content": "hi"}])
        assert e.value.status_code == 502 and "400" in e.value.message and "\n" not in e.value.message
        assert stub.chat_requests == 1  # neither the client nor the server asked again
        stub.push("400")
        with pytest.raises(openai.APIError, match="400"):  # streamed: the error arrives as an event
            for _ in api.chat.completions.create(
                model="tinyagent", messages=[{"role": "user", "content": "hi"}], stream=True
            ):
                pass


def test_secrets_in_the_models_replies_never_reach_the_client():
    secret = "sk-test-secret-value-4242"
    replies = [
        f"Thought: my key is {secret}.\nAction: calculator\nAction Input: {{\"expression\": \"6*7\"}}",
        f"Final Answer: 42, and the key is {secret}",
    ]
    with (
        OpenAIStub(replies=replies, require_key=secret, chunk_chars=2) as stub,
        Served(*stub_args(stub), env=environment(OPENAI_API_KEY=secret)) as server,
    ):
        text = ""
        for chunk in client(server).chat.completions.create(
            model="tinyagent", messages=[{"role": "user", "content": "hi"}], stream=True
        ):
            delta = chunk.choices[0].delta if chunk.choices else None
            text += (delta.model_extra.get("reasoning_content") or "") + (delta.content or "") if delta else ""
    assert secret not in text and text.count("[REDACTED]") == 3


# --- requests refused before a run (in process) ---------------------------------------------------------


@pytest.fixture
def app_client():
    from starlette.testclient import TestClient

    def make(limits: Limits = Limits(), key: str | None = None):
        def factory(**callbacks):
            return Agent(ScriptedModel(["Final Answer: ok"]), [Calculator()], working_first=False, **callbacks)

        return TestClient(create_app(factory, "agent", key, limits))

    return make


@pytest.mark.parametrize(
    "body, status, words",
    [
        ({"model": "gpt-4", "messages": [{"role": "user", "content": "hi"}]}, 404, "does not exist"),
        ({"messages": [{"role": "user", "content": "x" * 101}]}, 400, "too long (101 characters; the limit is 100)"),
        (
            {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]},
            400,
            "the last message must be the user's question",
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
            400,
            "only text content",
        ),
        (
            {"messages": [{"role": "tool", "content": "1", "tool_call_id": "a"}, {"role": "user", "content": "hi"}]},
            400,
            "runs its own tools",
        ),
        ({"messages": []}, 400, "non-empty list"),
        ({"messages": [{"role": "user", "content": "hi"}], "n": 2}, 400, "only one choice"),
        ([1, 2], 400, "JSON object"),
    ],
)
def test_requests_the_agent_cannot_take_get_a_clear_error(app_client, body, status, words):
    response = app_client(Limits(max_question_chars=100)).post("/v1/chat/completions", json=body)
    assert response.status_code == status
    assert words in response.json()["error"]["message"]


def test_a_body_too_large_or_not_json_is_refused_before_it_is_read_whole(app_client):
    http = app_client(Limits(max_request_bytes=2000))
    big = http.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "x" * 3000}]})
    assert big.status_code == 413 and "too large" in big.json()["error"]["message"]
    bad = http.post("/v1/chat/completions", content=b"{not json", headers={"content-type": "application/json"})
    assert bad.status_code == 400 and "not JSON" in bad.json()["error"]["message"]
    assert http.get("/health").json() == {"status": "ok"}
    assert http.get("/v1/models/agent").json()["id"] == "agent"
    assert http.get("/v1/models/other").status_code == 404


def test_conversation_mapping_joins_turns_and_keeps_answers_without_a_question():
    c = conversation_of(
        [
            {"role": "assistant", "content": "Hello!"},
            {"role": "user", "content": "a"},
            {"role": "user", "content": "b"},
            {"role": "developer", "content": "ignored"},
            {"role": "assistant", "content": "c"},
            {"role": "user", "content": "d"},
        ]
    )
    assert c.history == [("", "Hello!"), ("a\n\nb", "c")] and c.question == "d"
    with pytest.raises(BadRequest, match="question .* is empty"):
        conversation_of([{"role": "user", "content": "  "}])
    with pytest.raises(BadRequest, match="role must be"):
        conversation_of([{"role": "robot", "content": "hi"}])


def children_of(pid: int) -> set[int]:
    found = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError):
            found |= {int(p) for p in (task / "children").read_text().split()}
    return found


def test_sigterm_stops_the_server_and_its_tools_mcp_servers():
    clock = f"{sys.executable} -m mcp_server_time"
    replies = [
        'Thought: ask the clock.\nAction: get_current_time\nAction Input: {"timezone": "UTC"}',
        "Final Answer: now",
    ]
    with OpenAIStub(replies=replies) as stub, Served(*stub_args(stub, "--mcp", clock)) as server:
        reply = client(server).chat.completions.create(
            model="tinyagent", messages=[{"role": "user", "content": "time?"}]
        )
        assert "Observation: {" in reply.choices[0].message.model_extra["reasoning_content"]
        tools = children_of(server.proc.pid)
        assert tools  # the MCP server the --mcp option started
        server.proc.send_signal(signal.SIGTERM)
        assert server.proc.wait(30) == 130
    assert not any(running(pid) for pid in tools)
    assert server.lines[-1] == "tinyagent: interrupted\n"


def test_connections_to_the_listening_socket_have_nagles_algorithm_off():
    """asyncio sets TCP_NODELAY only on connections of a socket made with protocol IPPROTO_TCP; with Nagle on,
    each response written in two pieces waited for the client's delayed ACK (44 ms a request, measured)."""
    import asyncio
    import socket

    from tinyagent.serve.command import listen

    async def accepted_nodelay() -> int:
        found = asyncio.get_running_loop().create_future()

        async def handle(reader, writer) -> None:
            found.set_result(writer.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        server = await asyncio.start_server(handle, sock=listen("127.0.0.1", 0))
        port = server.sockets[0].getsockname()[1]
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            return await asyncio.wait_for(found, 30)
        finally:
            writer.close()
            server.close()

    assert asyncio.run(accepted_nodelay()) == 1
