"""`tinyagent mcp-server`: the agent as an MCP server, so another agent (or Claude Desktop, Cursor) can hand a
question to a local open-weight agent. Built on the `mcp` package's low-level server (the tool list is ours,
with JSON schemas as they are); over stdio, or streamable HTTP (`streamable_http_app`, served by uvicorn).

One tool, `ask(question)`: a fresh Agent answers it; each step is sent as a progress notification while it
works (to a client that asked for progress), the answer is the result. With `expose_tools`, each of the
agent's own tools is offered as well, called directly: those whose calls need approval are left out, as no
one is there to approve them. At most `max_runs` questions run at once, `max_waiting` more wait their turn;
a call the client cancels stops its run after the step in progress.
"""

from __future__ import annotations

import logging

from ..agent import Agent
from ..agent.approval import Approver, Policy
from ..redaction import redact
from ..text import clip, one_line
from ..tools.tool import Tool, ToolError, invoke
from .conversation import Conversation
from .running import Admission, AgentFactory, Full

log = logging.getLogger(__name__)

INSTALL_HINT = "tinyagent mcp-server needs the mcp package: pip install 'tinyagent[mcp]'"
PROGRESS_CHARS = 2000  # the most of one step sent in a progress notification
ASK = (
    "Ask a small local agent a question, in English or Chinese. It works the question out step by step with "
    "its tools ({tools}) and answers in the question's language. Its steps arrive as progress notifications."
)


def require_mcp() -> None:
    try:
        import mcp.server.lowlevel  # noqa: F401
    except ImportError as e:
        raise ImportError(INSTALL_HINT) from e


def exposable(agent: Agent) -> tuple[list[Tool], list[str]]:
    """The agent's tools that may be called directly (no approval asked), and the names of those that may not."""
    approvers = [h for h in agent.hooks if isinstance(h, Approver)]
    free, held = [], []
    for name, t in agent.tools.items():
        allowed = all(a.policy_for(name) == Policy.ALWAYS for a in approvers)
        (free if allowed else held).append(t if allowed else name)
    return free, held


def build_server(
    factory: AgentFactory,
    name: str = "tinyagent",
    expose_tools: bool = False,
    max_runs: int = 4,
    max_waiting: int = 16,
    max_question_chars: int = 4000,
):
    """The MCP server (mcp's low-level `Server`) for `factory()`'s agents."""
    import mcp.types as types
    from mcp.server.lowlevel import Server

    probe = factory()
    own, held = exposable(probe) if expose_tools else ([], [])
    if held:
        log.warning("not offered as MCP tools (their calls need approval): %s", ", ".join(held))
    by_name = {t.name_for_model: t for t in own}
    if "ask" in by_name:
        log.warning("the agent's own tool 'ask' is not offered: the agent's ask tool has its name")
        del by_name["ask"]
    ask_tool = types.Tool(
        name="ask",
        description=ASK.format(tools=", ".join(probe.tools) or "none"),
        input_schema={
            "type": "object",
            "required": ["question"],
            "additionalProperties": False,
            "properties": {"question": {"type": "string", "description": "the question, in full"}},
        },
    )
    listed = [
        ask_tool,
        *(
            types.Tool(name=n, description=t.description("en"), input_schema=t.json_schema())
            for n, t in by_name.items()
        ),
    ]
    admission = Admission(max_runs, max_waiting)

    def failed(message: str) -> types.CallToolResult:
        return types.CallToolResult(content=[types.TextContent(type="text", text=redact(message))], is_error=True)

    async def list_tools(ctx, params) -> types.ListToolsResult:
        return types.ListToolsResult(tools=listed)

    async def call_tool(ctx, params) -> types.CallToolResult:
        arguments = params.arguments or {}
        if params.name == "ask":
            return await ask(ctx, arguments)
        if params.name in by_name:
            return await call(by_name[params.name], arguments)
        return failed(f"no tool named {params.name!r}; this server has: {', '.join(t.name for t in listed)}")

    async def ask(ctx, arguments: dict) -> types.CallToolResult:
        import asyncio

        question = arguments.get("question")
        if set(arguments) - {"question"} or not isinstance(question, str) or not question.strip():
            return failed("ask takes one argument, question: a non-empty string")
        if len(question) > max_question_chars:
            return failed(f"the question is too long ({len(question)} characters; the limit is {max_question_chars})")
        try:
            admission.admit()
        except Full as e:
            return failed(str(e))
        await admission.enter(asyncio.Event())  # a cancelled call stops waiting (CancelledError)
        run = admission.start(factory, Conversation([], question))
        shown, steps = "", 0
        try:
            async for text, step in run.deltas():
                shown += text
                if step is not None:
                    steps += 1
                    await ctx.session.report_progress(steps, None, clip(shown.strip(), PROGRESS_CHARS, " ..."))
                    shown = ""
        finally:
            if run.running:  # the call was cancelled, or the client went away
                log.info("the MCP call ended before its run: the run stops after the step in progress")
                run.stop()
        result = run.result
        if result is None:
            return failed(f"the run failed: {one_line(run.error)}")
        if not result.finished:
            return failed(f"no answer ({result.stop_reason}){': ' + result.error if result.error else ''}")
        return types.CallToolResult(content=[types.TextContent(type="text", text=redact(result.answer))])

    async def call(t: Tool, arguments: dict) -> types.CallToolResult:
        import anyio

        try:
            text = await anyio.to_thread.run_sync(lambda: invoke(t, t.validate(arguments), probe.tool_timeout))
        except ToolError as e:
            return failed(f"{t.name_for_model}: {one_line(e, with_type=False)}")
        except Exception as e:  # a bug in the tool: one line, the server goes on
            log.warning("tool %s failed: %s", t.name_for_model, one_line(e))
            return failed(f"{t.name_for_model} failed: {one_line(e)}")
        return types.CallToolResult(content=[types.TextContent(type="text", text=redact(text))])

    return Server(name, on_list_tools=list_tools, on_call_tool=call_tool)


def run_stdio(server) -> None:
    """Serve one client over stdin / stdout until it closes stdin (the SDK keeps stray prints off stdout)."""
    import anyio
    from mcp.server.stdio import stdio_server

    async def main() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(main)


def http_app(server, host: str, api_key: str | None = None):
    """The streamable HTTP app at /mcp; with `api_key`, every request wants `Authorization: Bearer KEY`."""
    import hmac

    app = server.streamable_http_app(host=host)
    if api_key is None:
        return app

    async def guarded(scope, receive, send) -> None:
        if scope["type"] == "http":
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(given, b"Bearer " + api_key.encode()):
                body = b'{"error": "a valid API key is required: Authorization: Bearer KEY"}'
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await app(scope, receive, send)

    return guarded
