"""The agent (layer 3): the loop, what a run produces, tool calls and context fitting.

- loop.py: `Agent`, the ReAct loop on one screen (`run` -> `_steps`).
- results.py: `Step`, `AgentResult`, `StopReason`, and `Generation` (one model call).
- tool_calls.py: resolve, validate, guard and invoke one tool call.
- observations.py: tool output as it enters the prompt (control tokens, distilling, the length cap).
- context.py: shortening a prompt to fit the model's window.
"""
from ..format.kinds import StepKind
from .loop import Agent
from .results import AgentResult, Step, StopReason

__all__ = ["Agent", "AgentResult", "Step", "StepKind", "StopReason"]
