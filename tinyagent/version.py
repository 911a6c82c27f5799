"""The version, in one place: the package, `tinyagent --version`, traces and pyproject.toml read it."""

__version__ = "0.1.0"
