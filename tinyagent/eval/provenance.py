"""How a results folder was made, written into its summary.json (`run`): the model and its checksum, the
backend, dtype, protocol and decoding settings, the project's version and commit, the date, the suite's
checksum and the command line. `compare` reads it back to say when runs were made differently.

Checksums are sha256 of the files' bytes. A model's is kept in `TINYAGENT_CACHE/checksums.json` by path,
size and modification time, so a multi-gigabyte model is read once, not on every run.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import time
from pathlib import Path

from .. import config
from ..agent import Agent
from ..engine.gguf_cache import cache_root
from ..models.embedded import embedded_gguf_path
from ..redaction import redact
from ..version import __version__

log = logging.getLogger(__name__)

WEIGHT_SUFFIXES = (".gguf", ".safetensors", ".bin", ".pt", ".pth")
GIT_TIMEOUT = 5.0  # seconds for `git rev-parse`, which should take milliseconds

#: No bearing on the direct baseline, nor on retrieve-then-answer.
AGENT_SETTINGS = (
    "protocol",
    "constrained",
    "tools",
    "max_turns",
    "examples",
    "thought_first",
    "working_first",
    "check_arithmetic",
    "ask_answer",
    "recheck",
    "search",
)
#: The tool retrieve-then-answer searched with: no bearing on the agent or the model alone.
RAG_SETTINGS = ("search_tool",)
#: The settings whose difference `compare` points out, as dotted keys of `run` (the suite is checked apart).
COMPARED = (
    ("model", "model_sha256", "backend", "dtype")
    + AGENT_SETTINGS
    + ("lang", "generation", "fresh_cache", "prompts_sha256", "version", "commit")
    + RAG_SETTINGS
)


def compared(mode: str) -> tuple[str, ...]:
    """The settings of `run` that bear on a column of `mode` (agent, direct or rag)."""
    skip = {"agent": RAG_SETTINGS, "rag": AGENT_SETTINGS}.get(mode, AGENT_SETTINGS + RAG_SETTINGS)
    return tuple(k for k in COMPARED if k not in skip)


def file_sha256(path: Path) -> str:
    """sha256 of a file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _cached_sha256(path: Path) -> str:
    """`file_sha256`, remembered by resolved path, size and mtime (a cache that cannot be written is skipped)."""
    stat = path.stat()
    key = f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}"
    store = cache_root() / "checksums.json"
    try:
        known = json.loads(store.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        known = {}
    if not isinstance(known, dict):
        known = {}
    if key not in known:
        known[key] = file_sha256(path)
        try:
            store.parent.mkdir(parents=True, exist_ok=True)
            partial = store.with_suffix(f".{os.getpid()}.tmp")
            partial.write_text(json.dumps(known, indent=0), encoding="utf-8")
            os.replace(partial, store)
        except OSError as e:
            log.info("checksum cache not written: %s", e)
    return known[key]


def model_files(cfg: config.Config) -> list[Path]:
    """The local weight files the config's model is read from (none for a server or a hub id)."""
    m = cfg.model
    if m.backend == "embedded":
        try:
            return [embedded_gguf_path()]
        except ImportError:
            return []
    if m.backend == "openai" or not m.path:
        return []
    where = Path(m.path).expanduser()
    if m.gguf_file and (where / m.gguf_file).is_file():
        return [where / m.gguf_file]
    if where.is_file():
        return [where]
    if where.is_dir():
        return sorted(p for p in where.rglob("*") if p.is_file() and p.suffix in WEIGHT_SUFFIXES)
    return []


def model_checksum(cfg: config.Config) -> str | None:
    """sha256 of the model's weight file (of the files' checksums in order, for a folder); None without files."""
    files = model_files(cfg)
    if not files:
        return None
    sums = [_cached_sha256(p) for p in files]
    if len(sums) == 1:
        return sums[0]
    return hashlib.sha256("".join(f"{p.name}:{s}\n" for p, s in zip(files, sums)).encode()).hexdigest()


def git_commit() -> str | None:
    """The project checkout's commit (`+dirty` with uncommitted changes), or None outside a git checkout."""
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return None
    try:

        def git(*args: str) -> str:
            return subprocess.run(
                ["git", "-C", str(root), *args], capture_output=True, text=True, check=True, timeout=GIT_TIMEOUT
            ).stdout.strip()

        commit = git("rev-parse", "HEAD")
        dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.SubprocessError):
        return None
    return commit + ("+dirty" if dirty else "")


def provenance(
    cfg: config.Config,
    agent: Agent,
    suite: str | Path,
    command: str,
    baseline: str,
    concurrency: int,
    modes: list[str] | None = None,
    search_tool: str | None = None,
) -> dict:
    """The `run` record of summary.json (redacted): `agent` is one the run's agents are built like (its
    protocol's settings as resolved, its prompts' checksum); `command` is the command line as typed, `modes`
    the columns the run made (agent, direct, rag), `search_tool` the tool retrieve-then-answer searched with."""
    m = cfg.model
    model = m.name if m.backend == "openai" else "embedded" if m.backend == "embedded" else m.path
    if m.gguf_file:
        model = f"{model}/{m.gguf_file}"
    return redact(
        {
            "model": model,
            "model_sha256": model_checksum(cfg),
            "backend": m.backend,
            "base_url": m.base_url,
            "device": m.device,
            "dtype": m.dtype,
            **agent.protocol.record(),
            "tools": list(agent.tools),
            "max_turns": agent.max_turns,
            "lang": cfg.agent.lang,
            "generation": cfg.generation_kwargs(),
            "baseline": baseline,
            "modes": modes,
            "search_tool": search_tool,
            "concurrency": concurrency,
            "prompts_sha256": agent.prompts.sha256,
            "version": __version__,
            "commit": git_commit(),
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "suite": str(suite),
            "suite_sha256": file_sha256(Path(suite)),
            "config": cfg.source,
            "command": command,
        }
    )
