"""TinyAgent: a small bilingual ReAct agent for open-weight chat models."""
from .agent import Agent, AgentResult, Step, StepKind, StopReason
from .models.base import BaseModel, Completion
from .tools.base import Tool, tool
from .version import __version__

__all__ = ["Agent", "AgentResult", "Step", "StepKind", "StopReason", "BaseModel", "Completion", "Tool", "tool",
           "__version__"]
