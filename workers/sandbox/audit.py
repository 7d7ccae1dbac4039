"""Leftover detection shared by the backends: processes of the sandbox uid and where they live.

Why: "no run leaves a process, container, mount or cgroup behind" must be checkable, by tests and by SREs.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from schemas.caps import QUOTE_CHARS


@dataclass(frozen=True, slots=True)
class HostProcess:
    """A host process owned by the sandbox uid."""

    pid: int
    cgroups: str
    cmdline: str


PF_EXITING = 0x4  # include/linux/sched.h: the task is in do_exit and never returns to user space


def processes_of_uid(uid: int, proc_root: Path = Path("/proc")) -> list[HostProcess]:
    """Every live host process whose real uid is ``uid``.

    Zombies are skipped: they have already exited and hold no resources. (bwrap's outer process exits as
    soon as it learns the program's status, so its pid-1 helper is reaped by the host init a moment later.)
    So are tasks already inside ``do_exit`` (``PF_EXITING``), checked AFTER reading their cgroup: a killed
    task whose run cgroup was just removed shows cgroup ``/`` and an empty cmdline for a moment before it
    becomes a zombie, which made the audit report it as "escaped" (a race, not a leak). A live task, even
    one with an empty cmdline (``execve`` with no argv), is never skipped.
    """
    found: list[HostProcess] = []
    for entry in proc_root.iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, StopIteration, ValueError, IndexError):
            status = (entry / "status").read_text()
            uid_line = next(line for line in status.splitlines() if line.startswith("Uid:"))
            state = next(line for line in status.splitlines() if line.startswith("State:"))
            if int(uid_line.split()[1]) != uid or state.split()[1] in ("Z", "X"):
                continue
            cgroups = (entry / "cgroup").read_text().replace("\n", " ")
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if _exited(entry):
                continue
            found.append(HostProcess(int(entry.name), cgroups, cmdline[:QUOTE_CHARS]))
    return found


def _exited(entry: Path) -> bool:
    """True once the task is a zombie or inside ``do_exit`` (``/proc/<pid>/stat`` state and flags)."""
    try:
        stat = (entry / "stat").read_text()
    except FileNotFoundError:
        return True  # reaped meanwhile
    fields = stat[stat.rindex(")") + 2 :].split()
    return fields[0] in ("Z", "X", "x") or bool(int(fields[6]) & PF_EXITING)


def poll_until_empty(check: Callable[[], list[str]], wait_s: float) -> list[str]:
    """Re-run ``check`` until it finds nothing or ``wait_s`` passes (killed processes take a moment)."""
    end = time.monotonic() + wait_s
    while True:
        found = check()
        if not found or time.monotonic() >= end:
            return found
        time.sleep(0.02)


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (one of another user counts: ``EPERM`` means it is there). Never a
    process group: 0 and negative numbers are not a process."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def tagged_pids(prefix: str, proc_root: Path = Path("/proc")) -> list[int]:
    """Host pids of the processes with a command-line argument starting with ``prefix``: how tests and SREs
    find a worker's fork server or entry servers by their tag."""
    found = []
    for entry in proc_root.iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if any(arg.startswith(prefix.encode()) for arg in argv):
                found.append(int(entry.name))
    return found
