"""The original TinyAgent tutorial's names, kept working in one place, around the agent rather than inside it.

The tutorial scanned replies with `parse_latest_plugin_call`, ran tools with `call_plugin`, built the prompt
with `build_system_input`, answered with `text_completion`, and called its model with
`model.chat(prompt, history, meta_instruction)`. `TutorialAgent(agent)` and `TutorialModel(model)` give an
`Agent` and a `BaseModel` those methods; the functions below read a reply the tutorial's way.

    agent = TutorialAgent(Agent(model, tools))
    answer, history = agent.text_completion("Which year was Jay Chou born?")
"""

from __future__ import annotations

from .agent import Agent
from .format.arguments import read_arguments
from .format.kinds import StepKind
from .format.messages import history_to_messages
from .format.names import clean_tool_name
from .format.reading import cut_at_observation, read_forced_answer, read_step
from .models.model import BaseModel, Reply


def parse_latest_plugin_call(text: str) -> tuple[str, str, str]:
    """TinyAgent's scan: (tool name as written, raw action input, the reply up to the end of the input),
    or ("", "", reply) when the reply calls no tool."""
    reading = read_step(text)
    if reading.kind in (StepKind.UNKNOWN_TOOL, StepKind.ACTION, StepKind.BAD_INPUT) and reading.action:
        return clean_tool_name(reading.action), reading.action_input or "", reading.text
    return "", "", cut_at_observation(text)


def parse_final_answer(text: str) -> str | None:
    """The final answer a reply gives (before any invented observation), or None."""
    reading = read_step(text)
    return reading.answer if reading.kind == StepKind.FINAL_ANSWER else None


def parse_thought(text: str) -> str:
    """The reasoning before the action or final answer, without its `Thought:` label."""
    return read_step(text).thought


def parse_action_input(text: str, tool=None) -> dict:
    """The arguments a model wrote (see `format.arguments.read_arguments`)."""
    return read_arguments(text, tool)


parse_forced_answer = read_forced_answer


class TutorialModel:
    """A model with the tutorial's `chat`; everything else is the model's own."""

    def __init__(self, model: BaseModel):
        self.model = model

    def __getattr__(self, name: str):
        return getattr(self.model, name)

    def chat(self, prompt: str, history: list | None = None, meta_instruction: str = "") -> tuple[str, list]:
        """One user turn; returns (response, history + [(prompt, response)])."""
        messages = [{"role": "system", "content": meta_instruction}] if meta_instruction else []
        messages += history_to_messages(history)
        messages.append({"role": "user", "content": prompt})
        response = Reply.of(self.model.generate(messages)).text.strip()
        return response, list(history or []) + [(prompt, response)]


class TutorialAgent:
    """An agent with the tutorial's methods; everything else is the agent's own."""

    def __init__(self, agent: Agent):
        self.agent = agent

    def __getattr__(self, name: str):
        return getattr(self.agent, name)

    def build_system_input(self, lang: str = "en") -> str:
        """The system prompt: tool descriptions and the ReAct format in `lang`."""
        return self.agent.system_prompt_for(lang)

    parse_latest_plugin_call = staticmethod(parse_latest_plugin_call)

    def call_plugin(self, plugin_name: str, plugin_args: str) -> str:
        """Run a tool from the raw text a model wrote, outside any run; always returns an observation."""
        reading = read_step(f"Action: {plugin_name}\nAction Input: {plugin_args}", self.agent.tools.values())
        if reading.kind != StepKind.ACTION:
            return self.agent.protocol.error_observation(reading.error, None, self.agent.prompts)
        return self.agent.act(reading).observation

    def text_completion(self, text: str, history: list | None = None) -> tuple[str, list]:
        """TinyAgent's entry point: answer `text` given (question, answer) history."""
        result = self.agent.run(text, history=history)
        return result.answer, list(history or []) + [(text, result.answer)]
