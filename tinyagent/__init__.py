"""TinyAgent: a small bilingual ReAct agent for open-weight chat models."""
from .agent import Agent, AgentResult, Step, StepKind, StopReason
from .models.base import BaseModel, Completion
from .tools.base import Tool, tool

__version__ = "0.1.0"
__all__ = ["Agent", "AgentResult", "Step", "StepKind", "StopReason", "BaseModel", "Completion", "Tool", "tool",
           "__version__"]
