"""The `tinyagent` command: in-process with a scripted model, and as a real process (errors,
exit codes, and end to end against a real OpenAI-compatible HTTP server on 127.0.0.1)."""

from __future__ import annotations

import io
import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ScriptedModel
from openai_stub import OpenAIStub

from tinyagent import config
from tinyagent import redaction as secret_store
from tinyagent.cli import commands as cli
from tinyagent.format.templates import shipped

ROOT = Path(__file__).resolve().parent.parent
TINYAGENT = str(Path(sys.executable).parent / "tinyagent")  # the installed console script
SECRET = "sk-test-secret-value-4242"

SEARCH_THEN_ANSWER = [
    'Thought: I should compute it.\nAction: calculator\nAction Input: {"expression": "6*7"}',
    "Thought: I now know the final answer\nFinal Answer: 42",
]


class StreamingModel(ScriptedModel):
    """Scripted replies streamed to `on_text` in small chunks, as real backends do.

    `printed` records what stdout held when each reply had been streamed but not yet returned:
    proof that text is shown live, not after the step.
    """

    def __init__(self, replies, usage=(50, 5)):
        super().__init__(replies, usage=usage)
        self.printed: list[str] = []
        self.built_from = None

    def generate(self, messages, stop=None, on_text=None, **kwargs):
        reply = super().generate(messages, stop=stop, **kwargs)
        text = str(reply)
        if on_text is not None:
            for i in range(0, len(text), 4):
                on_text(text[i : i + 4])
            self.printed.append(sys.stdout.getvalue() if hasattr(sys.stdout, "getvalue") else "")
        return reply


class Failing(StreamingModel):
    """Raises `error` on call number `at` (0-based)."""

    def __init__(self, replies, error: BaseException, at: int):
        super().__init__(replies)
        self.error, self.at = error, at

    def generate(self, messages, stop=None, **kwargs):
        if len(self.calls) == self.at:
            self.calls.append({"messages": messages})
            raise self.error
        return super().generate(messages, stop=stop, **kwargs)


@pytest.fixture
def use_model(monkeypatch):
    """use_model(model) makes `tinyagent` get `model` instead of loading one; returns it."""
    monkeypatch.delenv("SERPER_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setattr(secret_store, "_extra_secrets", set())  # secrets other tests registered

    def install(model):
        def build(cfg):
            model.built_from = cfg
            model.prefers_constrained = cfg.model.backend == "embedded"  # as the embedded model says of itself
            return model

        monkeypatch.setattr(config, "build_model", build)
        return model

    return install


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_ask_streams_steps_live_then_answer_and_summary(use_model, capsys):
    model = use_model(StreamingModel(SEARCH_THEN_ANSWER))
    code, out, err = run_cli(capsys, "ask", "--tools", "calculator", "What", "is", "6*7?")
    assert code == 0
    assert out.startswith("Question: What is 6*7?\nThought: I should compute it.\nAction: calculator\n")
    assert 'Action Input: {"expression": "6*7"}\nObservation: 42\nThought: I now know' in out
    assert out.index("Observation: 42") < out.index("Final Answer: 42\n---")
    assert "Final Answer: 42\n[2 steps, 110 tokens (100 prompt + 10 generated)," in out
    assert 'Action Input: {"expression": "6*7"}' in model.printed[0]  # on screen before the step ended
    assert "Observation" not in model.printed[0]
    assert re.search(
        r"Loading the embedded SmolLM2-135M-Instruct model on (llama\.cpp \.\.\. \(about a second\)|"
        r"transformers \.\.\. \(this takes ~20 s on CPU\))",
        err,
    )
    assert "SmolLM2-135M is a 135M-parameter demo model and is often wrong; for real answers pick a real model" in err
    assert "Traceback" not in err and "SERPER_API_KEY" not in err


def test_no_stream_prints_each_step_when_it_ends(use_model, capsys):
    model = use_model(StreamingModel(SEARCH_THEN_ANSWER))
    code, out, _ = run_cli(capsys, "ask", "--no-stream", "--tools", "calculator", "What is 6*7?")
    assert code == 0 and model.printed == []
    assert "Action Input: {\"expression\": \"6*7\"}\nObservation: 42\nThought: I now know the final answer\n" in out
    assert out.count("Final Answer: 42") == 2  # the model's line, then the result block


def test_json_prints_only_the_result_on_stdout(use_model, capsys):
    use_model(StreamingModel(SEARCH_THEN_ANSWER))
    code, out, err = run_cli(capsys, "ask", "--json", "--tools", "calculator", "What is 6*7?")
    assert code == 0
    result = json.loads(out)  # the whole of stdout is one JSON document
    assert result["answer"] == "42" and result["finished"] is True and result["stop_reason"] == "final_answer"
    assert [s["action"] for s in result["steps"]] == ["calculator", None]
    assert result["steps"][0]["arguments"] == {"expression": "6*7"} and result["prompt_tokens"] == 100
    assert "Loading" in err


def test_trace_writes_one_json_line_per_step(use_model, capsys, tmp_path):
    use_model(StreamingModel(SEARCH_THEN_ANSWER))
    trace = tmp_path / "trace.jsonl"
    assert run_cli(capsys, "ask", "--trace", str(trace), "--tools", "calculator", "What is 6*7?")[0] == 0
    records = [json.loads(line) for line in trace.read_text().splitlines()]
    assert [r["event"] for r in records] == ["start", "step", "step", "result"]
    assert records[0]["config"]["agent"]["tools"] == ["calculator"]
    first = records[1]
    assert (first["action"], first["arguments"], first["observation"]) == ("calculator", {"expression": "6*7"}, "42")
    assert first["prompt_tokens"] == 50 and first["model_seconds"] <= records[3]["seconds"]  # a part of the run's time
    assert first["tool_seconds"] <= records[3]["seconds"]
    assert first["question"] == "What is 6*7?" and first["text"].startswith("Thought: I should compute it.")
    assert records[3]["answer"] == "42" and records[3]["steps"] == 2


def test_forced_answer_at_the_turn_cap_is_shown_with_its_prompt(use_model, capsys):
    use_model(StreamingModel([SEARCH_THEN_ANSWER[0], " 42"]))
    code, out, _ = run_cli(capsys, "ask", "--max-turns", "1", "--tools", "calculator", "What is 6*7?")
    assert code == 0
    assert "Observation: 42\n" + shipped().text("react.force_final", "en") + " 42\n" in out
    assert "answer forced at the turn cap" in out


def test_options_override_the_config_file(use_model, capsys, tmp_path):
    folder = tmp_path / "my-internlm2"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "internlm2"}')
    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text(
        "agent:\n  max_turns: 4\n  lang: en\n  working_first: true\ngeneration:\n  max_new_tokens: 100\n"
    )
    model = use_model(StreamingModel(["Final Answer: 好"]))
    code, _, _ = run_cli(
        capsys,
        "ask",
        "--config",
        str(cfg_file),
        "--model",
        str(folder),
        "--device",
        "cpu",
        "--lang",
        "zh",
        "--max-new-tokens",
        "20",
        "--temperature",
        "0.5",
        "--tools",
        "calculator",
        "--no-working-first",
        "--no-check-arithmetic",
        "hello",
    )
    assert code == 0
    cfg = model.built_from
    assert (cfg.model.backend, cfg.model.path, cfg.model.device) == ("internlm2", str(folder), "cpu")
    assert (cfg.agent.lang, cfg.agent.max_turns, cfg.agent.tools) == ("zh", 4, ["calculator"])
    assert cfg.agent.working_first is False and cfg.agent.check_arithmetic is False  # the flags over the file
    assert model.calls[0]["kwargs"]["max_new_tokens"] == 20 and model.calls[0]["kwargs"]["temperature"] == 0.5
    assert "请尽你所能" in model.calls[0]["messages"][0]["content"]
    model = use_model(StreamingModel(["x, as asked.\nThe answer is x.", "Final Answer: x"]))
    assert run_cli(capsys, "ask", "--base-url", "http://127.0.0.1:9/v1", "--model", "served", "q")[0] == 0
    assert (model.built_from.model.backend, model.built_from.model.name) == ("openai", "served")
    assert [len(c["messages"]) for c in model.calls] == [1, 3]  # working first: decoded free, its default


def test_without_a_serper_key_local_search_replaces_google_search(use_model, capsys):
    model = use_model(StreamingModel(["Final Answer: ok"]))
    code, _, err = run_cli(capsys, "ask", "Which year was Jay Chou born?")
    assert code == 0
    assert err.count("SERPER_API_KEY is not set: using the offline local_search tool instead of google_search") == 1
    system = model.calls[0]["messages"][0]["content"]
    assert "local_search" in system and "google_search" not in system


@pytest.mark.parametrize("extra", [[], ["--no-stream"]])
def test_the_search_first_is_shown_as_the_call_it_is(use_model, capsys, extra):
    use_model(StreamingModel(["He was born in 1979.\nThe answer is 1979.", "Final Answer: 1979"]))
    code, out, _ = run_cli(capsys, "ask", "Which year was Jay Chou born?", *extra)
    assert code == 0
    call = 'Action: local_search\nAction Input: {"search_query": "Which year was Jay Chou born?"}\nObservation: [1] Jay'
    assert call in out and out.index(call) < out.index("He was born in 1979.")


def test_a_secret_never_reaches_stdout_stderr_trace_or_json(use_model, capsys, tmp_path, monkeypatch):
    replies = [
        f'Thought: try it\nAction: calculator\nAction Input: {{"expression": "{SECRET} + 1"}}',
        f"Final Answer: the key is {SECRET}",
        f"Final Answer: the key is {SECRET}",
    ]  # the call fails: re-checked
    trace_file = tmp_path / "t.jsonl"
    for extra in ([], ["--no-stream"], ["--json"]):
        use_model(StreamingModel(list(replies)))
        monkeypatch.setenv("SERPER_API_KEY", SECRET)
        code, out, err = run_cli(capsys, "ask", "--trace", str(trace_file), *extra, "what is the key?")
        assert code == 0
        assert SECRET not in out and SECRET not in err
        assert "[REDACTED]" in out
    assert SECRET not in trace_file.read_text() and "[REDACTED]" in trace_file.read_text()


def test_streaming_holds_back_only_what_could_be_a_secret(use_model, capsys, monkeypatch):
    monkeypatch.setenv("SERPER_API_KEY", SECRET)
    model = use_model(StreamingModel([f"Thought: {SECRET} then more text here\nFinal Answer: done"]))
    code, out, _ = run_cli(capsys, "ask", "--tools", "calculator", "q")
    assert code == 0 and SECRET not in out
    live = model.printed[0].split("Question: q\n", 1)[1]
    assert live.startswith("Thought: [REDACTED] then more") and len(live) < len(
        "Thought: [REDACTED] then more text here\nFinal Answer: done"
    )
    assert "Thought: [REDACTED] then more text here\nFinal Answer: done\n---" in out


def test_chat_with_piped_stdin_keeps_history_and_handles_commands(use_model, capsys, monkeypatch):
    model = use_model(StreamingModel(["Final Answer: 1979", "Final Answer: Jay", "Final Answer: fresh"]))
    monkeypatch.setattr(
        sys,
        "stdin",
        io.StringIO(
            "Which year was Jay Chou born?\nWhat was his first album?\n\n/history\n/reset\n/history\n"
            "周杰伦哪年出生？\n/exit\nnever asked\n"
        ),
    )
    code, out, err = run_cli(capsys, "chat", "--tools", "calculator")
    assert code == 0 and len(model.calls) == 3
    second = model.calls[1]["messages"]
    assert [m["role"] for m in second] == ["system", "user", "assistant", "user"]
    assert second[1:3] == [
        {"role": "user", "content": "Which year was Jay Chou born?"},
        {"role": "assistant", "content": "1979"},
    ]
    assert [m["role"] for m in model.calls[2]["messages"]] == ["system", "user"]  # after /reset
    assert "1. Q: Which year was Jay Chou born?\n   A: 1979\n2. Q: What was his first album?\n   A: Jay\n" in out
    assert "(no history)" in out and "history cleared" in err
    assert "> " not in out and "> " not in err  # no prompts when stdin is not a terminal
    assert "Question: 周杰伦哪年出生？" in out and "never asked" not in out


def test_chat_json_prints_one_json_line_per_turn(use_model, capsys, monkeypatch):
    use_model(StreamingModel(["Final Answer: 1979", "Final Answer: Jay"]))
    monkeypatch.setattr(sys, "stdin", io.StringIO("q1\nq2\n/history\n"))  # EOF ends the session
    code, out, _ = run_cli(capsys, "chat", "--json", "--tools", "calculator")
    lines = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and [r.get("answer") for r in lines[:2]] == ["1979", "Jay"]
    assert lines[2] == {"history": [{"question": "q1", "answer": "1979"}, {"question": "q2", "answer": "Jay"}]}


def test_ctrl_c_shows_the_steps_so_far_keeps_the_trace_and_exits_130(use_model, capsys, tmp_path):
    trace = tmp_path / "t.jsonl"
    use_model(Failing(SEARCH_THEN_ANSWER, KeyboardInterrupt(), at=1))
    code, out, err = run_cli(capsys, "ask", "--trace", str(trace), "--tools", "calculator", "What is 6*7?")
    assert code == 130
    assert "Observation: 42\n" in out and "Interrupted after 1 step." in out and "interrupted" in err
    assert [json.loads(line)["event"] for line in trace.read_text().splitlines()] == ["start", "step", "interrupted"]
    use_model(Failing(SEARCH_THEN_ANSWER, KeyboardInterrupt(), at=1))
    code, out, _ = run_cli(capsys, "ask", "--json", "--tools", "calculator", "What is 6*7?")
    partial = json.loads(out)
    assert code == 130 and partial["stop_reason"] == "interrupted" and len(partial["steps"]) == 1


def test_a_model_error_keeps_the_steps_and_the_chat_goes_on(use_model, capsys, monkeypatch):
    use_model(Failing([SEARCH_THEN_ANSWER[0], "Final Answer: still here"], RuntimeError(f"HTTP 400 {SECRET}"), at=1))
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setattr("sys.stdin", io.StringIO("What is 6*7?\nAre you there?\n"))
    code, out, err = run_cli(capsys, "chat", "--tools", "calculator")
    assert code == 0 and SECRET not in out + err and "Traceback" not in err
    assert "Observation: 42" in out and "No final answer." in out and "stopped: the model failed" in out
    assert "tinyagent: error: RuntimeError: HTTP 400 [REDACTED] (run with --verbose for details)" in err
    assert "Final Answer: still here" in out


def test_runtime_and_load_failures_are_one_line_with_exit_1(use_model, capsys, monkeypatch):
    use_model(Failing(SEARCH_THEN_ANSWER, RuntimeError(f"backend exploded with {SECRET}\nsecond line"), at=0))
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    code, out, err = run_cli(capsys, "ask", "--tools", "calculator", "q")
    assert code == 1 and "Traceback" not in err and SECRET not in err
    assert err.strip().splitlines()[-1] == (
        "tinyagent: error: RuntimeError: backend exploded with [REDACTED] (run with --verbose for details)"
    )

    def broken(cfg):
        raise OSError("internlm/nope is not a local folder and is not a valid model identifier\nmore text")

    monkeypatch.setattr(config, "build_model", broken)
    code, _, err = run_cli(capsys, "ask", "--model", "internlm/nope", "q")
    assert code == 1 and "Traceback" not in err
    assert err.strip().splitlines()[-1] == (
        "tinyagent: error: could not load model internlm/nope: internlm/nope "
        "is not a local folder and is not a valid model identifier"
    )


# --- the real command, in a subprocess ------------------------------------------------------


def tinyagent(*args: str, stdin: str | None = None, env: dict | None = None, timeout: float = 120):
    environment = {k: v for k, v in os.environ.items() if k not in ("SERPER_API_KEY", "OPENAI_API_KEY")}
    environment.update({"HF_HUB_OFFLINE": "1", **(env or {})})
    return subprocess.run(
        [TINYAGENT, *args], input=stdin, capture_output=True, text=True, env=environment, cwd=ROOT, timeout=timeout
    )


def test_help_and_version_exit_0():
    done = tinyagent("--help")
    assert done.returncode == 0 and "{ask,chat,web,serve,mcp-server,eval}" in done.stdout
    done = tinyagent("eval", "--help")  # the eval's own options, under this command's name
    assert done.returncode == 0 and done.stdout.startswith("usage: tinyagent eval") and "--baseline" in done.stdout
    done = tinyagent("ask", "--help")
    assert done.returncode == 0 and "--base-url" in done.stdout and "--trace" in done.stdout
    assert tinyagent("--version").stdout.startswith("tinyagent ")


@pytest.mark.parametrize(
    "args, words",
    [
        ((), ["usage:"]),
        (("ask",), ["the following arguments are required: question"]),
        (("ask", "--lang", "fr", "q"), ["invalid choice: 'fr'"]),
        (("ask", "--max-turns", "many", "q"), ["invalid int value"]),
        (
            ("ask", "--config", "configs/missing.yaml", "q"),
            ["tinyagent: error: configs/missing.yaml: no such config file"],
        ),
        (
            ("ask", "--tools", "calculator,web", "q"),
            ["unknown tool 'web'", "valid tools: google_search, calculator, local_search"],
        ),
        (
            ("ask", "--corpus", "/no/such.jsonl", "q"),
            ["tinyagent: error: agent.corpus: no such folder or file: /no/such.jsonl"],
        ),
        (
            ("ask", "--model", "./no/such/model", "q"),
            ["tinyagent: error: model.path: no such model folder: ./no/such/model"],
        ),
        (("ask", "--max-turns", "0", "q"), ["tinyagent: error: agent.max_turns: must be at least 1, not 0"]),
    ],
)
def test_usage_and_config_errors_exit_2_without_a_traceback(args, words):
    done = tinyagent(*args)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    for word in words:
        assert word in done.stderr


def test_a_bad_config_key_names_the_key_and_the_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("model:\n  backend: embedded\nagent:\n  max_turn: 3\n")
    done = tinyagent("ask", "--config", str(bad), "q")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().startswith(
        f"tinyagent: error: {bad}: unknown key 'agent.max_turn'; valid keys in agent: lang, max_turns, tools, corpus, "
    )
    assert len(done.stderr.strip().splitlines()) == 1


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_server_is_a_one_line_runtime_error():
    done = tinyagent(
        "ask", "--base-url", f"http://127.0.0.1:{free_port()}/v1", "--model", "m", "--tools", "calculator", "q"
    )
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("tinyagent: error: ") and "127.0.0.1" in last


def test_end_to_end_against_a_real_server_streaming_json_and_secrets(tmp_path):
    with OpenAIStub(replies=[*SEARCH_THEN_ANSWER, "Final Answer: 1979"], require_key=SECRET) as stub:
        common = ("--base-url", stub.base_url, "--model", "stub-model", "--tools", "calculator")
        trace = tmp_path / "t.jsonl"
        done = tinyagent(
            "ask",
            *common,
            "--trace",
            str(trace),
            "What is 6*7?",
            env={"OPENAI_API_KEY": SECRET, "SERPER_API_KEY": SECRET + "x"},
        )
        assert done.returncode == 0, done.stderr
        assert "Observation: 42\n" in done.stdout and "Final Answer: 42\n[2 steps" in done.stdout
        assert stub.requests[0]["body"].get("stream") is True
        done_json = tinyagent(
            "chat", *common, "--json", stdin="Which year was Jay Chou born?\n/history\n", env={"OPENAI_API_KEY": SECRET}
        )
        assert done_json.returncode == 0, done_json.stderr
        turn, history = [json.loads(line) for line in done_json.stdout.splitlines()]
        assert turn["answer"] == "1979" and history["history"][0]["answer"] == "1979"
        assert stub.requests[-1]["body"].get("stream") in (None, False)
        for text in (done.stdout, done.stderr, done_json.stdout, done_json.stderr, trace.read_text()):
            assert SECRET not in text
        denied = tinyagent("ask", *common, "q", env={"OPENAI_API_KEY": "wrong-key-1234"})
        assert denied.returncode == 1 and "Traceback" not in denied.stderr and "wrong-key-1234" not in denied.stderr


def test_a_local_model_folder_loads_and_answers_through_the_hf_backend(tiny_llama_dir, capsys, monkeypatch):
    """A real (tiny, random) transformers model: loaded from --model, streamed, usage counted."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, out, err = run_cli(
        capsys,
        "ask",
        "--model",
        str(tiny_llama_dir),
        "--device",
        "cpu",
        "--max-turns",
        "1",
        "--max-new-tokens",
        "6",
        "--tools",
        "calculator",
        "--json",
        "What is 6*7?",
    )
    assert code == 0, err
    result = json.loads(out)
    assert 1 <= len(result["steps"]) <= 2 and result["prompt_tokens"] > 50
    assert 0 < result["completion_tokens"] <= 12  # at most 6 per model call, at most 2 calls
    assert f"Loading model {tiny_llama_dir} with backend hf on device cpu ..." in err and "Model ready in" in err


def test_ask_with_an_answer_schema_prints_its_data_as_json(use_model, capsys, tmp_path):
    schema = tmp_path / "year.json"
    schema.write_text('{"type": "object", "properties": {"year": {"type": "integer"}}, "required": ["year"]}')
    use_model(StreamingModel(['Thought: I know.\nFinal Answer: {"year": 1979}']))
    code, out, _ = run_cli(capsys, "ask", "--tools", "calculator", "--json", "--answer-schema", str(schema), "When?")
    assert code == 0 and json.loads(out)["data"] == {"year": 1979}
    schema.write_text('{"type": "integr"}')
    code, out, err = run_cli(capsys, "ask", "--answer-schema", str(schema), "When?")
    assert code == 2 and err.strip().startswith(f"tinyagent: error: --answer-schema {schema}: answer_schema is not")
    assert "\n" not in err.strip()
    code, _, err = run_cli(capsys, "ask", "--answer-schema", str(tmp_path / "none.json"), "When?")
    assert code == 2 and err.strip() == f"tinyagent: error: --answer-schema {tmp_path / 'none.json'}: no such file"
