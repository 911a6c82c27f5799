"""The command line (layer 5): `tinyagent ask / chat / web / eval`.

- commands.py: the parser and the commands (`main`).
- options.py: the options shared by the commands and run_demo.py, and the config they make.
- report.py: steps streamed for people, JSON for programs.
- terminal.py: the approval prompt on the terminal.
"""

from .commands import main

__all__ = ["main"]
