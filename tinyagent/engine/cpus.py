"""How many CPU threads llama.cpp should run: the physical cores this process may use, less the ones other
processes keep busy.

llama.cpp's threads meet at a barrier after every operation, so a thread that loses its core stalls them
all: more threads than free cores is far slower than fewer (measured on a 2-core machine: docs/engine.md,
"Threads"), while one thread fewer than the free cores costs at most its share. Hyper-threads share a core's
arithmetic units and help little, so the count starts from physical cores (llama.cpp's own default), bounded
by this process's CPU affinity and a cgroup CPU quota, then takes away the cores the 1-minute load average
says are busy (rounded up: a half-busy core still stalls a barrier).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

SYS_CPU = Path("/sys/devices/system/cpu")
CGROUP_MAX = Path("/sys/fs/cgroup/cpu.max")


def usable_cpus() -> set[int]:
    """The logical CPUs this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return set(os.sched_getaffinity(0))
    return set(range(os.cpu_count() or 1))


def physical_cores(cpus: set[int] | None = None, sys_cpu: Path = SYS_CPU) -> int:
    """Distinct physical cores among `cpus` (hyper-thread siblings count once); the CPU count where the
    topology cannot be read."""
    cpus = usable_cpus() if cpus is None else cpus
    cores = set()
    for cpu in cpus:
        topology = sys_cpu / f"cpu{cpu}" / "topology"
        try:
            cores.add(
                ((topology / "physical_package_id").read_text().strip(), (topology / "core_id").read_text().strip())
            )
        except OSError:
            return max(1, len(cpus))
    return max(1, len(cores))


def cgroup_cpus(path: Path = CGROUP_MAX) -> float | None:
    """The CPUs a cgroup v2 quota allows this process ("200000 100000" is 2), or None without a quota."""
    try:
        quota, period = path.read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        return None


def busy_cores() -> float:
    """Runnable processes over the last minute (the load average), 0 where the system does not say."""
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return 0.0


def default_threads(cores: int | None = None, busy: float | None = None, quota: float | None = None) -> int:
    """Threads for llama.cpp: the physical cores (bounded by a cgroup quota) less those busy with other work,
    at least one. Each argument, when given, replaces what is read from the machine (tests fake them)."""
    cores = physical_cores() if cores is None else cores
    quota = cgroup_cpus() if quota is None else quota
    if quota:
        cores = min(cores, max(1, math.floor(quota)))
    busy = busy_cores() if busy is None else busy
    return max(1, min(cores, cores - math.ceil(busy - 0.25)))
