"""`tinyagent serve` / `tinyagent mcp-server` started as a user starts them, as real processes, for the tests:
their stderr read in a thread, so a test can wait for a line (the address, a log line) without sleeping."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

TINYAGENT = str(Path(sys.executable).parent / "tinyagent")  # the installed console script
ROOT = Path(__file__).resolve().parent.parent


def environment(**extra: str) -> dict:
    """The environment of a server process: this one's (this checkout first on the path), without keys
    other tests may have set, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "SERPER_API_KEY", "TINYAGENT_API_KEY")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    env["HF_HUB_OFFLINE"] = "1"
    return {**env, **extra}


class Process:
    """A `tinyagent` subcommand in a process; `lines` holds its stderr so far."""

    def __init__(self, *args: str, env: dict | None = None, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL):
        self.proc = subprocess.Popen(
            [TINYAGENT, *args], stdin=stdin, stdout=stdout, stderr=subprocess.PIPE, text=True, env=env or environment()
        )
        self.lines: list[str] = []
        self._done = False
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stderr:
            with self._changed:
                self.lines.append(line)
                self._changed.notify_all()
        with self._changed:
            self._done = True
            self._changed.notify_all()

    def wait_for(self, pattern: str, timeout: float = 60.0) -> re.Match:
        """The first stderr line (seen before, or arriving within `timeout` seconds) matching `pattern`."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for line in self.lines:
                    found = re.search(pattern, line)
                    if found:
                        return found
                if self._done:
                    raise AssertionError(f"exited ({self.proc.wait()}) without {pattern!r}:\n{''.join(self.lines)}")
                if not self._changed.wait(max(0.0, deadline - time.monotonic())) and time.monotonic() >= deadline:
                    raise AssertionError(f"no {pattern!r} within {timeout} s:\n{''.join(self.lines)}")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            return self.proc.wait(timeout=30)
        finally:
            self._reader.join(timeout=5)

    def __enter__(self) -> Process:
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.stop()
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Served(Process):
    """`tinyagent serve --port 0 ...`, its address read from its status line."""

    def __init__(self, *args: str, env: dict | None = None):
        super().__init__("serve", "--port", "0", *args, env=env)
        self.base_url = self.wait_for(r"API.* at (http://\S+/v1)").group(1)
