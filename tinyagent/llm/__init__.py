"""Deprecated: the backends moved to `tinyagent.models` (and the local engine to `tinyagent.engine`).

`from tinyagent.llm import HFChatModel` still works, with a DeprecationWarning; import from
`tinyagent.models` instead.
"""
from __future__ import annotations

import warnings

from .. import models

_NAMES = {"BaseModel", "Completion", "usage_of", *models.LAZY}


def __getattr__(name: str):
    if name in _NAMES:
        warnings.warn(f"tinyagent.llm is deprecated: import {name} from tinyagent.models",
                      DeprecationWarning, stacklevel=2)
        return getattr(models, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
