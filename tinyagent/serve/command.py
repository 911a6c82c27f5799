"""The `tinyagent serve` and `tinyagent mcp-server` commands: every option of `tinyagent ask` (the model, its
tools, MCP servers, protocol; approval refused for the tools that need it, as no one is there to give it),
where to listen, the key clients must send, and the limits (the config's `serve` section).

A key is required whenever the server listens beyond this machine (`--api-key`, or the variable the config's
`serve.api_key_env` names). The model is loaded once; each request gets a fresh Agent on it.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
from collections.abc import Callable
from pathlib import Path

from .. import config as configuration
from ..cli.options import add_model_options, config_from_args, loopback
from ..cli.report import note
from ..redaction import register_secret
from . import mcp_server, openai_api

log = logging.getLogger(__name__)

GRACE_SECONDS = 3  # how long a shutdown waits for responses in progress before it ends them
MIN_KEY_CHARS = 16


class ServeError(Exception):
    """The server cannot start (a missing package, a port in use); the message says which and why."""


def add_parsers(sub) -> None:
    """The `serve` and `mcp-server` subcommands, on the `tinyagent` command's subparsers."""
    text = "the agent behind an OpenAI-compatible API (/v1/chat/completions; needs tinyagent[serving])"
    p = sub.add_parser("serve", help=text, description=text)
    add_model_options(p)
    _add_listen_options(p, 8000)
    _add_limit_options(p)
    p.add_argument(
        "--name",
        dest="serve_name",
        metavar="NAME",
        help="the model name clients ask for (default: the config file's name, or tinyagent)",
    )
    text = "the agent as an MCP server with one tool, ask(question) (needs tinyagent[mcp])"
    p = sub.add_parser("mcp-server", help=text, description=text)
    add_model_options(p)
    g = p.add_argument_group("MCP server")
    g.add_argument(
        "--transport",
        choices=("stdio", "http"),
        default="stdio",
        help="stdio (the default: the client starts this command) or streamable HTTP at http://HOST:PORT/mcp",
    )
    g.add_argument(
        "--expose-tools",
        action="store_true",
        help="also offer each of the agent's own tools (those whose calls need no approval)",
    )
    _add_listen_options(p, 8001)
    _add_limit_options(p)


def _add_listen_options(parser: argparse.ArgumentParser, port: int) -> None:
    g = parser.add_argument_group("listening")
    g.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default: %(default)s); beyond loopback a key is required",
    )
    g.add_argument("--port", type=int, default=port, help="port (default: %(default)s; 0: any free one)")
    g.add_argument(
        "--api-key",
        metavar="KEY",
        help="the key clients must send (Authorization: Bearer KEY); "
        "default: from TINYAGENT_API_KEY (serve.api_key_env)",
    )


def _add_limit_options(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("limits (override the config's serve section)")
    g.add_argument(
        "--max-runs",
        dest="serve_max_runs",
        type=int,
        metavar="N",
        help="questions answered at once; more wait their turn (default 4)",
    )
    g.add_argument(
        "--max-waiting",
        dest="serve_max_waiting",
        type=int,
        metavar="N",
        help="requests waiting for a turn; more are refused (default 16)",
    )
    g.add_argument(
        "--max-question-chars",
        dest="serve_max_question_chars",
        type=int,
        metavar="N",
        help="longest question (default 4000)",
    )
    g.add_argument(
        "--max-request-bytes",
        dest="serve_max_request_bytes",
        type=int,
        metavar="N",
        help="largest request body (default 1000000)",
    )


def served_name(cfg: configuration.Config) -> str:
    """The model name clients ask for: `serve.name`, else the config file's name, else tinyagent."""
    return cfg.serve.name or (Path(cfg.source).stem if cfg.source else "tinyagent")


def api_key(cfg: configuration.Config, given: str | None, host: str, needed: bool = True) -> str | None:
    """The key clients must send: `--api-key`, else the `serve.api_key_env` variable; a ConfigError when the
    server listens beyond loopback without one (`needed`), or the key is too short to keep anyone out."""
    key = given or os.environ.get(cfg.serve.api_key_env) or None
    if key is None:
        if needed and not loopback(host):
            raise configuration.ConfigError(
                f"serve: listening on {host} lets other machines in: give the key they must send with "
                f"--api-key KEY, or in {cfg.serve.api_key_env} (serve.api_key_env)"
            )
        return None
    if len(key.strip()) < MIN_KEY_CHARS:  # refused before it is registered: "too short" stays readable
        raise configuration.ConfigError(
            f"serve: the API key is too short ({len(key.strip())} characters; at least "
            f"{MIN_KEY_CHARS}, e.g. from: python -c 'import secrets; print(secrets."
            "token_urlsafe(24))')"
        )
    register_secret(key)
    return key


def serve(args: argparse.Namespace, load_model: Callable) -> int:
    """`tinyagent serve`: load the model once, then answer chat completions until Ctrl-C."""
    cfg = config_from_args(args)
    key = api_key(cfg, args.api_key, args.host)
    try:
        openai_api.require_server()
    except ImportError as e:
        raise ServeError(str(e)) from None
    limits = openai_api.Limits(
        cfg.serve.max_runs, cfg.serve.max_waiting, cfg.serve.max_request_bytes, cfg.serve.max_question_chars
    )

    def app(factory):
        return openai_api.create_app(factory, served_name(cfg), key, limits)

    return _serving(cfg, args, load_model, app, "/v1", f"an OpenAI-compatible API, model {served_name(cfg)!r},")


def mcp(args: argparse.Namespace, load_model: Callable) -> int:
    """`tinyagent mcp-server`: load the model once, then serve MCP over stdio (until stdin closes) or HTTP."""
    cfg = config_from_args(args)
    key = api_key(cfg, args.api_key, args.host, needed=args.transport == "http")
    try:
        mcp_server.require_mcp()
        if args.transport == "http":
            openai_api.require_server()
    except ImportError as e:
        raise ServeError(str(e)) from None
    s = cfg.serve

    def server(factory):
        return mcp_server.build_server(
            factory, served_name(cfg), args.expose_tools, s.max_runs, s.max_waiting, s.max_question_chars
        )

    if args.transport == "http":
        return _serving(
            cfg,
            args,
            load_model,
            lambda f: mcp_server.http_app(server(f), args.host, key),
            "/mcp",
            "an MCP server (streamable HTTP)",
        )

    def stdio(factory) -> None:
        built = server(factory)
        note("MCP server on stdio (it stops when the client closes stdin)")
        mcp_server.run_stdio(built)

    return _with_agents(cfg, load_model, stdio)


def _with_agents(cfg: configuration.Config, load_model: Callable, body: Callable) -> int:
    """Build the tools, load the model, then `body(factory)`; the tools' MCP servers are stopped after."""
    tools = configuration.build_tools(cfg)
    tracing = None
    try:
        tracing = configuration.start_tracing(cfg)
        model = load_model(cfg)

        def factory(**callbacks):
            return configuration.build_agent(cfg, model, tools=tools, **callbacks)

        factory()  # a config the agent refuses (agent.approve naming no tool) fails now, not per request
        body(factory)
    finally:
        configuration.close_tools(tools)
        if tracing is not None:
            tracing.shutdown()
    return 0


def _serving(cfg, args, load_model: Callable, make_app: Callable, path: str, what: str) -> int:
    """Listen first (a port in use fails before a slow load), then serve `make_app(factory)` with uvicorn."""
    listener = listen(args.host, args.port)
    try:

        def body(factory) -> None:
            import uvicorn

            server = uvicorn.Server(
                uvicorn.Config(
                    make_app(factory),
                    log_level="info" if args.verbose else "warning",
                    access_log=args.verbose,
                    timeout_graceful_shutdown=GRACE_SECONDS,
                    lifespan="on",
                )
            )
            host, port = listener.getsockname()[:2]
            shown = f"[{host}]" if ":" in host else host
            note(f"{what} at http://{shown}:{port}{path} (Ctrl-C to stop)")
            # uvicorn shuts down gracefully on SIGTERM, then raises it again: as Ctrl-C, so the tools'
            # MCP servers are stopped on the way out
            previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
            try:
                server.run(sockets=[listener])
            finally:
                signal.signal(signal.SIGTERM, previous)

        return _with_agents(cfg, load_model, body)
    finally:
        listener.close()


def listen(host: str, port: int) -> socket.socket:
    """A socket listening on host:port (port 0: a free one), or a ServeError saying why not.

    Made with protocol IPPROTO_TCP, not 0 as `socket.create_server` makes it: asyncio turns Nagle's algorithm
    off (TCP_NODELAY) only on connections of such a socket, and with it on, each response written in two
    pieces waited for the client's delayed ACK: 44 ms a request (measured: bench/serve_overhead.py)."""
    sock = None
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
        )[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as e:
        if sock is not None:
            sock.close()
        raise ServeError(
            f"could not listen on {host}:{port}: {e.strerror or e}; choose another --port or --host"
        ) from None
    return sock
