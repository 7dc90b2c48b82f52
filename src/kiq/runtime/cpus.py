"""How many CPUs this process may use: its affinity, and its cgroup's CPU quota.

In a container limited by a quota (Kubernetes' CPU limit is cgroup v2's ``cpu.max``, or v1's
``cpu.cfs_quota_us`` over ``cpu.cfs_period_us``) the affinity still lists every core of
the host: a 2-CPU pod on a 64-core host would start 64 read workers, each opening every
store, where 2 can run at once. The quota of every cgroup from this one up to the root
applies; the smallest is what the process gets.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
SELF_CGROUP = Path("/proc/self/cgroup")
_V1_DIRS = ("cpu,cpuacct", "cpu", "cpuacct,cpu")


@dataclass(frozen=True)
class CpuBudget:
    """The CPUs to size by (at least 1), and why, for the log line that says it."""

    count: int
    affinity: int
    quota: float | None  # CPUs the cgroup quota allows; None: no quota
    source: str  # where the quota was read

    def describe(self) -> str:
        if self.quota is None:
            return f"{self.affinity} cores in affinity, no CPU quota"
        return f"CPU quota {self.quota:g} ({self.source}), {self.affinity} cores in affinity"


def cpu_budget(root: Path = CGROUP_ROOT, self_cgroup: Path = SELF_CGROUP) -> CpuBudget:
    """The smaller of the affinity and the cgroup quota (rounded up), at least 1."""
    affinity = _affinity()
    quota, source = _quota(root, self_cgroup)
    count = affinity if quota is None else min(affinity, max(1, math.ceil(quota)))
    return CpuBudget(max(1, count), affinity, quota, source)


def _affinity() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def _quota(root: Path, self_cgroup: Path) -> tuple[float | None, str]:
    """The smallest quota of this process's cgroup and its parents, in CPUs."""
    try:
        lines = self_cgroup.read_text().splitlines()
    except OSError:
        return None, ""
    found: list[tuple[float, str]] = []
    for line in lines:
        if line.count(":") < 2:
            continue
        _, controllers, path = line.split(":", 2)
        if controllers == "":  # cgroup v2: "0::/path"
            for directory in _up_from(root, path):
                quota = _v2(directory / "cpu.max")
                if quota is not None:
                    found.append((quota, str(directory / "cpu.max")))
        elif "cpu" in controllers.split(","):
            for mount in (root / d for d in _V1_DIRS):
                for directory in _up_from(mount, path):
                    quota = _v1(directory)
                    if quota is not None:
                        found.append((quota, str(directory / "cpu.cfs_quota_us")))
    if not found:
        return None, ""
    return min(found)


def _up_from(mount: Path, path: str) -> list[Path]:
    """``mount/path`` and each parent up to ``mount`` (a container sees its own cgroup as
    ``/``, so the file is at the mount itself)."""
    parts = [p for p in path.strip().split("/") if p and p not in (".", "..")]
    return [mount.joinpath(*parts[:n]) for n in range(len(parts), -1, -1)]


def _v2(cpu_max: Path) -> float | None:
    """``cpu.max``: ``QUOTA PERIOD`` in microseconds, or ``max PERIOD`` for none."""
    try:
        quota, period = cpu_max.read_text().split()[:2]
    except (OSError, ValueError):
        return None
    return _ratio(quota, period)


def _v1(directory: Path) -> float | None:
    """``cpu.cfs_quota_us`` (-1: none) over ``cpu.cfs_period_us``."""
    try:
        quota = (directory / "cpu.cfs_quota_us").read_text().strip()
        period = (directory / "cpu.cfs_period_us").read_text().strip()
    except OSError:
        return None
    return _ratio(quota, period)


def _ratio(quota: str, period: str) -> float | None:
    try:
        q, p = int(quota), int(period)
    except ValueError:  # "max"
        return None
    return q / p if q > 0 and p > 0 else None
