"""TinyAgent: a small bilingual ReAct agent for open-weight chat models."""
from .agent import Agent, AgentResult, Step
from .llm.base import BaseModel, Completion
from .tools.base import Tool, tool

__version__ = "0.1.0"
__all__ = ["Agent", "AgentResult", "Step", "BaseModel", "Completion", "Tool", "tool", "__version__"]
