"""The agent (layer 3): the loop, what a run produces, tool calls and context fitting.

- loop.py: `Agent`, the loop (`run` -> `_steps` -> `_turn`).
- protocols.py: ReAct text or the model's own tool calls, what the loop asks of each.
- results.py: `Step`, `AgentResult`, `StopReason`, and `Generation` (one model call).
- tool_calls.py: resolve, validate, guard and invoke one tool call.
- observations.py: tool output as it enters the prompt (control tokens, distilling, the length cap).
- context.py: shortening a prompt to fit the model's window.
- direct.py: `DirectAnswer`, the model alone with one plain prompt (the eval's baseline).
"""
from ..format.kinds import StepKind
from .direct import DirectAnswer
from .loop import Agent
from .results import AgentResult, Step, StopReason

__all__ = ["Agent", "AgentResult", "DirectAnswer", "Step", "StepKind", "StopReason"]
