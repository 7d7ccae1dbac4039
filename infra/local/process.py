"""Background processes that ``rewardstream up`` starts and ``down`` stops, tracked by pid files.

A pid file alone is not trusted: it records the pid and the process start time (from /proc), and the
process must still be alive with that same start time, so a recycled pid is never signalled.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from schemas.errors import PlatformError


@dataclass(frozen=True)
class ManagedProcess:
    """One service process: its pid file (pid and start time) and its log."""

    name: str
    pidfile: Path
    logfile: Path

    def pid(self) -> int | None:
        """The pid of our running process, or None (a stale pid file is removed)."""
        try:
            pid_text, started_text = self.pidfile.read_text().split()
            pid, started = int(pid_text), int(started_text)
        except (FileNotFoundError, ValueError):
            return None
        if _start_time(pid) == started:
            return pid
        self.pidfile.unlink(missing_ok=True)
        return None

    def start(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: Path,
        user: str | None = None,
    ) -> int:
        """Start ``argv`` detached in its own session, output appended to the log; return its pid."""
        self.logfile.parent.mkdir(parents=True, exist_ok=True)
        self.pidfile.parent.mkdir(parents=True, exist_ok=True)
        with self.logfile.open("ab") as log:
            try:
                proc = subprocess.Popen(
                    list(argv),
                    cwd=cwd,
                    env=dict(env),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    close_fds=True,
                    user=user,
                )
            except OSError as exc:
                raise PlatformError(f"cannot start {self.name}: {exc}") from exc
        self.pidfile.write_text(f"{proc.pid} {_start_time(proc.pid)}\n")
        # Reap it if it exits while we are still alive (no zombie, no "still running" warning);
        # the thread dies with the short-lived `up` process, and the service lives on.
        threading.Thread(target=proc.wait, name=f"reap-{self.name}", daemon=True).start()
        return proc.pid

    def exited_early(self) -> str | None:
        """If the process died, the last lines of its log (for an error that says why)."""
        if self.pid() is not None:
            return None
        return tail(self.logfile, 8)

    def stop(self, timeout_s: float = 30.0) -> bool:
        """SIGTERM the whole process group, SIGKILL it after ``timeout_s``; True if something was stopped."""
        pid = self.pid()
        if pid is None:
            return False
        _signal_group(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not _group_alive(pid):
                break
            time.sleep(0.1)
        else:
            _signal_group(pid, signal.SIGKILL)
            kill_deadline = time.monotonic() + 10.0
            while _group_alive(pid) and time.monotonic() < kill_deadline:
                time.sleep(0.05)
        self.pidfile.unlink(missing_ok=True)
        return True


def tail(path: Path, lines: int) -> str:
    """The last ``lines`` lines of a text file ('' if it does not exist)."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return ""
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _start_time(pid: int) -> int | None:
    """The process start time in clock ticks since boot, or None if gone or a zombie."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()
    except OSError:
        return None
    if fields[0] == "Z":
        return None
    return int(fields[19])


def _signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        return
    except PermissionError as exc:
        raise PlatformError(f"not allowed to stop process group {pid}: {exc}") from exc


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) pids whose process group is ``pgid``."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[-1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def _group_alive(pgid: int) -> bool:
    return bool(group_members(pgid))


def group_rss_kb(pgid: int) -> int:
    """Resident memory of every process in a process group, in KiB."""
    total = 0
    for pid in group_members(pgid):
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total
