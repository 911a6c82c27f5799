"""The command-line options shared by `tinyagent ask / chat / web` and run_demo.py, and the config they
make: a config file (or the defaults) with the options applied on top, and the chat page's login."""

from __future__ import annotations

import argparse
import os
import shlex

from .. import config as configuration
from ..agent.protocols import PROTOCOLS
from ..agent.react import SEARCHES
from ..redaction import register_secret


def add_model_options(parser: argparse.ArgumentParser) -> None:
    """Options shared by `ask`, `chat` and run_demo.py: they override the config file's values."""
    g = parser.add_argument_group("model and agent (override the config file)")
    g.add_argument("--config", metavar="FILE", help="YAML config (default: the embedded SmolLM2 model)")
    g.add_argument(
        "--model",
        metavar="ID_OR_PATH",
        help="hub id, local folder or .gguf file; 'embedded'; with --base-url, the served model name",
    )
    g.add_argument("--gguf-file", metavar="NAME", help="a .gguf file inside the --model folder or repo")
    g.add_argument("--base-url", metavar="URL", help="an OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1")
    g.add_argument("--device", help="auto, cpu, cuda, cuda:N or mps")
    g.add_argument("--dtype", help="auto, float32, float16 or bfloat16")
    g.add_argument("--lang", choices=configuration.LANGS, help="prompt language (auto: from the question)")
    g.add_argument("--max-turns", type=int, metavar="N", help="tool calls before a forced answer")
    g.add_argument("--tools", metavar="LIST", help=f"comma-separated, from: {','.join(configuration.TOOL_NAMES)}")
    g.add_argument(
        "--corpus",
        metavar="PATH",
        help="local_search's documents: a folder of Markdown, text, HTML "
        "and PDF files (indexed once, under TINYAGENT_CACHE) or a JSONL file",
    )
    g.add_argument(
        "--mcp",
        action="append",
        metavar="'COMMAND ARGS...'",
        help="also use the tools of this MCP server (stdio); repeatable, added to the config's agent.mcp_servers",
    )
    g.add_argument(
        "--constrained",
        action=argparse.BooleanOptionalAction,
        help="decode only valid ReAct steps (needs outlines; default: on for the embedded model)",
    )
    g.add_argument(
        "--protocol",
        choices=PROTOCOLS,
        help="how the model calls tools: react (ReAct text, the default), tools (its own tool-call format) or auto",
    )
    g.add_argument(
        "--working-first",
        action=argparse.BooleanOptionalAction,
        help="ReAct: the model first works "
        "the question out as it would alone, then is offered the tools to check it (default: on when "
        "decoding free)",
    )
    g.add_argument(
        "--check-arithmetic",
        action=argparse.BooleanOptionalAction,
        help="with --working-first: the "
        "calculator checks the working's arithmetic and sets its first wrong result right, the model "
        "going on from there (default: on with the calculator)",
    )
    g.add_argument(
        "--search",
        choices=SEARCHES,
        help="ReAct: first searches the question itself before "
        "the model's first reply and puts the results in front of it (default with a search tool); tool "
        "leaves searching to the model",
    )
    g.add_argument(
        "--approve",
        action="store_true",
        help="ask before each call of an MCP server's tool "
        "(y / a / e / n on the terminal, a card on the chat page); agent.approve names tools one by one",
    )
    g.add_argument(
        "--otel",
        action="store_true",
        help="OpenTelemetry spans for runs, model and tool calls, "
        "exported as the OTEL_* variables say (needs tinyagent[otel])",
    )
    g.add_argument("--max-new-tokens", type=int, metavar="N")
    g.add_argument("--temperature", type=float)
    g.add_argument("--top-p", type=float)
    g.add_argument("-v", "--verbose", action="store_true", help="log details; tracebacks on errors")


def add_web_options(parser: argparse.ArgumentParser) -> None:
    """Where and for whom `tinyagent web` and `run_demo.py --web` serve the chat page; its limits override
    the config's `web` section."""
    g = parser.add_argument_group("chat page")
    g.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    g.add_argument("--port", type=int, default=7860, help="port (default: %(default)s)")
    g.add_argument("--share", action="store_true", help="also publish a temporary public gradio.live link")
    g.add_argument(
        "--auth",
        metavar="USER[:PASSWORD]",
        help="a login for the page; without :PASSWORD it is read from TINYAGENT_WEB_PASSWORD (web.auth_password_env)",
    )
    g.add_argument("--max-question-chars", type=int, metavar="N", help="longest question (default 4000)")
    g.add_argument("--max-sessions", type=int, metavar="N", help="conversations kept (default 100)")
    g.add_argument("--session-ttl", type=float, metavar="SECONDS", help="how long an idle one is kept (default 3600)")
    g.add_argument(
        "--max-runs", type=int, metavar="N", help="questions answered at once; more wait in line (default 4)"
    )
    g.add_argument(
        "--store",
        dest="web_store",
        nargs="?",
        const=True,
        metavar="FILE",
        help="keep the "
        "conversations in the conversation store so they survive a restart (default file: under the "
        "user's data directory; web.store); with --auth each user's own",
    )


def config_from_args(args: argparse.Namespace) -> configuration.Config:
    """The config file (or defaults) with the command-line options applied on top."""
    path, tools = args.config, args.tools
    overrides = {
        "model.gguf_file": args.gguf_file,
        "model.device": args.device,
        "model.dtype": args.dtype,
        "agent.lang": args.lang,
        "agent.max_turns": args.max_turns,
        "agent.corpus": args.corpus,
        "agent.constrained": args.constrained,
        "agent.protocol": args.protocol,
        "agent.working_first": args.working_first,
        "agent.check_arithmetic": args.check_arithmetic,
        "agent.search": getattr(args, "search", None),
        "agent.approve_mcp": "ask" if args.approve else None,
        "agent.otel": True if args.otel else None,
        "agent.tools": None if tools is None else [t.strip() for t in tools.split(",") if t.strip()],
        "generation.max_new_tokens": args.max_new_tokens,
        "generation.temperature": args.temperature,
        "generation.top_p": args.top_p,
    }
    if args.model:
        backend = configuration.load_config(path).model.backend
        model = configuration.model_overrides(args.model, args.base_url, backend)
        overrides.update({k: v for k, v in model.items() if v is not None})
    elif args.base_url:
        overrides.update({"model.backend": "openai", "model.base_url": args.base_url})
    for name in ("max_question_chars", "max_sessions", "session_ttl", "max_runs"):  # only `web` has them
        overrides[f"web.{name}"] = getattr(args, name, None)
    for name in ("name", "max_runs", "max_waiting", "max_question_chars", "max_request_bytes"):  # serve's
        overrides[f"serve.{name}"] = getattr(args, f"serve_{name}", None)
    overrides["web.store"] = getattr(args, "web_store", None)
    if getattr(args, "auth", None):
        overrides["web.auth_user"] = args.auth.partition(":")[0]
    if args.mcp:
        overrides["agent.mcp_servers"] = configuration.load_config(path).agent.mcp_servers + [
            mcp_server_spec(command) for command in args.mcp
        ]
    return configuration.load_config(path, overrides)


def mcp_server_spec(command: str) -> dict:
    """An `agent.mcp_servers` entry from a `--mcp "COMMAND ARGS..."` value (split as a shell would)."""
    try:
        words = shlex.split(command)
    except ValueError as e:
        raise configuration.ConfigError(f"--mcp {command!r}: {e}") from None
    if not words:
        raise configuration.ConfigError(
            "--mcp: give the command that starts the server, e.g. --mcp 'python -m mcp_server_time'"
        )
    return {"command": words[0], "args": words[1:]}


def web_login(cfg: configuration.Config, option: str | None) -> tuple[str, str] | None:
    """(user, password) for the page, from `--auth USER[:PASSWORD]` or the config's `web.auth_user` with the
    password in the `web.auth_password_env` variable; the password is a secret from here on."""
    user = cfg.web.auth_user
    if user is None:
        return None
    _, colon, password = (option or "").partition(":")
    if not colon:
        password = os.environ.get(cfg.web.auth_password_env, "")
    if not user or not password:
        raise configuration.ConfigError(
            f"web.auth_user: a login needs a user and a password: --auth USER:PASSWORD, "
            f"or the password in {cfg.web.auth_password_env}"
        )
    register_secret(password)
    return user, password


def loopback(host: str) -> bool:
    """True for an address only this machine reaches."""
    return host in ("localhost", "::1") or host.startswith("127.")
