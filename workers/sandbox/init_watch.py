"""The idle init of a pooled container as the host sees it: a snapshot taken when the container joins the pool,
compared by every host-side reset.

Why: the init (pid 1, a process of the sandbox uid) outlives every run of its container, and a run may change
what the same uid may change of another process: its rlimits (``prlimit``), nice (``setpriority``, also through
``PRIO_PGRP``/``PRIO_USER``), scheduling policy and utilisation clamps (``sched_setattr``), CPU affinity and I/O
priority. A changed init carries one run's data to the next, and the entry supervisor refuses to start a run
beside it (its own check, kept as defence in depth, would make an honest run a ``sandbox_error``): the reset
compares and discards the container instead, so no run ever meets a changed init.
"""

from __future__ import annotations

import ctypes
import os
import platform
from pathlib import Path

_SCHED_GETATTR = {"x86_64": 315, "aarch64": 275}
_IOPRIO_GET = {"x86_64": 252, "aarch64": 31}
_IOPRIO_WHO_PROCESS = 1
_SCHED_ATTR_SIZE = 56  # struct sched_attr with the utilisation clamps (SCHED_ATTR_SIZE_VER1)
_STAT_FIELDS = (0, 15, 16, 17, 37, 38)  # after the comm: state, priority, nice, threads, rt_priority, policy
_PROC_FILES = ("limits", "syscall", "oom_score_adj", "coredump_filter", "autogroup", "timerslack_ns", "cgroup")

_libc = ctypes.CDLL(None, use_errno=True)

InitSnapshot = tuple[object, ...]


def _sched_attr(pid: int, machine: str) -> bytes | None:
    number = _SCHED_GETATTR.get(machine)
    if number is None:
        return None
    buf = ctypes.create_string_buffer(_SCHED_ATTR_SIZE)
    if _libc.syscall(number, pid, buf, _SCHED_ATTR_SIZE, 0) != 0:
        raise OSError(ctypes.get_errno(), f"sched_getattr {pid}")
    return buf.raw[4:]  # the size field is the kernel's, not the process's


def _ioprio(pid: int, machine: str) -> int | None:
    number = _IOPRIO_GET.get(machine)
    return None if number is None else int(_libc.syscall(number, _IOPRIO_WHO_PROCESS, pid))


def snapshot(pid: int) -> InitSnapshot:
    """Everything of process ``pid`` a process of the same uid could change (read as root from the host), and
    whether it is still not dumpable (its /proc files owned by root: its memory and the rest of its state are
    then out of a run's reach; the entry supervisor also checks those per run). ``OSError`` once it is gone."""
    proc = Path(f"/proc/{pid}")
    machine = platform.machine()
    stat = (proc / "stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    files = [(proc / name).read_text() if (proc / name).exists() else None for name in _PROC_FILES]
    return (
        (proc / "mem").stat().st_uid == 0,
        [fields[i] for i in _STAT_FIELDS],
        files,
        sorted(os.sched_getaffinity(pid)),
        _sched_attr(pid, machine),
        _ioprio(pid, machine),
    )


def unchanged(pid: int, reference: InitSnapshot) -> bool:
    """The init is alive and exactly as when its container joined the pool."""
    try:
        return snapshot(pid) == reference
    except OSError:
        return False
