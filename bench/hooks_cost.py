"""What hooks cost a run: the same two-step run (a scripted model, the calculator) with no hooks, with a
hook that does nothing, with an approver that says run, and with OpenTelemetry tracing into the SDK's
in-memory exporter. The modes take turns in one process, so a busy machine slows them alike; the
figures are CPU microseconds per run (the least of `--rounds` rounds: the machine's other work only
ever adds), and each mode's ratio to no hooks.

    .venv/bin/python bench/hooks_cost.py [--runs 2000]
"""

from __future__ import annotations

import argparse
import time

from tinyagent import Agent, BaseModel, ReAct, Reply
from tinyagent.agent.approval import Verdict
from tinyagent.agent.hooks import Hooks
from tinyagent.tools import Calculator

REPLIES = ('Thought: compute.\nAction: calculator\nAction Input: {"expression": "6*7"}', "Final Answer: 42")


class Scripted(BaseModel):
    """Answers the two replies in turn, with usage counts, instantly."""

    def generate(self, messages, stop=None, **kwargs):
        return Reply(REPLIES[messages[-1]["role"] == "assistant"], prompt_tokens=100, completion_tokens=10)


def modes() -> dict:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from tinyagent.agent.telemetry import Tracing

    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing = Tracing(provider)
    return {
        "no hooks": {},
        "a no-op hook": {"hooks": [Hooks()]},
        "approve (run)": {"approve": lambda request: Verdict.run()},
        "tracing (SDK, in memory)": {"hooks": [tracing]},
        "_exporter": exporter,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    settings = modes()
    exporter = settings.pop("_exporter")
    model, tool = Scripted(), Calculator()
    # tool_timeout=None: the calculator runs in this thread, so a worker thread's start is not in the figure
    agents = {
        name: Agent(model, [tool], ReAct(working_first=False), tool_timeout=None, **kwargs)
        for name, kwargs in settings.items()
    }
    per_run: dict[str, list[float]] = {name: [] for name in agents}
    for _ in range(args.rounds):
        for name, agent in agents.items():
            started = time.process_time()
            for _ in range(args.runs // args.rounds):
                agent.run("What is 6*7?")
            per_run[name].append((time.process_time() - started) / (args.runs // args.rounds) * 1e6)
            exporter.clear()
    base = min(per_run["no hooks"])
    for name, values in per_run.items():
        print(f"{name:<26} {min(values):8.1f} us/run   {min(values) / base:5.2f}x")


if __name__ == "__main__":
    main()
