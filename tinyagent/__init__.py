"""TinyAgent: a small bilingual ReAct agent for open-weight chat models."""

from .agent import Agent, AgentResult, Observations, ReAct, Step, StepKind, StopReason, Tools
from .models.model import BaseModel, Reply
from .tools.tool import Tool, tool
from .version import __version__

__all__ = [
    "Agent",
    "AgentResult",
    "BaseModel",
    "Observations",
    "ReAct",
    "Reply",
    "Step",
    "StepKind",
    "StopReason",
    "Tool",
    "Tools",
    "tool",
    "__version__",
]
