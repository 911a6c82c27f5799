"""run_demo.py: the two multi-turn conversations with a scripted model (fast), and one real run
of the script on the embedded SmolLM2 model."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from test_cli import StreamingModel

from tinyagent import redaction as secret_store

ROOT = Path(__file__).resolve().parent.parent
QUESTIONS = ["Which year was Jay Chou born?", "What was his first album?", "周杰伦哪年出生？", "他的第一张专辑是什么？"]
SUMMARY = re.compile(r"^\[\d+ steps?, \d+ tokens \((\d+) prompt \+ (\d+) generated\), \d+\.\d s", re.MULTILINE)


def load_demo():
    spec = importlib.util.spec_from_file_location("run_demo", ROOT / "run_demo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def demo(monkeypatch):
    monkeypatch.delenv("SERPER_API_KEY", raising=False)
    monkeypatch.setattr(secret_store, "_extra_secrets", set())
    return load_demo()


def scripted_demo_model():
    """Stands in for the embedded model, which prefers constrained decoding (so the demo runs ReAct steps)."""
    model = StreamingModel(
        [  # each question is searched first: the replies answer from its passages
            "Thought: The search result says he was born on 18 January 1979.\nFinal Answer: 1979",
            "Thought: The search result above names it.\nFinal Answer: Jay (2000)",
            "Thought: 搜索结果说他1979年1月18日出生。\nFinal Answer: 1979年",
            "Final Answer: 《Jay》",
        ]
    )
    model.prefers_constrained = True
    return model


def test_demo_runs_both_conversations_with_history(demo, capsys):
    model = scripted_demo_model()
    code = demo.main(["--max-turns", "3"], model=model)
    out, err = capsys.readouterr()
    assert code == 0
    positions = [out.index(f"Question: {q}\n") for q in QUESTIONS]
    assert positions == sorted(positions)
    assert (
        out.index("=== Conversation: English ===")
        < positions[0]
        < out.index("=== Conversation: 中文 ===")
        < positions[2]
    )
    assert "Tools: calculator, local_search." in out
    assert "SERPER_API_KEY is not set: using the offline local_search tool" in err
    observations = [o.split("\nThought:")[0] for o in out.split("\nObservation: ")[1:]]
    assert len(observations) == 4  # each question searched first, with the real local_search over the shipped corpus
    assert "born on 18 January 1979" in observations[0] and "1979年1月18日出生" in observations[2]
    for answer, cited in (
        ("1979", "Jay Chou"),
        ("Jay (2000)", "Jay Chou; Jay (album)"),
        ("1979年", "周杰伦"),
        ("《Jay》", "周杰伦; Jay（专辑）"),
    ):  # the sources of the searched passages an answer came from
        assert f"----------------------------------------\nFinal Answer: {answer}\nSources: {cited}\n[" in out
    assert len(SUMMARY.findall(out)) == 4
    assert "=== Done: 4 questions, 4 answered with a Final Answer line; 8 steps (4 tool calls), 220 tokens," in out
    follow_up = model.calls[1]["messages"]  # "his first album": the first turn is in the prompt
    assert follow_up[1]["content"] == QUESTIONS[0] and follow_up[2] == {"role": "assistant", "content": "1979"}
    assert follow_up[3]["content"].startswith(QUESTIONS[1] + "\n\nSearch results for it:\n[1] Jay Chou")
    chinese = model.calls[2]["messages"]  # the Chinese conversation starts afresh, with a Chinese prompt
    assert [m["role"] for m in chinese] == ["system", "user"] and "请尽你所能" in chinese[0]["content"]
    assert [m["role"] for m in model.calls[3]["messages"]] == ["system", "user", "assistant", "user"]


def test_demo_uses_google_search_when_a_serper_key_is_set(demo, capsys, monkeypatch):
    monkeypatch.setenv("SERPER_API_KEY", "serper-key-for-test")
    model = StreamingModel(["Final Answer: a"] * 4)
    model.prefers_constrained = True  # as the embedded model the demo runs
    assert demo.main(["--no-stream"], model=model) == 0
    out, err = capsys.readouterr()
    assert "Tools: google_search, calculator, local_search." in out and "SERPER_API_KEY" not in err
    assert "google_search" in model.calls[0]["messages"][0]["content"]


def test_demo_defaults_to_configs_default_yaml(demo):
    assert demo.parse_args([]).config == str(ROOT / "configs" / "default.yaml")
    assert demo.parse_args(["--model", "internlm/internlm2-chat-1_8b"]).config is None
    assert (
        demo.parse_args(["--config", "configs/internlm2-chat-1_8b.yaml"]).config == "configs/internlm2-chat-1_8b.yaml"
    )


def test_demo_errors_are_one_line(demo, capsys):
    assert demo.main(["--config", "configs/nope.yaml"]) == 2
    assert capsys.readouterr().err.strip() == "tinyagent: error: configs/nope.yaml: no such config file"


@pytest.mark.slow
def test_real_demo_run_on_the_embedded_model(tmp_path):
    """The script as a user runs it: embedded SmolLM2 on CPU, short replies, both conversations."""
    trace_file = tmp_path / "demo.jsonl"
    env = {k: v for k, v in os.environ.items() if k not in ("SERPER_API_KEY", "OPENAI_API_KEY")}
    env["HF_HUB_OFFLINE"] = "1"
    done = subprocess.run(
        [sys.executable, "run_demo.py", "--max-new-tokens", "32", "--max-turns", "2", "--trace", str(trace_file)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out, err = done.stdout, done.stderr
    for question in QUESTIONS:
        assert f"Question: {question}\n" in out
    summaries = SUMMARY.findall(out)
    assert len(summaries) == 4 and all(int(prompt) > 100 and int(generated) > 0 for prompt, generated in summaries)
    assert re.search(r"=== Done: 4 questions, \d answered with a Final Answer line; \d+ steps", out)
    assert "Loading the embedded SmolLM2-135M-Instruct model" in err and "Model ready in" in err
    assert "SERPER_API_KEY is not set" in err and "Traceback" not in err
    records = [json.loads(line) for line in trace_file.read_text(encoding="utf-8").splitlines()]
    steps = [r for r in records if r["event"] == "step"]
    assert [r["question"] for r in records if r["event"] == "result"] == QUESTIONS
    assert steps and all(0 < s["completion_tokens"] <= 32 for s in steps if s["text"])
    for question in QUESTIONS:  # constrained decoding (configs/default.yaml): every question uses a tool
        calls = [
            s
            for s in steps
            if s["question"] == question
            and s["action"] in ("calculator", "local_search")
            and s["arguments"] is not None
            and s["observation"]
            and s["error"] != "repeated call"
        ]
        assert calls, f"no tool call for {question!r}"
        assert f"Observation: {calls[0]['observation'].splitlines()[0]}" in out
