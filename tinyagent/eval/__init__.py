"""Evaluation (layer 4): run an agent over a JSONL suite and score its answers.

A suite line is {"id", "question", "answer"}; the answer is a string, a number, or a list of
accepted answers (scoring.py says how each is matched); other keys are copied into the results.

- scoring.py: suites, and how an answer is judged.
- harness.py: `evaluate` (a fresh agent per question), `score_run`, `summarize`.
- command.py: `python -m tinyagent.eval` (`main`).
"""
from .command import (
           agent_factory_from_config,
           default_concurrency,
           format_summary,
           main,
)
from .harness import EvalInterrupted, evaluate, score_run, summarize
from .scoring import SuiteError, SuiteItem, load_suite, score

__all__ = ["EvalInterrupted", "SuiteError", "SuiteItem", "agent_factory_from_config", "default_concurrency",
           "evaluate", "format_summary", "load_suite", "main", "score", "score_run", "summarize"]
