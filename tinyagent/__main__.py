"""`python -m tinyagent` is the `tinyagent` command."""

from .cli import main

raise SystemExit(main())
