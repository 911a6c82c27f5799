"""An MCP server run over stdio: every tool it lists becomes a `Tool`.

    with MCPServer("python", ["-m", "mcp_server_time"]) as server:
        agent = Agent(model, server.tools)

The official `mcp` SDK is async; each MCPServer runs it on an event loop in a background thread
of its own, so the agent stays synchronous. A call that fails in any way (an error result, a
protocol error, a server that died or stopped answering within `timeout`) raises `ToolError`,
which the agent shows the model as an observation. Closing stops the server process; servers
still open when Python exits are closed then.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import logging
import os
import shlex
import tempfile
import threading
import weakref
from collections.abc import Mapping, Sequence

from ...format.observations import kept
from ...redaction import redact, register_args, register_secret
from ...text import clip
from ..tool import Tool, ToolError
from .server_tool import DESCRIPTION_CHARS, NAME, MCPTool, result_text
from .spec import INSTALL_HINT, MCPServerError

log = logging.getLogger(__name__)

#: More tools than this from one server, without a `tools` allow-list, gets a warning: the prompt grows.
MANY_TOOLS = 12
#: The SDK's stdio shutdown: close stdin, wait 2 s, SIGTERM the process group, wait 2 s, SIGKILL.
CLOSE_SECONDS = 10.0
_LIST_PAGES = 100  # a server whose tool listing never ends cannot hang the start

_open_servers: weakref.WeakSet[MCPServer] = weakref.WeakSet()


class MCPServer:
    """One MCP server run over stdio; `tools` holds a `Tool` per tool it offers.

    `env` is added to the few variables the server inherits (HOME, PATH, ...); its values are
    secrets and are redacted wherever tinyagent writes, as are the values in `args` of a key-like
    flag (`--api-token X`, `--key=X`), of the flags in `secret_args`, and the credentials of URLs. `timeout` bounds the start and each call.
    `tools` keeps only the named tools; descriptions are cut to `description_chars`.
    """

    def __init__(
        self,
        command: str,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        timeout: float = 30.0,
        tools: Sequence[str] | None = None,
        description_chars: int = DESCRIPTION_CHARS,
        secret_args: Sequence[str] = (),
    ):
        try:
            import mcp  # the optional extra
        except ImportError:
            raise MCPServerError(INSTALL_HINT) from None
        for value in (env or {}).values():
            register_secret(value)
        register_args(list(args), secret_args)
        self.label = redact(shlex.join([command, *args]))
        self.timeout = timeout
        self.tools: list[Tool] = []
        self._closed = False
        self._done = threading.Event()
        self._stderr = tempfile.TemporaryFile("a+", encoding="utf-8", errors="replace")  # O_APPEND
        self._loop = asyncio.new_event_loop()
        self._ready: asyncio.Future = self._loop.create_future()  # the listed tools, or the start's error
        self._stop = asyncio.Event()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"mcp {command}", daemon=True)
        self._thread.start()
        _open_servers.add(self)
        params = mcp.StdioServerParameters(command=command, args=list(args), env=dict(env or {}))
        self._runner = asyncio.run_coroutine_threadsafe(self._serve(params), self._loop)
        try:
            listed = asyncio.run_coroutine_threadsafe(self._started(), self._loop).result(timeout + 1)
            self.tools = _select(self, listed, tools, description_chars)
            if tools is None and len(self.tools) > MANY_TOOLS:
                log.warning(
                    "MCP server %s offers %d tools, each ~150 prompt tokens; keep the ones you need "
                    "with tools=[...] (`tools:` in the config)",
                    self.label,
                    len(self.tools),
                )
        except MCPServerError:
            self.close()
            raise
        except Exception as e:
            message = self._start_failure(e)
            self.close()
            raise MCPServerError(message) from None
        except BaseException:  # Ctrl-C during the start
            self.close()
            raise

    # --- the background loop -------------------------------------------------------------------

    async def _serve(self, params) -> None:
        """Own the client session from start to close (the SDK's scopes must open and close in one task)."""
        import mcp
        from mcp.client.stdio import stdio_client

        try:
            async with mcp.Client(
                stdio_client(params, errlog=self._stderr), read_timeout_seconds=self.timeout
            ) as client:
                listed, cursor = [], None
                for _ in range(_LIST_PAGES):
                    page = await client.list_tools(cursor=cursor)
                    listed += page.tools
                    cursor = page.next_cursor
                    if cursor is None:
                        break
                self._client = client
                self._ready.set_result(listed)
                await self._stop.wait()
        except Exception as e:
            if not self._ready.done():
                self._ready.set_exception(e)
            else:
                log.info("MCP server %s ended: %s", self.label, _reason(e))
        finally:
            self._ready.cancel()  # no-op once set; else a start cancelled by close()
            self._done.set()

    async def _started(self) -> list:
        """The listed tools, once the server has started (within `timeout`)."""
        return await asyncio.wait_for(asyncio.shield(self._ready), self.timeout)

    # --- calls ---------------------------------------------------------------------------------

    def call_tool(self, name: str, arguments: dict) -> str:
        """Run `tools/call` and return the result as text; any failure raises ToolError."""
        if self._closed:
            raise ToolError(f"{name}: the MCP server {self.label} is closed")
        call = self._client.call_tool(name, arguments, read_timeout_seconds=self.timeout)
        future = asyncio.run_coroutine_threadsafe(call, self._loop)
        try:
            result = future.result(self.timeout + 1)  # the SDK's own timeout comes first; this is a backstop
        except Exception as e:
            from mcp.types import REQUEST_TIMEOUT

            timed_out = isinstance(e, (concurrent.futures.TimeoutError, asyncio.TimeoutError)) or (
                getattr(getattr(e, "error", None), "code", None) == REQUEST_TIMEOUT
            )
            reason = f"no answer within {self.timeout:g} s" if timed_out else _reason(e)
            raise ToolError(redact(f"{name} failed: {reason} (MCP server {self.label})")) from None
        finally:
            future.cancel()  # no-op when done; stops a call left behind by a timeout or Ctrl-C
        text = kept(redact(result_text(result)))  # redacted, then cut: no half of a key is left
        if result.is_error:
            raise ToolError(text or f"{name} reported an error")
        return text

    # --- closing -------------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the server process and the loop thread; bounded in time, safe to call again (also after
        a Ctrl-C cut it short: the server stays on the list that is closed at exit until it is done)."""
        self._closed = True
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._shut_down)
            if not self._done.wait(CLOSE_SECONDS):
                log.warning("MCP server %s did not stop within %g s", self.label, CLOSE_SECONDS)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(CLOSE_SECONDS)
        if not self._thread.is_alive() and not self._loop.is_closed():
            self._loop.close()
        self._stderr.close()
        _open_servers.discard(self)

    def _shut_down(self) -> None:
        """On the loop: end the session normally, or cancel a start that has not finished."""
        if self._ready.done():
            self._stop.set()
        else:
            self._runner.cancel()

    def __enter__(self) -> MCPServer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<MCPServer {self.label}: {len(self.tools)} tools>"

    def _start_failure(self, error: BaseException) -> str:
        """One line on why the start failed, with the server's last words on stderr."""
        timed_out = isinstance(error, (concurrent.futures.TimeoutError, asyncio.TimeoutError))
        reason = f"no answer within {self.timeout:g} s" if timed_out else _reason(error)
        said = self._last_stderr_line()
        return redact(f"MCP server {self.label} did not start: {reason}" + (f" (it said: {said})" if said else ""))

    def _last_stderr_line(self) -> str:
        try:
            fd = self._stderr.fileno()
            size = os.fstat(fd).st_size
            tail = os.pread(fd, 2000, max(0, size - 2000)).decode("utf-8", "replace")
        except (OSError, ValueError):
            return ""
        lines = [line.strip() for line in tail.splitlines() if line.strip()]
        return clip(lines[-1], 200) if lines else ""


def _select(server: MCPServer, listed: list, names: Sequence[str] | None, chars: int) -> list[Tool]:
    """A Tool per listed tool, or per named tool when `names` is given (each must exist). A tool whose name is
    not an MCP tool name (a newline, an escape sequence, ...) is left out, with a warning naming the server."""
    usable = []
    for spec in listed:
        if isinstance(spec.name, str) and NAME.fullmatch(spec.name):
            usable.append(spec)
        else:
            log.warning(
                "MCP server %s: the tool %s is not used: its name is not an MCP tool name (1-128 letters, "
                "digits, _, - and .)",
                server.label,
                clip(repr(spec.name), 80),
            )
    by_name = {spec.name: spec for spec in usable}
    if names is not None:
        missing = [n for n in names if n not in by_name]
        if missing:
            raise MCPServerError(
                f"MCP server {server.label} has no tool {', '.join(map(repr, missing))}; "
                f"it has: {', '.join(by_name) or 'none'}"
            )
        usable = [by_name[n] for n in names]
    return [MCPTool(server, spec, chars) for spec in usable]


def _reason(error: BaseException) -> str:
    """The first line of an error, looking inside the exception groups of the SDK's task groups."""
    while isinstance(getattr(error, "exceptions", None), (list, tuple)) and error.exceptions:  # a group
        error = error.exceptions[0]
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


# --- servers from a config ------------------------------------------------------------------------


def start_servers(specs: Sequence[dict], taken: Sequence[Tool] = ()) -> list[Tool]:
    """The tools of a server per spec (each tool's `.server` closes it). A tool name another tool
    has is an MCPServerError naming both; on any failure the servers already started are closed."""
    servers: list[MCPServer] = []
    owner = {t.name_for_model: f"the tool {t.name_for_model!r}" for t in taken}
    try:
        for spec in specs:
            server = MCPServer(**spec)
            servers.append(server)
            if not server.tools:
                log.warning("MCP server %s offers no tools; it is not used", server.label)
            for t in server.tools:
                if t.name_for_model in owner:
                    raise MCPServerError(
                        f"the tool {t.name_for_model!r} of MCP server {server.label} has the "
                        f"name of {owner[t.name_for_model]}; leave one out with `tools: [...]`"
                    )
                owner[t.name_for_model] = f"the tool {t.name_for_model!r} of MCP server {server.label}"
    except BaseException:
        for server in servers:
            server.close()
        raise
    for server in servers:
        if not server.tools:
            server.close()
    return [t for server in servers for t in server.tools]


@atexit.register
def _close_all() -> None:
    """The last resort: servers nobody closed stop when Python exits (also after Ctrl-C)."""
    for server in list(_open_servers):
        server.close()
