"""How many CPUs this process may really use, container limits included.

``os.cpu_count()`` reports the host's cores inside a container; the usable count is the
smallest of the CPU affinity mask and the cgroup CPU quota (v2 ``cpu.max``, v1
``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``), rounded up, and at least 1.
"""

from __future__ import annotations

import math
import os
import pathlib


def available_cpus(cgroup_root: str = "/sys/fs/cgroup") -> int:
    try:
        count = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        count = os.cpu_count() or 1
    quota = cgroup_cpu_quota(cgroup_root)
    if quota is not None:
        count = min(count, max(1, math.ceil(quota)))
    return max(count, 1)


def cgroup_cpu_quota(cgroup_root: str = "/sys/fs/cgroup") -> float | None:
    """CPUs granted by the cgroup quota, or None when there is no quota."""
    root = pathlib.Path(cgroup_root)
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]  # cgroup v2
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass  # no cgroup v2 file here: try v1
    try:
        quota_us = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period_us = int((root / "cpu" / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return None if quota_us <= 0 else quota_us / period_us
