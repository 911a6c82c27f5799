"""Deprecated: runs in threads moved to `tinyagent.runs` (`run_many`, `RunItem`)."""
import warnings

from .runs import RunItem, run_many

BatchItem = RunItem  # the old name of RunItem

warnings.warn("tinyagent.batch is deprecated: import run_many from tinyagent.runs", DeprecationWarning, stacklevel=2)

__all__ = ["BatchItem", "run_many"]
