"""Evaluation (layer 4): run an agent over a JSONL suite and score its answers.

A suite line is {"id", "question", "answer"}; the answer is a string, a number, or a list of
accepted answers (scoring.py says how each is matched); other keys are copied into the results.

- scoring.py: suites, and how an answer is judged.
- harness.py: `evaluate` (a fresh agent, or `DirectAnswer`, per question), `score_run`, `summarize`,
  `disagreements` (the questions right in some runs only).
- command.py: `python -m tinyagent.eval` (`main`): the agent and the direct baseline side by side.
- compare.py: `... compare DIR...`: many result folders in one table and a chart (charts.py).
- provenance.py: how a results folder was made; progress.py: the progress bar; table.py: the tables.
"""

from .command import default_concurrency, direct_factory, format_summary, main
from .compare import ResultsError, load_results
from .harness import EvalInterrupted, disagreements, evaluate, score_run, summarize
from .scoring import SuiteError, SuiteItem, load_suite, score

__all__ = [
    "EvalInterrupted",
    "ResultsError",
    "SuiteError",
    "SuiteItem",
    "default_concurrency",
    "direct_factory",
    "disagreements",
    "evaluate",
    "format_summary",
    "load_results",
    "load_suite",
    "main",
    "score",
    "score_run",
    "summarize",
]
