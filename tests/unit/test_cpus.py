"""Workers sized by what the node may use: its affinity, or its cgroup's CPU quota (v2
``cpu.max``, v1 ``cfs_quota_us``/``cfs_period_us``), whichever is smaller, read from cgroup
files the test lays out as a container would see them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kiq.cli.serve import worker_count
from kiq.runtime import cpus
from kiq.runtime.cpus import cpu_budget


@pytest.fixture
def many_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 64-core host, as the affinity says inside a container."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(64)))


def _v2(tmp_path: Path, path: str, **limits: str) -> tuple[Path, Path]:
    root = tmp_path / "cgroup"
    for where, value in limits.items():
        directory = root / where.replace("__", "/") if where != "root" else root
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "cpu.max").write_text(value + "\n")
    me = tmp_path / "self-cgroup"
    me.write_text(f"0::{path}\n")
    return root, me


def test_a_cgroup_v2_quota_caps_the_affinity(tmp_path: Path, many_cores: None) -> None:
    root, me = _v2(tmp_path, "/", root="200000 100000")
    budget = cpu_budget(root, me)
    assert (budget.count, budget.affinity, budget.quota) == (2, 64, 2.0)
    assert "CPU quota 2" in budget.describe() and "64 cores" in budget.describe()
    root, me = _v2(tmp_path / "b", "/", root="150000 100000")
    assert cpu_budget(root, me).count == 2  # 1.5 CPUs: two processes share them
    root, me = _v2(tmp_path / "c", "/", root="10000 100000")
    assert cpu_budget(root, me).count == 1  # never none


def test_no_quota_is_the_affinity(tmp_path: Path, many_cores: None) -> None:
    root, me = _v2(tmp_path, "/", root="max 100000")
    assert cpu_budget(root, me).count == 64
    assert cpu_budget(tmp_path / "none", tmp_path / "missing").quota is None


def test_the_smallest_quota_of_the_cgroup_and_its_parents_applies(
    tmp_path: Path, many_cores: None
) -> None:
    root, me = _v2(
        tmp_path,
        "/kubepods/pod1/ctr",
        kubepods="max 100000",
        kubepods__pod1="300000 100000",
        kubepods__pod1__ctr="500000 100000",
    )
    budget = cpu_budget(root, me)
    assert (budget.count, budget.quota) == (3, 3.0)
    assert budget.source.endswith("kubepods/pod1/cpu.max")


def test_a_cgroup_v1_quota(tmp_path: Path, many_cores: None) -> None:
    root = tmp_path / "cgroup"
    ctr = root / "cpu,cpuacct" / "docker" / "abc"
    ctr.mkdir(parents=True)
    (ctr / "cpu.cfs_quota_us").write_text("400000\n")
    (ctr / "cpu.cfs_period_us").write_text("100000\n")
    me = tmp_path / "self-cgroup"
    me.write_text("12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n0::/\n")
    assert cpu_budget(root, me).count == 4
    (ctr / "cpu.cfs_quota_us").write_text("-1\n")
    assert cpu_budget(root, me).count == 64


def test_the_affinity_wins_when_smaller(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1})
    root, me = _v2(tmp_path, "/", root="800000 100000")
    assert cpu_budget(root, me).count == 2


def test_serve_sizes_its_workers_by_the_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    budget = cpus.CpuBudget(3, 64, 3.0, "cpu.max")
    monkeypatch.setattr(cpus, "cpu_budget", lambda *_a: budget)
    assert worker_count(0) == 3
    assert worker_count(5) == 5  # a setting given is kept
