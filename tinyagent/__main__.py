"""`python -m tinyagent` is the `tinyagent` command."""
from .cli.commands import main

raise SystemExit(main())
