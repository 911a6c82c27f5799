"""The `tinyagent` command: `ask` one question, `chat` in a multi-turn session, or `web`: a chat page.

Steps stream to stdout as the model writes them; status lines and errors go to stderr, so
`--json` output on stdout stays machine-readable. User mistakes end with one line
(`tinyagent: error: ...`) and exit code 2 (usage, config) or 1 (runtime); Ctrl-C exits 130.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import time
import traceback
from collections.abc import Callable

from .. import config as configuration
from ..agent.answer_schema import AnswerSchema
from ..agent.approval import give_asker
from ..eval import command as evaluation
from ..jsonhttp import RequestFailed
from ..models.embedded import NOTICE as EMBEDDED_NOTICE
from ..redaction import redact, register_url
from ..serve import command as serving
from ..store import SQLiteStore, StoreError, check_name
from ..text import escape_controls, one_line
from ..traces import TraceWriter, dumps
from ..version import __version__
from ..web import page
from .options import add_model_options, add_web_options, config_from_args, loopback, web_login
from .report import PROG, Reporter, answer, note
from .terminal import TerminalApprover

EXIT_RUNTIME, EXIT_USAGE, EXIT_INTERRUPTED = 1, 2, 130
log = logging.getLogger(__name__)


class LoadError(Exception):
    """The model could not be loaded or reached; the message says which and why."""


# --- output -------------------------------------------------------------------------------------


class _StderrHandler(logging.Handler):
    """Writes to the sys.stderr of the moment (tests swap it), as `tinyagent: warning: ...`."""

    def emit(self, record: logging.LogRecord) -> None:
        message = escape_controls(redact(record.getMessage()))  # it may quote a model, a tool or a server
        print(f"{PROG}: {record.levelname.lower()}: {message}", file=sys.stderr, flush=True)
        if record.exc_info and logging.getLogger("tinyagent").level <= logging.INFO:  # --verbose: traceback, redacted
            trace = escape_controls(redact("".join(traceback.format_exception(*record.exc_info))))
            print(trace, file=sys.stderr, end="", flush=True)


def setup_logging(verbose: bool = False) -> None:
    """Show tinyagent's warnings (INFO too with --verbose) on stderr, once."""
    logger = logging.getLogger("tinyagent")
    logger.setLevel(logging.INFO if verbose else logging.WARNING)
    if not any(isinstance(h, _StderrHandler) for h in logger.handlers):
        logger.addHandler(_StderrHandler())


# --- the model -----------------------------------------------------------------------------------


def model_label(cfg: configuration.Config) -> str:
    """The model in a few words, for status and error lines."""
    m = cfg.model
    if m.backend == "embedded":
        return "the embedded SmolLM2-135M-Instruct model"
    if m.backend == "openai":
        return f"model {m.name} at {register_url(m.base_url)}"  # without its credentials
    return f"model {m.path}" + (f" ({m.gguf_file})" if m.gguf_file else "")


def load_model(cfg: configuration.Config):
    """Build the model with a status line on stderr; failures become a one-line LoadError."""
    m = cfg.model
    if m.backend == "openai":
        note(f"Using {model_label(cfg)}")
    elif m.backend == "embedded":
        on_llama = configuration.embedded_runtime(cfg) == "llamacpp"
        note(
            f"Loading {model_label(cfg)} on {'llama.cpp' if on_llama else 'transformers'} ... "
            f"({'about a second' if on_llama else 'this takes ~20 s on CPU'})"
        )
    else:
        note(f"Loading {model_label(cfg)} with backend {m.backend} on device {m.device} ...")
    started = time.perf_counter()
    try:
        model = configuration.build_model(cfg)
    except (configuration.ConfigError, KeyboardInterrupt):
        raise
    except Exception as e:
        log.info("model load failed", exc_info=True)
        raise LoadError(f"could not load {model_label(cfg)}: {one_line(e, with_type=False)}") from e
    if cfg.model.backend != "openai":
        note(f"Model ready in {time.perf_counter() - started:.1f} s")
    if cfg.model.backend == "embedded":
        note(EMBEDDED_NOTICE)
    return model


def guarded(body: Callable[[], int], verbose: bool = False) -> int:
    """Run a command body; turn what users can cause into one line on stderr and an exit code."""
    try:
        return body()
    except configuration.ConfigError as e:
        code, message = EXIT_USAGE, one_line(e, with_type=False)
    except (LoadError, RequestFailed, serving.ServeError, StoreError) as e:
        code, message = EXIT_RUNTIME, one_line(e, with_type=False)
    except KeyboardInterrupt:
        note("interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return EXIT_RUNTIME
    except Exception as e:
        code, message = EXIT_RUNTIME, one_line(e)
        if not verbose:
            message += " (run with --verbose for details)"
    if verbose:
        print(escape_controls(redact(traceback.format_exc())), file=sys.stderr, end="", flush=True)
    print(f"{PROG}: error: {escape_controls(message)}", file=sys.stderr, flush=True)
    return code


# --- the commands -------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="A small bilingual ReAct agent for open-weight chat models.",
        epilog="Run `tinyagent ask -h` for the options.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="{ask,chat,web,serve,mcp-server,eval}")
    for name, text in (("ask", "answer one question"), ("chat", "a multi-turn session (stdin may be piped)")):
        p = sub.add_parser(name, help=text, description=text)
        if name == "ask":
            p.add_argument("question", nargs="+", help="the question (quotes optional)")
            p.add_argument(
                "--answer-schema",
                metavar="FILE.json",
                help="a JSON Schema the final answer must fit: "
                "asked for, sent back once when it does not fit, decoded within it when constrained; "
                "--json carries it as \"data\"",
            )
        else:
            p.add_argument(
                "--session",
                metavar="NAME",
                help="keep the conversation in the conversation store and "
                "go on with it next time (/sessions lists them, /forget deletes one)",
            )
            p.add_argument(
                "--store",
                metavar="FILE",
                help="the conversation store (default: conversations.sqlite3 "
                "under $TINYAGENT_DATA, $XDG_DATA_HOME/tinyagent or ~/.local/share/tinyagent)",
            )
        add_model_options(p)
        out = p.add_argument_group("output")
        out.add_argument("--no-stream", action="store_true", help="print each step when it ends")
        out.add_argument("--json", action="store_true", help="one JSON result per question on stdout")
        out.add_argument("--trace", metavar="FILE", help="append one JSON line per step to FILE")
    text = "a chat page in the browser: steps stream live (needs tinyagent[web])"
    p = sub.add_parser("web", help=text, description=text)
    add_model_options(p)
    add_web_options(p)
    serving.add_parsers(sub)
    text = "score the agent on a JSONL suite beside the model alone; `eval compare DIR...` (python -m tinyagent.eval)"
    sub.add_parser("eval", help=text, description=text, add_help=False)  # its own parser reads the rest
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["eval"]:  # the same command as python -m tinyagent.eval, under this name
        return evaluation.main(argv[1:], prog=f"{PROG} eval")
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help, --version, or a usage error argparse has printed
        return e.code if isinstance(e.code, int) else EXIT_USAGE
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    setup_logging(args.verbose)
    return guarded(lambda: _run(args), args.verbose)


def _run(args: argparse.Namespace) -> int:
    if args.command == "web":
        return web_page(args)
    if args.command in ("serve", "mcp-server"):
        return (serving.serve if args.command == "serve" else serving.mcp)(args, load_model)
    cfg = config_from_args(args)
    session = open_session(args) if args.command == "chat" else None  # a bad store fails before the load
    schema = answer_schema_of(args.answer_schema) if getattr(args, "answer_schema", None) else None
    tools = configuration.build_tools(cfg)
    trace, tracing = None, None
    try:
        tracing = configuration.start_tracing(cfg)
        trace = TraceWriter(args.trace) if args.trace else None
        if trace is not None:
            trace.write({"event": "start", "command": args.command, "version": __version__, "config": cfg.to_dict()})
        interactive = args.command == "chat" and sys.stdin.isatty()
        reporter = Reporter(json_mode=args.json, stream=not args.no_stream, trace=trace, echo_question=not interactive)
        model = load_model(cfg)
        agent = configuration.build_agent(cfg, model, tools=tools, **reporter.callbacks())
        give_asker(agent.hooks, TerminalApprover(before=reporter.pause))
        if args.command == "ask":
            result = answer(agent, reporter, " ".join(args.question), chat=False, answer_schema=schema)
            return EXIT_RUNTIME if run_failed(result, args.verbose) else 0
        return chat_loop(agent, reporter, interactive, args.verbose, session)
    finally:
        configuration.close_tools(tools)
        if trace is not None:
            trace.close()
        configuration.stop_tracing(tracing)  # exports the spans still queued, for a few seconds at most


def answer_schema_of(path: str) -> AnswerSchema:
    """The JSON Schema in the file `--answer-schema` names; a file that is not one is a one-line ConfigError."""
    try:
        with open(path, encoding="utf-8") as f:
            return AnswerSchema.of(json.load(f))
    except FileNotFoundError:
        raise configuration.ConfigError(f"--answer-schema {path}: no such file") from None
    except (OSError, UnicodeDecodeError, ValueError, TypeError) as e:
        raise configuration.ConfigError(f"--answer-schema {path}: {one_line(e, with_type=False)}") from None


def web_page(args: argparse.Namespace, model=None) -> int:
    """Load the model once, then serve the chat page until Ctrl-C; `model` replaces the configured one."""
    cfg = config_from_args(args)
    auth = web_login(cfg, args.auth)  # before a slow load: a missing password is a usage error
    store = SQLiteStore(None if cfg.web.store is True else cfg.web.store) if cfg.web.store else None
    try:
        page.require_gradio()
    except ImportError as e:
        raise LoadError(str(e)) from None
    tools = configuration.build_tools(cfg)
    tracing = None
    try:
        tracing = configuration.start_tracing(cfg)
        model = model if model is not None else load_model(cfg)

        def new_agent(**callbacks):
            return configuration.build_agent(cfg, model, tools=tools, **callbacks)

        about = f"Model: {model_label(cfg)}. Tools: {', '.join(new_agent().tools) or 'none'}."
        w = cfg.web
        if cfg.model.backend == "embedded":
            about += f"\n\n{EMBEDDED_NOTICE}"
        chat_page = page.ChatPage(
            new_agent,
            about,
            max_question_chars=w.max_question_chars,
            max_sessions=w.max_sessions,
            session_ttl=w.session_ttl,
            max_runs=w.max_runs,
            store=store,
        ).build()
        if auth is None and (args.share or not loopback(args.host)):
            log.warning(
                "the chat page is open to %s without a login: anyone there can use its model and tools. "
                "Add --auth USER (password from %s)",
                "anyone with the public link" if args.share else f"other machines ({args.host})",
                w.auth_password_env,
            )
        try:
            url, public = page.serve(chat_page, args.host, args.port, args.share, auth)
        except OSError as e:
            raise LoadError(
                f"could not serve the page on {args.host}:{args.port}: the port is in use or not "
                f"allowed ({type(e).__name__}); choose another with --port"
            ) from e
        note(f"Chat page at {url}" + (f" and {public}" if public else "") + " (Ctrl-C to stop)")
        chat_page.block_thread()
    finally:
        configuration.close_tools(tools)  # stops the MCP servers of --mcp / agent.mcp_servers
        configuration.stop_tracing(tracing)
    return 0


CHAT_HELP = "Commands: /history, /reset (forget the conversation), /exit (or Ctrl-D)."
SESSION_HELP = " With --session: /sessions (list), /forget [NAME] (delete one)."


def open_session(args: argparse.Namespace) -> tuple[SQLiteStore, str] | None:
    """(store, name) for `chat --session NAME` (`--store FILE`), or None without --session."""
    if args.session is None:
        if args.store is not None:
            raise configuration.ConfigError("--store: give the conversation's name with --session NAME")
        return None
    try:
        return SQLiteStore(args.store), check_name(args.session)
    except ValueError as e:
        raise configuration.ConfigError(f"--session: {e}") from None


def run_failed(result, verbose: bool = False) -> bool:
    """Say on stderr, in one line, that the model or a hook failed during the run (its steps were shown)."""
    if not result.stop_reason.failed:
        return False
    hint = "" if verbose else " (run with --verbose for details)"
    message = escape_controls(redact(result.error or "the run failed"))
    print(f"{PROG}: error: {message}{hint}", file=sys.stderr, flush=True)
    return True


def chat_loop(
    agent, reporter: Reporter, interactive: bool, verbose: bool = False, session: tuple[SQLiteStore, str] | None = None
) -> int:
    """Read questions line by line until EOF or /exit; the agent keeps the conversation, and with a `session`
    (store, name) the store does too: its earlier turns first, each turn written once answered."""
    store, name = session or (None, None)
    if store is not None:
        agent.history = store.load(name)
        note(f"conversation {name!r}: " + (f"{len(agent.history)} earlier turns" if agent.history else "new"))
    if interactive:
        note(f"chat with {type(agent.model).__name__}. {CHAT_HELP}" + (SESSION_HELP if store else ""))
    while True:
        line = _read_line(interactive)
        if line is None:
            return 0
        line = line.strip()
        if not line:
            continue
        if not line.startswith("/"):
            result = answer(agent, reporter, line)
            if store is not None:
                store.append(name, line, result)
            run_failed(result, verbose)  # the conversation goes on
            continue
        command, _, rest = line.partition(" ")
        command, rest = command.lower(), rest.strip()
        if command in ("/exit", "/quit"):
            return 0
        if command in ("/sessions", "/forget") and store is None:
            note(f"{command} needs --session NAME (the conversation store)")
        elif command == "/reset" or command == "/forget" and rest in ("", name):
            agent.reset()
            if store is not None:
                store.forget(name)
            note("history cleared" + (f" (conversation {name!r} deleted)" if store is not None else ""))
        elif command == "/forget":
            note(f"conversation {rest!r} " + ("deleted" if store.forget(rest) else "does not exist"))
        elif command == "/sessions":
            _print_sessions(store, name)
        elif command == "/history":
            _print_history(agent.history, reporter.json_mode)
        elif command == "/help":
            note(CHAT_HELP + (SESSION_HELP if store else ""))
        else:
            note(f"unknown command {command}. {CHAT_HELP}")


def _read_line(interactive: bool) -> str | None:
    """The next line of input, or None at EOF. A prompt only when a person is typing."""
    if not (interactive and sys.stdout.isatty()):
        return sys.stdin.readline() or None
    with contextlib.suppress(ImportError):
        import readline  # noqa: F401  (line editing and history for input())
    try:
        return input("> ")
    except EOFError:
        print(file=sys.stderr)
        return None


def _print_sessions(store: SQLiteStore, current: str) -> None:
    """The stored conversations, newest first, the current one starred."""
    listed = store.conversations()
    for c in listed:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(c.updated))
        print(f"{'*' if c.name == current else ' '} {redact(c.name)}  ({c.turns} turns, {when})", flush=True)
    if not listed:
        print("(no stored conversations)", flush=True)


def _print_history(history: list, json_mode: bool) -> None:
    if json_mode:
        print(dumps({"history": [{"question": q, "answer": a} for q, a in history]}), flush=True)
        return
    if not history:
        print("(no history)", flush=True)
    for i, (question, reply) in enumerate(history, 1):
        print(escape_controls(f"{i}. Q: {redact(question)}\n   A: {redact(reply)}"), flush=True)
