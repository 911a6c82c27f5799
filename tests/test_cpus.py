"""llama.cpp's default thread count from the machine: physical cores (hyper-thread siblings once), a cgroup
quota, and the cores other work keeps busy; `threads` still overrides it."""

from __future__ import annotations

import pytest

from tinyagent.engine import cpus


def fake_topology(root, cores: dict[int, tuple[int, int]]):
    for cpu, (package, core) in cores.items():
        topology = root / f"cpu{cpu}" / "topology"
        topology.mkdir(parents=True)
        (topology / "physical_package_id").write_text(f"{package}\n")
        (topology / "core_id").write_text(f"{core}\n")
    return root


def test_hyper_threads_count_once_and_only_usable_cpus_count(tmp_path):
    # 4 cores with 2 hyper-threads each (cpu N and N+4 share a core), on one package
    root = fake_topology(tmp_path, {cpu: (0, cpu % 4) for cpu in range(8)})
    assert cpus.physical_cores(set(range(8)), root) == 4
    assert cpus.physical_cores({0, 4}, root) == 1  # one core's two threads
    assert cpus.physical_cores({0, 1, 2}, root) == 3
    two_packages = fake_topology(tmp_path / "two", {0: (0, 0), 1: (1, 0)})  # same core id, other package
    assert cpus.physical_cores({0, 1}, two_packages) == 2
    assert cpus.physical_cores({0, 1, 2}, tmp_path / "none") == 3  # no topology: the CPU count


def test_a_cgroup_quota_is_read(tmp_path):
    limit = tmp_path / "cpu.max"
    limit.write_text("150000 100000\n")
    assert cpus.cgroup_cpus(limit) == 1.5
    limit.write_text("max 100000\n")
    assert cpus.cgroup_cpus(limit) is None
    assert cpus.cgroup_cpus(tmp_path / "missing") is None


@pytest.mark.parametrize(
    "cores, busy, quota, expected",
    [
        (2, 0.0, None, 2),  # an idle 2-core machine: both
        (2, 0.1, None, 2),  # background noise is not a busy core
        (2, 0.6, None, 1),  # one core half busy: it would stall every barrier
        (2, 1.9, None, 1),
        (2, 7.0, None, 1),  # at least one
        (8, 0.0, None, 8),
        (16, 0.0, None, 16),
        (16, 3.5, None, 12),
        (8, 0.0, 2.0, 2),  # a cgroup quota of 2 CPUs
        (8, 0.0, 0.5, 1),
    ],
)
def test_default_threads_from_a_faked_machine(cores, busy, quota, expected):
    assert cpus.default_threads(cores=cores, busy=busy, quota=quota) == expected


def test_the_machine_is_read_when_nothing_is_faked(monkeypatch):
    monkeypatch.setattr(cpus, "physical_cores", lambda: 6)
    monkeypatch.setattr(cpus, "busy_cores", lambda: 2.0)
    monkeypatch.setattr(cpus, "cgroup_cpus", lambda: None)
    assert cpus.default_threads() == 4
    monkeypatch.setattr(cpus, "cgroup_cpus", lambda: 3.0)
    assert cpus.default_threads() == 1


def test_the_llama_runtime_uses_the_default_unless_threads_are_given(monkeypatch):
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    from tinyagent.engine import llama_runtime
    from tinyagent.models.embedded import embedded_gguf_path

    monkeypatch.setattr(llama_runtime, "default_threads", lambda: 3)
    assert llama_runtime.LlamaRuntime(embedded_gguf_path(), weight_type="file").threads == 3
    assert llama_runtime.LlamaRuntime(embedded_gguf_path(), threads=1, weight_type="file").threads == 1
