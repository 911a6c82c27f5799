"""`tinyagent mcp-server`: the `mcp` client library against the command started as a real process (over stdio,
as Claude Desktop starts it, and over streamable HTTP with a key), its model a scripted OpenAI-compatible
stub in this process: the ask tool with its steps as progress notifications, the agent's own tools with
--expose-tools (not those that need approval), and what a client gets wrong."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest
import requests
from openai_stub import OpenAIStub
from serving import TINYAGENT, Process, environment

pytest.importorskip("mcp")
import mcp  # noqa: E402

pytestmark = pytest.mark.slow

ACT = 'Thought: I should compute it.\nAction: calculator\nAction Input: {"expression": "6*7"}'
ANSWER = "Thought: I now know the final answer\nFinal Answer: 42"
ECHO_SERVER = str(Path(__file__).parent / "mcp_echo_server.py")
KEY = "mcp-serve-test-key-0123456789"


def stdio(stub: OpenAIStub, *more: str) -> mcp.Client:
    params = mcp.StdioServerParameters(
        command=TINYAGENT,
        args=["mcp-server", "--base-url", stub.base_url, "--model", "stub-model", "--tools", "calculator", *more],
        env=environment(),
    )
    return mcp.Client(params, read_timeout_seconds=60)


def test_ask_answers_over_stdio_with_the_steps_as_progress():
    progress: list[tuple[float, str]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, message))

    async def session(stub: OpenAIStub):
        async with stdio(stub) as client:
            tools = (await client.list_tools()).tools
            result = await client.call_tool("ask", {"question": "What is 6 times 7?"}, progress_callback=on_progress)
            return tools, result

    with OpenAIStub(replies=[ACT, ANSWER]) as stub:
        tools, result = asyncio.run(session(stub))
        assert stub.chat_requests == 2
    assert [t.name for t in tools] == ["ask"] and "calculator" in tools[0].description
    assert tools[0].input_schema["required"] == ["question"]
    assert not result.is_error and result.content[0].text == "42"
    assert [done for done, _ in progress] == [1, 2]
    first, last = progress[0][1], progress[1][1]
    assert first.startswith("Thought: I should compute it.") and first.endswith("Observation: 42")
    assert last.endswith("Final Answer: 42")


def test_expose_tools_offers_the_agents_tools_but_not_those_that_need_approval(tmp_path):
    config = tmp_path / "agent.yaml"
    config.write_text(
        json.dumps({"agent": {"mcp_servers": [{"command": sys.executable, "args": [ECHO_SERVER], "tools": ["echo"]}]}})
    )  # JSON is YAML

    async def session(stub: OpenAIStub):
        async with stdio(stub, "--expose-tools", "--config", str(config), "--approve") as client:
            names = [t.name for t in (await client.list_tools()).tools]
            right = await client.call_tool("calculator", {"expression": "6*7"})
            wrong = await client.call_tool("calculator", {"expression": "6*"})
            unknown = await client.call_tool("echo", {"text": "hi"})
            bad = await client.call_tool("ask", {"question": "  "})
            return names, right, wrong, unknown, bad

    with OpenAIStub(replies=ANSWER) as stub:
        names, right, wrong, unknown, bad = asyncio.run(session(stub))
        assert stub.chat_requests == 0  # no question was asked of the model
    assert names == ["ask", "calculator"]  # the echo server's tools need approval (--approve): left out
    assert right.content[0].text == "42" and not right.is_error
    assert wrong.is_error and wrong.content[0].text.startswith("calculator: ")
    assert unknown.is_error and "no tool named 'echo'" in unknown.content[0].text
    assert bad.is_error and "non-empty string" in bad.content[0].text


def test_over_http_a_key_is_required_and_the_right_one_gets_an_answer():
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    async def session(url: str):
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {KEY}"}, timeout=60) as http:
            async with mcp.Client(streamable_http_client(url, http_client=http), read_timeout_seconds=60) as client:
                return await client.call_tool("ask", {"question": "What is 6 times 7?"})

    with (
        OpenAIStub(replies=[ACT, ANSWER]) as stub,
        Process(
            "mcp-server",
            "--transport",
            "http",
            "--port",
            "0",
            "--base-url",
            stub.base_url,
            "--model",
            "stub-model",
            "--tools",
            "calculator",
            env=environment(TINYAGENT_API_KEY=KEY),
        ) as server,
    ):
        url = server.wait_for(r"MCP server .* at (http://\S+/mcp)").group(1)
        refused = requests.post(
            url,
            json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
            headers={"Authorization": "Bearer wrong-key-0123456789"},
            timeout=30,
        )
        assert refused.status_code == 401
        result = asyncio.run(session(url))
    assert result.content[0].text == "42"
