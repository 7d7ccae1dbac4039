"""Leftover detection shared by the backends: processes of the sandbox uid and where they live.

Why: "no run leaves a process, container, mount or cgroup behind" must be checkable, by tests and by SREs.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class HostProcess:
    """A host process owned by the sandbox uid."""

    pid: int
    cgroups: str
    cmdline: str


def processes_of_uid(uid: int) -> list[HostProcess]:
    """Every live host process whose real uid is ``uid``.

    Zombies are skipped: they have already exited and hold no resources. (bwrap's outer process exits as
    soon as it learns the program's status, so its pid-1 helper is reaped by the host init a moment later.)
    """
    found: list[HostProcess] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            status = (entry / "status").read_text()
            uid_line = next(line for line in status.splitlines() if line.startswith("Uid:"))
            state = next(line for line in status.splitlines() if line.startswith("State:"))
            if int(uid_line.split()[1]) != uid or state.split()[1] in ("Z", "X"):
                continue
            cgroups = (entry / "cgroup").read_text().replace("\n", " ")
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            found.append(HostProcess(int(entry.name), cgroups, cmdline[:200]))
    return found


def poll_until_empty(check: Callable[[], list[str]], wait_s: float) -> list[str]:
    """Re-run ``check`` until it finds nothing or ``wait_s`` passes (killed processes take a moment)."""
    end = time.monotonic() + wait_s
    while True:
        found = check()
        if not found or time.monotonic() >= end:
            return found
        time.sleep(0.02)
