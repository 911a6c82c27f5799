"""How runs are shown and recorded: streamed steps for people, JSON for programs, a JSONL trace.

Shared by the `tinyagent` command and run_demo.py, so both print steps the same way.
"""

from __future__ import annotations

import json
import sys

from ..agent import StepKind, StopReason
from ..format.observations import observation_line
from ..format.templates import shipped
from ..redaction import redact, secrets
from ..text import escape_controls, lang_for
from ..tools.local_search import cited_sources
from ..traces import TraceWriter, dumps, to_jsonable

PROG = "tinyagent"


def note(message: str) -> None:
    """A status line on stderr (never on stdout, which carries answers); no control character of what it
    quotes (a tool's name, a server's words) reaches the terminal."""
    print(f"{PROG}: {escape_controls(redact(message))}", file=sys.stderr, flush=True)


#: How a summary line says why a run ended (an answer needs no word).
STOP_REASONS = {
    StopReason.FINAL_ANSWER: "",
    StopReason.NO_ACTION: "the reply had no ReAct labels: taken as the answer",
    StopReason.MAX_TURNS: "answer forced at the turn cap",
    StopReason.NO_FORCED_ANSWER: "no answer even at the turn cap",
    StopReason.CONTEXT_OVERFLOW: "stopped: the context window is full",
    StopReason.MODEL_ERROR: "stopped: the model failed",
    StopReason.HOOK_ERROR: "stopped: a hook failed",
    StopReason.STOPPED: "stopped on request",
}


def summary(result) -> str:
    """One line: steps, tokens, seconds (and why it stopped, when not with an answer)."""
    parts = [_steps(len(result.steps))]
    if result.prompt_tokens is not None or result.completion_tokens is not None:
        p, c = result.prompt_tokens or 0, result.completion_tokens or 0
        parts.append(f"{p + c} tokens ({p} prompt + {c} generated)")
    else:
        parts.append("tokens not reported by the model")
    parts.append(f"{result.seconds:.1f} s")
    if result.stop_reason != StopReason.FINAL_ANSWER:
        parts.append(STOP_REASONS.get(result.stop_reason) or f"stopped: {result.stop_reason}")
    return "[" + ", ".join(parts) + "]"


def answer_sources(result) -> list[str]:
    """The sources (`setup.md § Installing`, `manual.pdf p. 3`) of the local_search passages the answer
    came from; none for a run without an answer."""
    return cited_sources(result.steps, result.answer) if result.finished else []


def _steps(n: int) -> str:
    return f"{n} step{'s' if n != 1 else ''}"


class Reporter:
    """Shows and records runs: streamed steps (human), one JSON object per run (--json), a trace.

    Pass `on_text` / `on_step` to the Agent; call `begin` before and `end` after each run.
    """

    def __init__(
        self, json_mode: bool = False, stream: bool = True, trace: TraceWriter | None = None, echo_question: bool = True
    ):
        self.json_mode, self.stream, self.trace = json_mode, stream and not json_mode, trace
        self.echo_question = echo_question
        self.runs = 0
        self._reset("", "en", 0)

    def _reset(self, question: str, lang: str, max_turns: int) -> None:
        self.question, self.lang, self.max_turns = question, lang, max_turns
        self.steps: list = []
        self._line_open = False  # streamed text not yet ended by a newline
        self._streamed = False  # the model streamed text for the current step
        self._pending = ""  # streamed text held back while it may be the start of a secret
        self._forced_shown = False  # the turn-cap prompt is printed before the forced answer

    def _out(self, text: str) -> None:
        """Text for people on stdout: redacted, its control characters shown escaped (`escape_controls`), so
        what a model or a tool wrote cannot drive the terminal."""
        if not self.json_mode:
            sys.stdout.write(escape_controls(redact(text)))
            sys.stdout.flush()

    def _stream_out(self, text: str, final: bool = False) -> None:
        """Print streamed text, holding back a tail that could be the first part of a secret."""
        self._pending += text
        known = secrets()
        cut = len(self._pending) - (0 if final or not known else max(map(len, known)) - 1)
        for secret in known:  # never cut through a secret: print it whole, as [REDACTED]
            i = self._pending.find(secret)
            while i != -1:
                cut = max(cut, i + len(secret)) if i < cut else cut
                i = self._pending.find(secret, i + 1)
        if not final and cut > 0 and self._pending[cut - 1] == "\r":  # maybe a CRLF cut in two: wait for the LF
            cut -= 1
        if cut > 0:
            self._out(self._pending[:cut])
            self._pending = self._pending[cut:]

    def callbacks(self) -> dict:
        """Agent keyword arguments: on_step always, on_text only when streaming (so backends need not)."""
        return {"on_step": self.on_step, **({"on_text": self.on_text} if self.stream else {})}

    def begin(self, question: str, lang: str, max_turns: int) -> None:
        self.runs += 1
        self._reset(question, lang, max_turns)
        if self.echo_question:
            self._out(f"Question: {question}\n")

    def pause(self) -> None:
        """End the streamed line, so the terminal can ask something (approval) on a line of its own."""
        if self.json_mode:
            return
        self._stream_out("", final=True)
        if self._line_open:
            self._out("\n")
            self._line_open = False

    def on_text(self, text: str) -> None:
        if not self.stream or not text:
            return
        if self._turns() >= self.max_turns and not self._forced_shown:
            self._forced_shown = True
            self._out(shipped().text("react.force_final", self.lang) + ("" if text[0].isspace() else " "))
        self._stream_out(text)
        self._streamed, self._line_open = True, not text.endswith("\n")

    def on_step(self, step) -> None:
        self.steps.append(step)
        if self.trace is not None:
            self.trace.write({"event": "step", "run": self.runs, "question": self.question, **to_jsonable(step)})
        if self.json_mode:
            return
        self._stream_out("", final=True)
        if step.kind == StepKind.SEARCHED:  # the agent's own call, not the model's: shown as the call it is
            self._out(f"Action: {step.action}\nAction Input: {step.action_input}\n")
        elif not self._streamed:  # --no-stream, or a backend that does not stream
            forced = step.kind in (StepKind.FORCED_ANSWER, StepKind.NO_FORCED_ANSWER)
            self._out(
                (shipped().text("react.force_final", self.lang) + " " if forced else "") + step.text.lstrip(" ") + "\n"
            )
        elif self._line_open:
            self._out("\n")
        self._line_open = self._streamed = False
        if step.edited_from is not None:
            self._out(f"Action Input (edited): {json.dumps(step.arguments, ensure_ascii=False)}\n")
        line = observation_line(step)
        if line is not None:
            self._out(line + "\n")

    def _turns(self) -> int:
        """Model replies so far (the tools protocol makes one step per call of a reply)."""
        return len({s.index if s.turn is None else f"turn {s.turn}" for s in self.steps})

    def end(self, result) -> None:
        sources = answer_sources(result)
        if self.trace is not None:
            fields = {k: v for k, v in to_jsonable(result).items() if k != "steps"}
            self.trace.write(
                {"event": "result", "run": self.runs, **fields, "steps": len(result.steps), "sources": sources}
            )
        if self.json_mode:
            print(dumps({**to_jsonable(result), "sources": sources}), flush=True)
            return
        head = f"Final Answer: {result.answer}" if result.finished else "No final answer."
        cited = f"Sources: {'; '.join(sources)}\n" if sources else ""
        self._out(f"{'-' * 40}\n{head}\n{cited}{summary(result)}\n\n")

    def interrupted(self) -> None:
        """Ctrl-C during a run: show and record what was done so far."""
        if self.trace is not None:
            self.trace.write(
                {"event": "interrupted", "run": self.runs, "question": self.question, "steps": len(self.steps)}
            )
        if self.json_mode:
            print(
                dumps(
                    {"question": self.question, "steps": self.steps, "finished": False, "stop_reason": "interrupted"}
                ),
                flush=True,
            )
            return
        self._stream_out("", final=True)
        self._out(("\n" if self._line_open else "") + f"{'-' * 40}\nInterrupted after {_steps(len(self.steps))}.\n")


def answer(agent, reporter: Reporter, question: str, chat: bool = True, answer_schema=None):
    """Run one question through `agent` (keeping its history when `chat`), reporting as it goes."""
    lang = lang_for(agent.lang, question)
    reporter.begin(question, lang, agent.max_turns)
    try:
        result = agent.chat(question) if chat else agent.run(question, answer_schema=answer_schema)
    except KeyboardInterrupt:
        reporter.interrupted()
        raise
    reporter.end(result)
    return result
