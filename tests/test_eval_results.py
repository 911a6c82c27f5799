"""An evaluation's results folder (tinyagent.eval.results) through `python -m tinyagent.eval`: a rerun
does not wipe an earlier one, --resume finishes it, --overwrite replaces it, files are replaced whole."""

from __future__ import annotations

import json
import os

import pytest
from conftest import ScriptedModel

from tinyagent import eval as ev
from tinyagent.eval import out_folder as results

QUESTIONS = [f"q{i}" for i in range(1, 7)]


class ByQuestion(ScriptedModel):
    """Answers `<n>` for question `q<n>` (as the agent's final answer and the direct answer line); Ctrl-C on `interrupt_on`; raises on `crash_on`."""

    def __init__(self, interrupt_on=(), crash_on=()):
        super().__init__([])
        self.interrupt_on, self.crash_on, self.asked = set(interrupt_on), set(crash_on), []

    def generate(self, messages, stop=None, **kwargs):
        question = next(m["content"] for m in messages if m["role"] == "user").split("Question: ")[-1]
        self.asked.append(question)
        if question in self.interrupt_on:
            raise KeyboardInterrupt
        if question in self.crash_on:
            raise RuntimeError("the server went away")
        return f"Final Answer: {question[1:]}\nThe answer is {question[1:]}."


@pytest.fixture
def suite(tmp_path):
    path = tmp_path / "suite.jsonl"
    path.write_text("".join(json.dumps({"id": q, "question": q, "answer": int(q[1:])}) + "\n" for q in QUESTIONS))
    return path


def run(monkeypatch, suite, out, model, *args) -> int:
    """The eval command on `suite` with `model`; the agent alone unless `args` name a --baseline."""
    monkeypatch.setattr("tinyagent.config.build_model", lambda cfg: model)
    baseline = [] if "--baseline" in args else ["--baseline", "none"]
    return ev.main(["--suite", str(suite), "--tools", "", "--concurrency", "1", "--out", str(out), *baseline, *args])


def agent_summary(out) -> dict:
    return json.loads((out / "summary.json").read_text())["agent"]


def ids(out) -> list[str]:
    return [json.loads(line)["id"] for line in (out / "results.jsonl").read_text().splitlines()]


def test_a_rerun_into_a_folder_with_results_is_refused_and_loses_nothing(tmp_path, suite, monkeypatch, capsys):
    out = tmp_path / "run"
    assert run(monkeypatch, suite, out, ByQuestion()) == 0
    before = (out / "results.jsonl").read_text(), (out / "summary.json").read_text()
    model = ByQuestion(interrupt_on={"q1"})  # the Ctrl-C during question 1 that once left results.jsonl empty
    assert run(monkeypatch, suite, out, model) == 2
    err = capsys.readouterr().err
    assert "already holds results; pass --resume to finish that run or --overwrite to replace it" in err
    assert err.count("\n") == 1 and model.asked == []
    assert ((out / "results.jsonl").read_text(), (out / "summary.json").read_text()) == before


def test_resume_keeps_what_ran_and_runs_the_rest_and_the_crashed(tmp_path, suite, monkeypatch, capsys):
    out = tmp_path / "run"
    assert run(monkeypatch, suite, out, ByQuestion(interrupt_on={"q4"}, crash_on={"q2"})) == 130
    assert ids(out) == ["q1", "q2", "q3"]  # each kept as it finished, the interrupted one not
    with open(out / "results.jsonl", "a") as f:
        f.write('{"id": "q5", "quest')  # a line the crash cut off
    model = ByQuestion()
    assert run(monkeypatch, suite, out, model, "--resume") == 0
    assert model.asked == ["q2", "q4", "q5", "q6"]  # q2 crashed before: it runs again
    assert ids(out) == QUESTIONS
    summary = agent_summary(out)
    assert (summary["n"], summary["n_success"], summary["resumed_with"]) == (6, 6, 2) and "interrupted" not in summary
    printed = capsys.readouterr().out
    assert "evaluating 4 questions" in printed and "(2 done before, kept)" in printed and "[6/6]" in printed


def test_an_interrupted_resume_keeps_both_runs_questions(tmp_path, suite, monkeypatch):
    out = tmp_path / "run"
    assert run(monkeypatch, suite, out, ByQuestion(interrupt_on={"q3"})) == 130
    assert run(monkeypatch, suite, out, ByQuestion(interrupt_on={"q5"}), "--resume") == 130
    assert ids(out) == ["q1", "q2", "q3", "q4"]
    assert agent_summary(out)["interrupted"] is True


def test_overwrite_replaces_and_the_two_flags_do_not_mix(tmp_path, suite, monkeypatch, capsys):
    out = tmp_path / "run"
    assert run(monkeypatch, suite, out, ByQuestion(crash_on=set(QUESTIONS))) == 0
    assert agent_summary(out)["n_errors"] == 6
    assert run(monkeypatch, suite, out, ByQuestion(), "--overwrite") == 0
    assert agent_summary(out)["n_errors"] == 0 and ids(out) == QUESTIONS
    assert run(monkeypatch, suite, out, ByQuestion(), "--overwrite", "--resume") == 2
    assert "--resume and --overwrite cannot be used together" in capsys.readouterr().err


def test_a_crash_while_writing_leaves_the_old_file_whole(tmp_path, monkeypatch):
    path = tmp_path / "summary.json"
    path.write_text('{"n": 50}\n')

    def crash(fd):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", crash)
    with pytest.raises(KeyboardInterrupt):
        results.write_atomically(path, '{"n": 51, "half": ')
    assert path.read_text() == '{"n": 50}\n' and os.listdir(tmp_path) == ["summary.json"]


def test_resume_finishes_each_mode_from_its_own_file(tmp_path, suite, monkeypatch, capsys):
    out = tmp_path / "run"
    assert run(monkeypatch, suite, out, ByQuestion(interrupt_on={"q3"}), "--baseline", "direct") == 130
    assert ids(out) == ["q1", "q2"] and not (out / "direct.jsonl").exists()  # the direct mode never started
    model = ByQuestion()
    assert run(monkeypatch, suite, out, model, "--baseline", "direct", "--resume") == 0
    assert model.asked == ["q3", "q4", "q5", "q6", *QUESTIONS]  # the agent's rest, then the model alone on all
    direct = [json.loads(line)["id"] for line in (out / "direct.jsonl").read_text().splitlines()]
    assert ids(out) == QUESTIONS and direct == QUESTIONS
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["agent"]["resumed_with"], summary["direct"]["n"]) == (2, 6) and "resumed_with" not in summary[
        "direct"
    ]
    again = ByQuestion()
    assert run(monkeypatch, suite, out, again, "--baseline", "direct", "--resume") == 0
    assert again.asked == [] and "evaluating 0 questions" in capsys.readouterr().out


def test_resume_of_a_folder_written_before_approval_gives_old_records_defaults(tmp_path, suite, monkeypatch, caplog):
    """Records written before refused_calls / edited_calls existed: kept with 0 for both, the rest run, and the
    summary written (it ended in a KeyError, with no summary.json); a record missing an older field runs again."""
    out = tmp_path / "run"
    assert run(monkeypatch, suite, out, ByQuestion(interrupt_on={"q4"})) == 130
    old = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    for record in old:
        del record["refused_calls"], record["edited_calls"]
    del old[1]["success"]  # not a record any version wrote whole: q2 runs again
    (out / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in old))
    (out / "summary.json").unlink()
    model = ByQuestion()
    assert run(monkeypatch, suite, out, model, "--resume") == 0
    assert model.asked == ["q2", "q4", "q5", "q6"]
    summary = agent_summary(out)
    assert (summary["n"], summary["n_success"], summary["refused_calls"], summary["edited_calls"]) == (6, 6, 0, 0)
    assert "the record of q2 has no success; that question runs again" in caplog.text
    assert [json.loads(line)["refused_calls"] for line in (out / "results.jsonl").read_text().splitlines()] == [0] * 6
