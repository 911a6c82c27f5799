"""The README's Python example runs and prints what it says."""
from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_python_example_runs():
    block = re.search(r"```python\n(from tinyagent import Agent, BaseModel, tool.*?)```", README.read_text(), re.S)
    assert block, "the README lost its Python example"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block.group(1), "README.md", "exec"), {})
    assert out.getvalue().strip() == "6 words True 6"
