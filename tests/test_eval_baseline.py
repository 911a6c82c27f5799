"""The eval's direct baseline beside the agent, `compare` over result folders, the chart, the provenance
of a results folder and the progress display: on scripted models and a real OpenAI-format server."""

from __future__ import annotations

import hashlib
import io
import json
import re
import sys
import threading
from html.parser import HTMLParser
from pathlib import Path

import pytest
from conftest import ScriptedModel, built_as
from openai_stub import OpenAIStub

import tinyagent
from tinyagent import eval as ev
from tinyagent.cli import commands as cli
from tinyagent.engine.llama_runtime import llamacpp_available
from tinyagent.eval import charts, compare
from tinyagent.eval.progress import Progress
from tinyagent.format.templates import shipped

ROOT = Path(__file__).resolve().parent.parent

# Two questions: one the agent gets right only with its calculator, one the model gets right only alone
# (the agent's call goes wrong and it answers from the wrong result); and one both get right.
ROWS = [
    {"id": "tool", "question": "What is 123 times 457?", "answer": 56211, "needs": "calculator"},
    {"id": "alone", "question": "How many legs do 3 cats have?", "answer": 12},
    {"id": "both", "question": "What is 2 plus 2?", "answer": 4},
]
AGENT_REPLIES = {  # question -> (first reply, reply after the observation)
    "What is 123 times 457?": (
        'Thought: multiply\nAction: calculator\nAction Input: {"expression": "123*457"}',
        "Thought: done\nFinal Answer: 56211",
    ),
    "How many legs do 3 cats have?": (
        'Thought: add\nAction: calculator\nAction Input: {"expression": "3+4"}',
        "Thought: done\nFinal Answer: 7",
    ),
    "What is 2 plus 2?": ("Thought: easy\nFinal Answer: 4", None),
}
DIRECT_REPLIES = {
    "What is 123 times 457?": "123 * 457 is about 56000.\nThe answer is 56000.",
    "How many legs do 3 cats have?": "Each cat has 4 legs, 3 * 4 = 12.\nThe answer is 12.",
    "What is 2 plus 2?": "2 + 2 = 4\nThe answer is 4.",
}


def question_of(body: dict) -> str:
    user = next(m["content"] for m in body["messages"] if m["role"] == "user")
    return user.rsplit("Question: ", 1)[-1]


def stub_reply(body: dict) -> str:
    """The agent's ReAct conversation or the direct prompt, told apart by what the server is sent."""
    if body["messages"][0]["content"].startswith(shipped().text("direct.question", "en").split("\n")[0]):
        return DIRECT_REPLIES[question_of(body)]
    first, after = AGENT_REPLIES[question_of(body)]
    observed = body["messages"][-1]["role"] == "assistant" and "Observation:" in body["messages"][-1]["content"]
    return after if observed else first


def write_suite(tmp_path: Path, rows=ROWS) -> Path:
    path = tmp_path / "suite.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture
def stub(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with OpenAIStub(replies=stub_reply, honour_stop=True) as server:
        yield server


def run_eval(tmp_path, stub, out: str, *extra: str) -> tuple[int, str]:
    args = [
        "--suite",
        str(write_suite(tmp_path)),
        "--model",
        "stub-model",
        "--base-url",
        stub.base_url,
        "--tools",
        "calculator",
        "--out",
        str(tmp_path / out),
        "--no-working-first",
        *extra,
    ]
    return ev.main(args), out


CHECKS = {  # question -> the replies after the request to check the working (working_first)
    "What is 123 times 457?": (
        'Thought: I check 123 * 457\nAction: calculator\nAction Input: {"expression": "123*457"}',
        "Thought: the tool says 56211, not 56000.\nFinal Answer: 56211",
    ),
    "How many legs do 3 cats have?": ("Thought: My working is right.\nFinal Answer: 12", None),
    "What is 2 plus 2?": ("Thought: My working is right.\nFinal Answer: 4", None),
}


def working_first_reply(body: dict) -> str:
    """The model alone for the first call (the direct prompt, as the baseline is asked), then its checks."""
    messages = body["messages"]
    question = question_of({"messages": messages[:1]})
    if len(messages) == 1:
        return DIRECT_REPLIES[question]
    first, after = CHECKS[question]
    return after if "Observation:" in json.dumps(messages[3:]) else first


def test_working_first_over_http_is_the_model_alone_then_its_checks(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with OpenAIStub(replies=working_first_reply, honour_stop=True) as server:
        code = ev.main(
            [
                "--suite",
                str(write_suite(tmp_path)),
                "--model",
                "stub-model",
                "--base-url",
                server.base_url,
                "--tools",
                "calculator",
                "--protocol",
                "react",
                "--out",
                str(tmp_path / "wf"),
            ]
        )
    capsys.readouterr()
    assert code == 0
    agent, direct = read_jsonl(tmp_path / "wf" / "results.jsonl"), read_jsonl(tmp_path / "wf" / "direct.jsonl")
    assert [(r["id"], r["success"]) for r in direct] == [("tool", False), ("alone", True), ("both", True)]
    assert [(r["id"], r["success"], r["format_valid"]) for r in agent] == [
        ("tool", True, True),
        ("alone", True, True),
        ("both", True, True),
    ]  # the check corrected the first
    kinds = [[s["kind"] for s in r["trace"]["steps"]] for r in agent]
    assert kinds == [["working", "action", "final_answer"], ["working", "final_answer"], ["working", "final_answer"]]
    assert agent[0]["trace"]["steps"][0]["text"] == DIRECT_REPLIES["What is 123 times 457?"]
    summary = json.loads((tmp_path / "wf" / "summary.json").read_text())
    assert summary["run"]["working_first"] is True


def test_the_direct_baseline_beside_the_agent_over_http(tmp_path, stub, capsys):
    code, _ = run_eval(tmp_path, stub, "run")
    printed = capsys.readouterr().out
    assert code == 0
    agent, direct = read_jsonl(tmp_path / "run" / "results.jsonl"), read_jsonl(tmp_path / "run" / "direct.jsonl")
    assert [(r["id"], r["success"]) for r in agent] == [("tool", True), ("alone", False), ("both", True)]
    assert [(r["id"], r["success"], r["prediction"]) for r in direct] == [
        ("tool", False, "56000"),
        ("alone", True, "12"),
        ("both", True, "4"),
    ]
    assert all(r["steps"] == 1 and r["format_valid"] for r in direct)  # each ended with its answer line
    assert direct[0]["trace"]["steps"][0]["text"].endswith("The answer is 56000.")
    direct_calls = [r for r in stub.requests if len(r["body"]["messages"]) == 1]
    assert len(direct_calls) == 3 and "tools" not in direct_calls[0]["body"]  # one plain prompt, no tools

    summary = json.loads((tmp_path / "run" / "summary.json").read_text(encoding="utf-8"))
    assert summary["format_version"] == 2 and summary["interrupted"] is False
    assert (summary["agent"]["n_success"], summary["direct"]["n_success"]) == (2, 2)
    assert summary["agent"]["mode"] == "agent" and summary["direct"]["mode"] == "direct"
    assert summary["direct"]["mean_steps"] == 1 and summary["agent"]["mean_steps"] == round(5 / 3, 3)
    assert summary["agent"]["by_need"] == {"calculator": {"n": 1, "n_success": 1}}
    assert summary["direct"]["by_need"] == {"calculator": {"n": 1, "n_success": 0}}
    flips = {f["id"]: f["answers"] for f in summary["disagreements"]}
    assert flips == {
        "tool": [
            {"label": "agent", "success": True, "prediction": "56211"},
            {"label": "direct", "success": False, "prediction": "56000"},
        ],
        "alone": [
            {"label": "agent", "success": False, "prediction": "7"},
            {"label": "direct", "success": True, "prediction": "12"},
        ],
    }

    table = printed[printed.index("questions ") :]
    assert re.search(r"^success\s+66\.7% \(2/3\)\s+66\.7% \(2/3\)$", table, re.M)
    assert re.search(r"^  questions that need calculator\s+1/1\s+0/1$", table, re.M)
    assert re.search(r"^format-valid questions \(agent\)\s+100\.0%\s+-$", table, re.M)
    assert re.search(r"^mean steps\s+1\.67\s+1\.00$", table, re.M)
    assert "  tool  agent: ok '56211'   direct: FAIL '56000'" in table
    assert "  alone  agent: FAIL '7'   direct: ok '12'" in table


def test_baseline_only_and_none(tmp_path, stub, capsys):
    code, _ = run_eval(tmp_path, stub, "only", "--baseline", "only")
    summary = json.loads((tmp_path / "only" / "summary.json").read_text())
    assert code == 0 and summary["agent"] is None and summary["direct"]["n_success"] == 2
    assert not (tmp_path / "only" / "results.jsonl").exists() and "disagreements" not in summary
    assert all(len(r["body"]["messages"]) == 1 for r in stub.requests)  # the agent never ran
    code, _ = run_eval(tmp_path, stub, "none", "--baseline", "none")
    summary = json.loads((tmp_path / "none" / "summary.json").read_text())
    assert code == 0 and summary["direct"] is None and summary["agent"]["n_success"] == 2
    assert not (tmp_path / "none" / "direct.jsonl").exists()
    assert "agent results:" in capsys.readouterr().out


def test_the_direct_questions_run_at_once_so_a_local_model_batches_them(tmp_path, monkeypatch):
    """Three direct questions meet inside `generate` at once: run one by one they never would (the barrier
    breaks after 20 s and the runs fail)."""
    meeting = threading.Barrier(3, timeout=20)

    class Meets(ScriptedModel):
        def generate(self, messages, stop=None, **kwargs):
            meeting.wait()
            return "The answer is 4."

    monkeypatch.setattr("tinyagent.config.build_model", lambda cfg: Meets([]))
    code = ev.main(
        [
            "--suite",
            str(write_suite(tmp_path)),
            "--baseline",
            "only",
            "--out",
            str(tmp_path / "o"),
            "--concurrency",
            "3",
        ]
    )
    records = read_jsonl(tmp_path / "o" / "direct.jsonl")
    assert (
        code == 0
        and [r["error"] for r in records] == [None] * 3
        and [r["success"] for r in records] == [False, False, True]
    )


def test_ctrl_c_in_the_baseline_keeps_the_agent_and_what_finished(tmp_path, monkeypatch, capsys):
    class Interrupts(ScriptedModel):
        def generate(self, messages, stop=None, **kwargs):
            if len(messages) == 1 and "2 plus 2" in messages[0]["content"]:
                raise KeyboardInterrupt
            return "Final Answer: 12" if len(messages) > 1 else "The answer is 12."

    monkeypatch.setattr("tinyagent.config.build_model", built_as(Interrupts([])))
    out = tmp_path / "o"
    code = ev.main(["--suite", str(write_suite(tmp_path)), "--tools", "", "--out", str(out), "--concurrency", "1"])
    summary = json.loads((out / "summary.json").read_text())
    assert code == 130 and summary["interrupted"] is True
    assert summary["agent"]["n"] == 3 and summary["direct"]["n"] == 2 and summary["direct"]["interrupted"]
    assert [r["id"] for r in read_jsonl(out / "direct.jsonl")] == ["tool", "alone"]
    assert "(interrupted)" in capsys.readouterr().out


def test_a_results_folder_says_how_it_was_made(tmp_path, monkeypatch):
    weights = tmp_path / "tiny.gguf"
    weights.write_bytes(b"GGUF" + bytes(range(256)) * 64)
    monkeypatch.setattr("tinyagent.config.build_model", lambda cfg: ScriptedModel(["The answer is 4."] * 3))
    suite = write_suite(tmp_path)
    args = [
        "--suite",
        str(suite),
        "--model",
        str(weights),
        "--baseline",
        "only",
        "--max-new-tokens",
        "64",
        "--out",
        str(tmp_path / "o"),
    ]
    assert ev.main(args) == 0
    run = json.loads((tmp_path / "o" / "summary.json").read_text())["run"]
    # a .gguf file runs on llama.cpp where it is installed, else on transformers
    assert run["model"] == f"{tmp_path}/tiny.gguf" and run["backend"] == ("llamacpp" if llamacpp_available() else "hf")
    assert run["model_sha256"] == hashlib.sha256(weights.read_bytes()).hexdigest()
    assert run["suite_sha256"] == hashlib.sha256(suite.read_bytes()).hexdigest() and run["suite"] == str(suite)
    assert run["generation"]["max_new_tokens"] == 64 and run["protocol"] == "react"
    assert run["constrained"] is False and run["baseline"] == "only" and run["dtype"] == "auto"
    assert run["command"].startswith("python -m tinyagent.eval --suite ") and "--max-new-tokens 64" in run["command"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d{4}", run["date"])
    assert run["version"] == tinyagent.__version__
    assert run["commit"] is None or re.fullmatch(r"[0-9a-f]{40}(\+dirty)?", run["commit"])
    assert re.fullmatch(r"[0-9a-f]{16}", run["prompts_sha256"])


def test_a_model_checksum_is_computed_once_per_file_version(tmp_path, monkeypatch, model_cache):
    from tinyagent.eval import provenance

    weights = tmp_path / "w.gguf"
    weights.write_bytes(b"one")
    cfg = ev.command.config.load_config(
        None, {"model.backend": "hf", "model.path": str(tmp_path), "model.gguf_file": "w.gguf"}
    )
    reads = []
    real = provenance.file_sha256
    monkeypatch.setattr(provenance, "file_sha256", lambda p: reads.append(p) or real(p))
    first = provenance.model_checksum(cfg)
    assert provenance.model_checksum(cfg) == first == hashlib.sha256(b"one").hexdigest() and len(reads) == 1
    assert (model_cache / "checksums.json").is_file()
    weights.write_bytes(b"two!")  # another size: read again
    assert provenance.model_checksum(cfg) == hashlib.sha256(b"two!").hexdigest() and len(reads) == 2


# --- compare ---------------------------------------------------------------------------------------


class Page(HTMLParser):
    """What the comparison page holds: table rows by class, <details> blocks, and all its text."""

    def __init__(self):
        super().__init__()
        self.rows, self.details, self.svgs, self.text = [], 0, 0, []

    def handle_starttag(self, tag, attrs):
        if tag == "tr":
            self.rows.append(dict(attrs).get("class", ""))
        self.details += tag == "details"
        self.svgs += tag == "svg"

    def handle_data(self, data):
        self.text.append(data)


def two_runs(tmp_path, stub) -> tuple[Path, Path]:
    """A run with the baseline, and one of the agent alone with another turn cap."""
    run_eval(tmp_path, stub, "first")
    run_eval(tmp_path, stub, "capped", "--max-turns", "1", "--baseline", "none")
    return tmp_path / "first", tmp_path / "capped"


def test_compare_prints_one_table_flips_and_writes_the_chart(tmp_path, stub, capsys):
    first, capped = two_runs(tmp_path, stub)
    capsys.readouterr()
    code = ev.main(["compare", str(first), str(capped), "--out", str(tmp_path / "cmp")])
    printed = capsys.readouterr().out
    assert code == 0
    header = printed.splitlines()[0].split()
    assert header == ["first", "agent", "first", "direct", "capped", "agent"]
    settings = next(line for line in printed.splitlines() if line.startswith("settings"))
    assert "reference" in settings and "max_turns=1" in settings
    # at the cap of 1 the "tool" question's call is made, then its answer is forced from the observation
    assert "right in some columns only" in printed
    assert re.search(r"^  alone  first agent: FAIL '7'   first direct: ok '12'   capped agent: FAIL", printed, re.M)

    png = tmp_path / "cmp" / "compare.png"
    assert png.stat().st_size > 10_000
    from matplotlib.image import imread

    pixels = (imread(png)[..., :3] * 255).round().astype(int)
    assert pixels.shape[:2] == (490, 1100)  # 11 x (2.2 + 0.9 per column) inches at 100 dpi
    assert charts.COLOURS["agent"] != charts.COLOURS["direct"]
    for colour in (charts.COLOURS["agent"], charts.COLOURS["direct"]):  # bars of both modes are drawn
        rgb = [int(colour[i : i + 2], 16) for i in (1, 3, 5)]
        assert (pixels == rgb).all(axis=-1).sum() > 500

    page = Page()
    page.feed((tmp_path / "cmp" / "compare.html").read_text(encoding="utf-8"))
    text = "".join(page.text)
    assert page.svgs == 4 and page.details == 3 * 3 + 1  # a trace per question and column, and the settings
    assert page.rows.count("flip") == 2  # "tool" (right only with a tool) and "alone" (right only without)
    assert "Observation: 56211" in text and "The answer is 12." in text  # the traces, one click away
    assert "max_turns=1" in text


def test_compare_json_and_the_cli_command(tmp_path, stub, capsys):
    first, capped = two_runs(tmp_path, stub)
    capsys.readouterr()
    assert cli.main(["eval", "compare", str(first), str(capped), "--out", str(tmp_path / "c"), "--json"]) == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert [c["label"] for c in data["columns"]] == ["first agent", "first direct", "capped agent"]
    assert "page:" in captured.err and (tmp_path / "c" / "compare.html").is_file()
    assert (
        cli.main(
            [
                "eval",
                "--suite",
                str(write_suite(tmp_path)),
                "--model",
                "stub-model",
                "--base-url",
                stub.base_url,
                "--baseline",
                "only",
                "--out",
                str(tmp_path / "via-cli"),
            ]
        )
        == 0
    )
    run = json.loads((tmp_path / "via-cli" / "summary.json").read_text())["run"]
    assert run["command"].startswith("tinyagent eval --suite")


def test_the_page_needs_no_matplotlib(tmp_path, stub, monkeypatch, capsys):
    first, _ = two_runs(tmp_path, stub)
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")] or ["matplotlib"]:
        monkeypatch.setitem(sys.modules, name, None)  # importing matplotlib (or any of it) now fails
    assert ev.main(["compare", str(first), "--out", str(tmp_path / "c")]) == 0
    assert "tinyagent[charts]" in capsys.readouterr().out
    assert (tmp_path / "c" / "compare.html").stat().st_size > 1000 and not (tmp_path / "c" / "compare.png").exists()


def write_old_folder(folder: Path) -> Path:
    """A results folder as the harness wrote it before the baseline: the agent's totals at the top level."""
    folder.mkdir()
    records = [
        {
            "id": "tool",
            "question": "What is 123 times 457?",
            "answer": 56211,
            "prediction": "56211",
            "success": True,
            "format_valid": True,
            "steps": 2,
            "error": None,
        },
        {
            "id": "alone",
            "question": "How many legs do 3 cats have?",
            "answer": 12,
            "prediction": "12",
            "success": True,
            "format_valid": True,
            "steps": 1,
            "error": None,
        },
    ]
    (folder / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (folder / "summary.json").write_text(
        json.dumps(
            {
                "n": 2,
                "n_success": 2,
                "success_rate": 1.0,
                "format_valid_rate": 1.0,
                "reply_format_valid_rate": 1.0,
                "tool_error_rate": 0.0,
                "n_errors": 0,
                "mean_steps": 1.5,
                "mean_seconds": 3.0,
                "prompt_tokens": 100,
                "completion_tokens": 40,
                "wall_seconds": 6.0,
                "run": {"suite": "evals/x.jsonl", "backend": "hf", "model": "old", "tools": ["calculator"]},
            }
        )
    )
    return folder


def test_an_older_results_folder_is_read_and_says_so(tmp_path, stub, capsys):
    first, _ = two_runs(tmp_path, stub)
    old = write_old_folder(tmp_path / "old")
    capsys.readouterr()
    assert ev.main(["compare", str(first), str(old), "--out", str(tmp_path / "c")]) == 0
    printed = capsys.readouterr().out
    settings = next(line for line in printed.splitlines() if line.startswith("settings"))
    assert settings.rstrip().endswith("not recorded (older format)")
    assert re.search(r"^success\s.*100\.0% \(2/2\)$", printed, re.M)
    assert "  alone  first agent: FAIL '7'   first direct: ok '12'   old agent: ok '12'" in printed
    loaded = ev.load_results(old)
    assert loaded.summary["format_version"] == 1 and loaded.modes == ["agent"]


@pytest.mark.parametrize(
    "summary, message",
    [
        (None, "no summary.json (not a results folder"),
        ("[1, 2]", "not an eval summary (a JSON object was expected)"),
        ('{"n": 3}', "not an eval summary (no format_version, and not the older format's totals"),
        (
            '{"format_version": 3, "agent": {}}',
            "summary format 3 was written by a newer TinyAgent; this one reads formats 1-2",
        ),
        ('{"format_version": "x"}', "summary format 'x' is unknown"),
        ('{"format_version": 2, "agent": null, "direct": null}', "holds neither an agent nor a direct run"),
        ("{not json", "summary.json: not valid JSON"),
    ],
)
def test_a_folder_that_cannot_be_compared_is_one_line_exit_2(tmp_path, capsys, summary, message):
    folder = tmp_path / "f"
    folder.mkdir()
    if summary is not None:
        (folder / "summary.json").write_text(summary)
    assert ev.main(["compare", str(folder), "--out", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_a_broken_results_line_and_a_missing_folder(tmp_path, capsys):
    old = write_old_folder(tmp_path / "old")
    with open(old / "results.jsonl", "a") as f:
        f.write("{cut off\n")
    with pytest.raises(compare.ResultsError, match=r"results\.jsonl:3: not valid JSON"):
        ev.load_results(old)
    assert ev.main(["compare", str(tmp_path / "nowhere")]) == 2
    assert "no such results folder" in capsys.readouterr().err


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda r: r.pop("prediction"), "results.jsonl:1: the record of 'tool' has no prediction, which compare reads"),
        (lambda r: r.pop("question"), "results.jsonl:1: the record of 'tool' has no question, which compare reads"),
        (lambda r: r.update(success="yes"), "results.jsonl:1: not a result record (its id must be text and success"),
    ],
)
def test_records_missing_what_compare_reads_are_one_line_exit_2(tmp_path, capsys, change, message):
    old = write_old_folder(tmp_path / "old")
    records = [json.loads(line) for line in (old / "results.jsonl").read_text().splitlines()]
    change(records[0])
    (old / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert ev.main(["compare", str(old), str(write_old_folder(tmp_path / "other")), "--out", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


# --- progress --------------------------------------------------------------------------------------


def record(qid: str, success: bool) -> dict:
    return {
        "id": qid,
        "success": success,
        "format_valid": True,
        "tool_errors": [],
        "error": None,
        "steps": 2,
        "seconds": 1.5,
    }


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_on_a_terminal_is_one_bar_with_the_time_left():
    now = [100.0]
    screen = Terminal()
    bar = Progress(10, "agent", screen, clock=lambda: now[0])
    now[0] += 10
    bar.update(record("a", True))
    now[0] += 10
    bar.update(record("b", False))  # 2 done in 20 s: 8 left take 80 s
    assert screen.getvalue().endswith("\r\033[Kagent [####" + "." * 20 + "] 2/10  right 1/2  ~1m20s left  b")
    bar.close()
    assert screen.getvalue().endswith("\r\033[Kagent: 2/10 done, right 1, in 20s\n")
    assert screen.getvalue().count("\n") == 1


def test_progress_piped_is_plain_lines():
    now = [0.0]
    pipe = io.StringIO()
    bar = Progress(3, "direct", pipe, clock=lambda: now[0])
    for i, ok in enumerate([True, False, True]):
        now[0] += 30
        bar.update({**record(f"q{i}", ok), "format_valid": ok})
    bar.close()
    lines = pipe.getvalue().splitlines()
    assert lines == [
        "direct [1/3] ok   q0  1.5s  right 1/1  ~1m00s left",
        "direct [2/3] FAIL q1  1.5s  (no answer line)  right 1/2  ~30s left",
        "direct [3/3] ok   q2  1.5s  right 2/3  ~0s left",
    ]
    assert "\r" not in pipe.getvalue() and "\033" not in pipe.getvalue()


def test_the_seed_suite_says_what_each_question_needs():
    items = ev.load_suite(ROOT / "evals" / "seed_demos.jsonl")
    needs = {i.id: i.extra.get("needs") for i in items}
    assert set(needs.values()) == {"calculator", "search"}
    assert needs["tinyagent-jay-chou-en"] == "search" and needs["calc-12x6"] == "calculator"


def test_the_agent_settings_do_not_mark_the_direct_column(tmp_path, stub, capsys):
    run_eval(tmp_path, stub, "first")
    run_eval(tmp_path, stub, "capped", "--max-turns", "1")
    data = compare.comparison([ev.load_results(tmp_path / "first"), ev.load_results(tmp_path / "capped")])
    assert [(c["label"], c["settings"]) for c in data["columns"]] == [
        ("first agent", "reference"),
        ("first direct", "reference"),
        ("capped agent", "max_turns=1"),
        ("capped direct", "same"),
    ]  # the model alone never sees the turn cap


def test_a_long_answer_is_shown_by_its_end():
    from tinyagent.eval.table import shown_answer

    reply = "Let's work it out.\n16 - 3 - 4 = 9 eggs,\n9 * 2 = 18.  So she makes \\boxed{18}."
    assert shown_answer(reply, 24).endswith("\\boxed{18}.") and len(shown_answer(reply, 24)) == 24
    assert shown_answer(reply, 24).startswith("…") and shown_answer("short", 24) == "short"
    assert shown_answer(None) == "(none)"


class Resettable(tinyagent.BaseModel):
    """Answers 4, alone or after its working, and logs each call and each cache reset."""

    def __init__(self):
        self.events: list[str] = []

    def generate(self, messages, **kwargs):
        self.events.append("generate")
        return "2 + 2 = 4\nThe answer is 4." if len(messages) == 1 else "Final Answer: 4"

    def reset_cache(self):
        self.events.append("reset")


@pytest.mark.parametrize("extra,resets", [([], True), (["--no-fresh-cache"], False), (["--concurrency", "2"], False)])
def test_each_question_starts_from_a_fresh_cache_when_run_one_at_a_time(tmp_path, monkeypatch, capsys, extra, resets):
    model = Resettable()
    monkeypatch.setattr(tinyagent.config, "build_model", lambda cfg: model)
    suite = write_suite(
        tmp_path,
        [
            {"id": "a", "question": "What is 2 plus 2?", "answer": 4},
            {"id": "b", "question": "And 2 plus 2 again?", "answer": 4},
        ],
    )
    args = ["--suite", str(suite), "--tools", "calculator", "--no-constrained", "--out", str(tmp_path / "o")]
    code = ev.main(args + (extra if "--concurrency" in extra else ["--concurrency", "1", *extra]))
    capsys.readouterr()
    assert code == 0
    per_question = ["reset"] if resets else []
    agent = (per_question + ["generate", "generate"]) * 2  # working first, then its check
    direct = (per_question + ["generate"]) * 2
    if "--concurrency" in extra:
        assert sorted(model.events) == sorted(agent + direct)  # questions in threads: no reset under another's run
    else:
        assert model.events == agent + direct
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["run"]["fresh_cache"] is resets and summary["agent"]["n_success"] == 2
