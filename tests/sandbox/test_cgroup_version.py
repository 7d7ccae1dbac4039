"""Run cgroups live on the hierarchy this kernel offers, with the limits written where that version reads them.

v1 where memory, pids and cpu are v1 controllers (this machine and CI's), v2 otherwise: ``tests/vm`` boots a
cgroup v2 kernel and runs this file (and the hostile suites) there, reading ``cgroup_version`` from the
junit report to prove which path ran.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from pathlib import Path

import pytest

from workers.sandbox.cgroups import SOCKET_SHARE_MIN, CgroupManager, cgroup_mountinfo, split_for_sockets

pytestmark = pytest.mark.sandbox

MEMORY_BYTES = 64 << 20
PIDS = 16
CPUS = 0.5


def _kernel_version() -> int:
    """1 when memory, pids and cpu are mounted as v1 controllers, else 2 (what the manager must choose)."""
    mounts, _ = cgroup_mountinfo()
    controllers = {opt for opts, _ in mounts for opt in opts}
    return 1 if {"memory", "pids", "cpu"} <= controllers else 2


def test_the_manager_uses_the_hierarchy_the_kernel_offers(
    record_testsuite_property: Callable[[str, object], None],
) -> None:
    manager = CgroupManager()
    record_testsuite_property("cgroup_version", manager.version)
    assert manager.version == _kernel_version()
    assert all(parent.is_dir() for parent in manager.parents())


def _limit_files(dirs: list[Path], names: tuple[str, ...]) -> dict[str, str]:
    return {p.name: p.read_text().strip() for d in dirs for p in d.iterdir() if p.name in names}


def test_limits_land_in_the_files_this_version_enforces() -> None:
    manager = CgroupManager()
    name = f"{os.getpid()}-version-{secrets.token_hex(3)}"
    group = manager.create(name, memory_bytes=MEMORY_BYTES, pids=PIDS, cpus=CPUS)
    quota = str(int(CPUS * 100_000))
    try:
        if manager.version == 1:
            # v1 charges TCP/UDP buffers to a counter of their own: the limit is split, summing to the run's.
            rest, sockets = split_for_sockets(MEMORY_BYTES)
            assert rest + sockets == MEMORY_BYTES
            assert sockets == SOCKET_SHARE_MIN
            names: tuple[str, ...] = ("memory.limit_in_bytes", "memory.kmem.tcp.limit_in_bytes", "pids.max",
                                      "cpu.cfs_quota_us", "cpu.cfs_period_us")  # fmt: skip
            assert _limit_files(group.dirs, names) == {
                "memory.limit_in_bytes": str(rest),
                "memory.kmem.tcp.limit_in_bytes": str(sockets),
                "pids.max": str(PIDS),
                "cpu.cfs_quota_us": quota,
                "cpu.cfs_period_us": "100000",
            }
        else:
            assert len(group.dirs) == 1
            names = ("memory.max", "pids.max", "cpu.max")
            assert _limit_files(group.dirs, names) == {
                "memory.max": str(MEMORY_BYTES),
                "pids.max": str(PIDS),
                "cpu.max": f"{quota} 100000",
            }
            assert (group.dirs[0] / "cgroup.kill").exists()
        assert group.pids() == []
    finally:
        group.destroy()
    assert not any(d.exists() for d in group.dirs)
