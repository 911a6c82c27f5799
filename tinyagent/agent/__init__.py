"""The agent (layer 3): the loop, its two protocols, what a run produces, tool calls and context fitting.

- loop.py: `Agent` and the loop (`run` -> `_steps` -> `_act` -> one call through the hooks).
- run.py: `RunState`, one run in progress and its model calls (the state the loop and protocol share).
- protocols.py: what the loop asks of a protocol (`BaseProtocol`); react.py: `ReAct`, ReAct text and its
  settings (working first, arithmetic check, asked answers, rechecks); tools_protocol.py: `Tools`, the
  model's own tool-call format (parallel calls, the cap per reply).
- results.py: `Step`, `AgentResult`, `StopReason`, and `Generation` (one model call).
- tool_calls.py: resolve, validate, guard and invoke one tool call.
- shaping.py: tool output as it enters the prompt (`Observations`: control tokens, distilling, the length cap).
- context.py: shortening a prompt to fit the model's window.
- baselines.py: `DirectAnswer`, the model alone with one plain prompt (the eval's baseline).
- hooks.py, approval.py, telemetry.py: code around each run, model call and tool call.
"""

from ..format.kinds import StepKind
from .baselines import DirectAnswer
from .loop import Agent
from .react import ReAct
from .results import AgentResult, Step, StopReason
from .shaping import Observations
from .tools_protocol import Tools

__all__ = ["Agent", "AgentResult", "DirectAnswer", "Observations", "ReAct", "Step", "StepKind", "StopReason", "Tools"]
