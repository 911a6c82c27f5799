"""The tools protocol on a tiny random model of each family, built here with that family's chat template
(which takes `tools=`) and its tool-call tokens: scripted replies forced through the model token by token
(its template, decoding and cache are the real ones), constrained episodes whose KV-cache reuse equals no
reuse token for token, and a template that re-renders an earlier turn."""

from __future__ import annotations

import json
import os

import pytest
import torch
from tiny_models import build_tiny_model
from tool_templates import LLAMA31, MISTRAL_V3, QWEN3_DROPS_THINKING, QWEN25

from tinyagent import Agent, Tools
from tinyagent.format.kinds import StepKind
from tinyagent.format.tool_formats import FORMATS
from tinyagent.models.hf import HFChatModel
from tinyagent.tools import Calculator

os.environ.setdefault("HF_HUB_OFFLINE", "1")

#: family -> (tiny model family, template, the family's extra special tokens)
BUILDS = {
    "hermes": ("qwen2", QWEN25, ["<tool_call>", "</tool_call>"]),
    "llama3": ("llama", LLAMA31, ["<|python_tag|>", "<|eom_id|>"]),
    "mistral": (
        "mistral",
        MISTRAL_V3,
        [
            "[INST]",
            "[/INST]",
            "[TOOL_CALLS]",
            "[AVAILABLE_TOOLS]",
            "[/AVAILABLE_TOOLS]",
            "[TOOL_RESULTS]",
            "[/TOOL_RESULTS]",
        ],
    ),
}
#: what the second prompt shows: the tools where the family puts them, and the result in its wrapping
SHOWN = {
    "hermes": ("<tools>", "<tool_response>\n4\n</tool_response>"),
    "llama3": ("Given the following functions", "<|start_header_id|>ipython<|end_header_id|>\n\n4"),
    "mistral": ("[AVAILABLE_TOOLS]", '[TOOL_RESULTS] {"content": "4", "call_id": "call_0"}[/TOOL_RESULTS]'),
    "internlm2": ("<|im_start|>system name=<|plugin|>\n", "<|im_start|>environment name=<|plugin|>\n4<|im_end|>"),
}
TOOLS = [Calculator()]


class Force:
    """A logits processor that makes the model write `ids`, then end its turn."""

    def __init__(self, ids: list[int], end: int):
        self.ids, self.end, self.at = ids, end, 0

    def __call__(self, input_ids, scores):
        token = self.ids[self.at] if self.at < len(self.ids) else self.end
        self.at += 1
        forced = torch.full_like(scores, float("-inf"))
        forced[:, token] = 0
        return forced


def forcing(model, replies: list[str]):
    """`model` whose next replies are `replies`, each forced through its own generate; prompts are kept."""
    base = type(model)

    class Forced(base):
        def generate(self, messages, stop=None, **kwargs):
            self.prompts.append(self.render_prompt(messages, kwargs.get("tools")))
            ids = self.tokenizer(self.replies.pop(0), add_special_tokens=False)["input_ids"]
            return super().generate(messages, stop, logits_processor=[Force(ids, self.end_token_ids[0])], **kwargs)

    forced = Forced.from_model(model.model, model.tokenizer, max_new_tokens=120)
    if base is not HFChatModel:
        forced.meta_instruction, forced.add_bos = model.meta_instruction, model.add_bos
    forced.replies, forced.prompts = list(replies), []
    return forced


@pytest.fixture(scope="module", params=[*BUILDS, "internlm2"])
def family(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp(request.param)
    if request.param == "internlm2":
        from test_internlm2 import VARIANTS, write_internlm2

        from tinyagent.models.internlm2 import InternLM2Chat

        write_internlm2(folder, **VARIANTS["mha-bias-tied-bin"], max_pos=2048)
        return request.param, InternLM2Chat(str(folder), dtype="float32")
    name, template, extra = BUILDS[request.param]
    return request.param, HFChatModel(
        str(build_tiny_model(name, folder, template=template, extra_tokens=extra)), dtype="float32"
    )


def test_the_models_family_is_known_from_its_template(family):
    name, model = family
    assert (model.tool_format, model.native_tools) == (name, True)


def test_a_scripted_episode_in_the_familys_own_format(family):
    name, model = family
    fmt = FORMATS[name]
    replies = [fmt.write_call("calculator", {"expression": "2+2"}), "The answer is 4."]
    forced, streamed = forcing(model, replies), []
    result = Agent(forced, TOOLS, on_text=streamed.append, protocol=Tools()).run("What is 2+2?")
    assert result.protocol == "tools" and result.answer == "4", [s.text for s in result.steps]  # the answer itself
    call, final = result.steps
    assert final.final_answer.strip() == "The answer is 4."  # the step keeps the sentence
    assert (call.kind, call.action, call.arguments, call.observation) == (
        StepKind.ACTION,
        "calculator",
        {"expression": "2+2"},
        "4",
    )
    assert call.text == replies[0]  # the call's markers survive decoding
    assert "".join(streamed) == call.text + final.text
    tools_shown, result_shown = SHOWN[name]
    assert tools_shown in forced.prompts[0] and '"calculator"' in forced.prompts[0]
    assert result_shown in forced.prompts[1]
    assert forced.prompts[1].startswith(forced.prompts[0]) or name == "mistral"  # see the re-render test
    assert final.cached_tokens > 0


def test_parallel_calls_and_broken_ones_through_the_model(family):
    name, model = family
    fmt = FORMATS[name]
    two = fmt.write_call("calculator", {"expression": "1+1"})
    if name == "mistral":
        two = two[:-1] + ", " + json.dumps({"name": "calculator", "arguments": {"expression": "2+2"}}) + "]"
    else:
        two += fmt.separator + fmt.write_call("calculator", {"expression": "2+2"})
    broken = fmt.write_call("calculator", {"expression": "3+3"})[:-12]  # cut inside the call
    forced = forcing(model, [two, broken, "done"])
    result = Agent(forced, TOOLS, max_turns=4, protocol=Tools()).run("1+1 and 2+2?")
    kinds = [(s.kind, s.observation) for s in result.steps]
    assert kinds[:2] == [(StepKind.ACTION, "2"), (StepKind.ACTION, "4")], kinds
    assert result.steps[0].turn == result.steps[1].turn == 0
    assert result.steps[2].kind in (StepKind.ACTION, StepKind.TOOL_ERROR, StepKind.MALFORMED, StepKind.BAD_INPUT)
    assert result.answer == "done"


def test_a_constrained_episode_is_valid_and_identical_with_kv_reuse(family):
    """Free tokens from random weights, kept to the family's call format: every reply is a valid call or
    answer, and reusing the kept cache gives the same tokens as computing every prompt afresh."""
    name, model = family
    fresh = type(model).from_model(model.model, model.tokenizer, reuse_cache=False)
    if type(model) is not HFChatModel:
        fresh.meta_instruction, fresh.add_bos = model.meta_instruction, model.add_bos
    runs = []
    for m in (model, fresh):
        m.reset_cache()
        chunks: list[str] = []
        agent = Agent(m, TOOLS, max_turns=3, max_new_tokens=80, on_text=chunks.append, protocol=Tools(constrained=True))
        runs.append((agent.run("What is 12 times 6?"), "".join(chunks)))
    (a, streamed_a), (b, streamed_b) = runs
    assert [s.text for s in a.steps] == [s.text for s in b.steps] and a.answer == b.answer
    assert streamed_a == streamed_b
    assert a.steps[0].kind in (StepKind.ACTION, StepKind.TOOL_ERROR) and a.steps[0].action == "calculator"
    assert all(s.kind.format_valid for s in a.steps), [(s.kind, s.text, s.error) for s in a.steps]
    assert all(s.cached_tokens > 0 for s in a.steps[1:] if s.cached_tokens is not None)
    assert all(s.cached_tokens == 0 for s in b.steps if s.cached_tokens is not None)


def test_a_template_that_re_renders_an_earlier_turn_is_detected_and_reuse_stays_exact(tmp_path):
    """Qwen3's templates drop the reasoning of earlier turns: the next prompt no longer starts with the last
    prompt and its reply. The run says so, reuses what is exact, and answers as a model without reuse does."""
    model = HFChatModel(
        str(
            build_tiny_model(
                "qwen3", tmp_path, template=QWEN3_DROPS_THINKING, extra_tokens=["<tool_call>", "</tool_call>"]
            )
        ),
        dtype="float32",
    )
    call = "<think>I need the calculator.</think>\n" + FORMATS["hermes"].write_call("calculator", {"expression": "6*7"})
    results = []
    for reuse in (True, False):
        forced = forcing(type(model).from_model(model.model, model.tokenizer, reuse_cache=reuse), [])
        forced.replies = [call, "It is 42."]
        result = Agent(forced, TOOLS, protocol=Tools()).run("6*7?")
        results.append((result, forced))
    (a, forced_a), (b, _) = results
    assert [s.text for s in a.steps] == [s.text for s in b.steps] and a.answer == "It is 42."
    assert not forced_a.prompts[1].startswith(forced_a.prompts[0] + call)
    assert any("re-rendered an earlier turn" in n for n in a.steps[1].notes), a.steps[1].notes
    assert 0 < a.steps[1].cached_tokens < a.steps[0].prompt_tokens + a.steps[0].completion_tokens


def test_concurrent_tools_agents_are_batched_and_answer_as_they_would_alone(tmp_path):
    """Three constrained tools runs at once share the model's batch; each gives the steps it gives alone."""
    from tinyagent.runs import run_many

    model = HFChatModel(
        str(build_tiny_model("qwen3", tmp_path, template=QWEN25, extra_tokens=["<tool_call>", "</tool_call>"])),
        dtype="float32",
    )
    assert model._batcher is not None
    questions = ["What is 12 times 6?", "Add 3 and 9.", "What is 2 to the power of 10?"]

    def agent():
        return Agent(model, TOOLS, max_turns=2, max_new_tokens=60, protocol=Tools(constrained=True))

    together = run_many(agent, questions, concurrency=3)
    alone = [agent().run(q) for q in questions]
    assert [[s.text for s in item.result.steps] for item in together] == [[s.text for s in r.steps] for r in alone]
    assert all(item.result.protocol == "tools" and item.error is None for item in together)
