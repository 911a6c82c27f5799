"""Deprecated: the worked examples moved to `tinyagent.format.examples`."""
import warnings

from .format.examples import EXAMPLES, examples_for

warnings.warn("tinyagent.prompts is deprecated: import examples_for from tinyagent.format.examples",
              DeprecationWarning, stacklevel=2)

__all__ = ["EXAMPLES", "examples_for"]
