"""The ``exec`` action of an agent step: the command run under its limit, its output read with caps, and every
other process of the run ended after it.

Why: the runner never runs the agent's code itself; the command gets stdin on /dev/null and stdout/stderr on
pipes, its own session and the default signals, and is stopped by the parent with SIGKILL at its limit (the
CPU time and own time of every process of the run, ``guest.clock``). Before the workspace is packed, every
other process of the run is SIGKILLed and reaped until ``/proc`` shows none of our uid alive.

Guest code (standard library only), spliced into the episode step runner (``step_runner``).
"""

from __future__ import annotations

import os
import select
import signal
import time

from guest.clock import HOST, ProcLimit
from guest.plumbing import b64
from guest.step_errors import JobError

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs start-up time
if TYPE_CHECKING:
    from typing import Any

SWEEP_S = 5.0
DRAIN_S = 1.0
_READ_CHUNK = 1 << 16
#: Signals the parent ignores (a command cannot end it with them); the command gets all of these, and
#: SIGPIPE/SIGXFSZ (Python's own), back at their default.
IGNORED_SIGNALS = (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2,
            signal.SIGALRM, signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU)  # fmt: skip
_DEFAULT_IN_CHILD = (*IGNORED_SIGNALS, signal.SIGPIPE, signal.SIGXFSZ)


def _oom_score_adj(value: str) -> str:
    """Set our ``oom_score_adj`` (best effort); the value it had."""
    try:
        with open("/proc/self/oom_score_adj") as f:
            old = f.read().strip()
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write(value)
    except OSError:
        return value
    return old


def sweep(deadline: float) -> bool:
    """SIGKILL every other process of the run until none of our uid is alive; False past ``deadline``."""
    while True:
        try:  # noqa: SIM105 - contextlib is not imported here (start-up cost)
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass
        _reap()
        if not _others_alive():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.001)


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _others_alive() -> bool:
    """Some process of our uid other than us and the namespace's init runs (a zombie has stopped for good;
    a zombie leader whose threads still run has not)."""
    me, uid = str(os.getpid()), os.getuid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or name in (me, "1"):
            continue
        try:
            with open(f"/proc/{name}/status", "rb") as f:
                fields = dict(line.split(b":", 1) for line in f.read().splitlines() if b":" in line)
        except OSError:
            continue  # gone
        try:
            state = fields[b"State"].split()[0]
            owner = int(fields[b"Uid"].split()[0])
            threads = int(fields[b"Threads"].split()[0])
        except (KeyError, IndexError, ValueError):
            return True  # unreadable status: assume alive (the sweep retries, then gives up)
        if owner == uid and (state not in (b"Z", b"X") or threads > 1):
            return True
    return False


class Pipes:
    """The command's stdout and stderr as we read them: the first ``cap`` bytes of each, and all counted."""

    def __init__(self, cap: int, out_r: int, err_r: int) -> None:
        self.cap = cap
        self.fds = (out_r, err_r)
        self.open = [out_r, err_r]
        self.kept = {out_r: bytearray(), err_r: bytearray()}
        self.total = {out_r: 0, err_r: 0}

    def pump(self, until: float | ProcLimit, pidfd: int | None = None) -> bool:
        """Read until the child exits (``pidfd`` readable), or without one until both pipes are at EOF;
        False when the deadline ``until`` passes, or the limit ``until`` stops it, first. Output already in the
        pipes is read even past the deadline: a runner the host kept off the CPU past it (a busy host) must
        not lose what the command wrote, only stop waiting for more."""
        while self.open or pidfd is not None:
            if isinstance(until, ProcLimit):
                if until.poll() is not None:
                    return False
                wait = until.next_wait()
            else:
                wait = max(until - time.monotonic(), 0.0)
            watch = self.open if pidfd is None else [*self.open, pidfd]
            ready, _, _ = select.select(watch, [], [], wait)
            if not ready and not isinstance(until, ProcLimit) and wait <= 0:
                return False
            if pidfd is not None and pidfd in ready:
                return True
            for fd in ready:
                chunk = os.read(fd, _READ_CHUNK)
                if not chunk:
                    self.open.remove(fd)
                    continue
                self.total[fd] += len(chunk)
                kept = self.kept[fd]
                if len(kept) < self.cap:
                    kept += chunk[: self.cap - len(kept)]
        return True

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)


def _wait_command(pid: int, pipes: Pipes, limit: ProcLimit) -> tuple[bool, int]:
    """Pump the command's pipes until it exits or its limit stops it (then its group is killed); (whether the
    limit stopped it, its wait status)."""
    pidfd = os.pidfd_open(pid)
    try:
        stopped = not pipes.pump(limit, pidfd)
    finally:
        os.close(pidfd)
    if stopped:
        try:  # noqa: SIM105 - contextlib is not imported here (start-up cost)
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
    return stopped, os.waitpid(pid, 0)[1]


def run_command(argv: list[str], timeout_s: float, cap: int) -> dict[str, Any]:
    """Spawn ``argv`` (own session, default signals, stdin /dev/null, stdout/stderr on capped pipes), wait
    for it or its deadline, then end every process of the run and drain the pipes."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    pipes = Pipes(cap, out_r, err_r)
    null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    started = time.monotonic()
    adj = _oom_score_adj("1000")  # inherited: the OOM killer should pick the command, not us
    spawn_error = None
    try:
        actions = [(os.POSIX_SPAWN_DUP2, null, 0), (os.POSIX_SPAWN_DUP2, out_w, 1), (os.POSIX_SPAWN_DUP2, err_w, 2)]
        pid = os.posix_spawnp(argv[0], argv, dict(os.environ), file_actions=actions, setsid=True,
                              setsigdef=_DEFAULT_IN_CHILD)  # fmt: skip
    except OSError as exc:
        pid, spawn_error = -1, f"{argv[0][:200]}: {exc.strerror}"
    finally:
        _oom_score_adj(adj)
        for fd in (null, out_w, err_w):
            os.close(fd)
    timed_out, status = False, 0
    limit = ProcLimit(timeout_s) if pid > 0 else None
    try:
        if pid > 0 and limit is not None:
            timed_out, status = _wait_command(pid, pipes, limit)
        sweep(time.monotonic() + SWEEP_S)
        pipes.pump(time.monotonic() + DRAIN_S)  # every writer is dead: EOF comes at once
    finally:
        pipes.close()
    result: dict[str, Any] = {
        "exit_code": None,
        "signal": None,
        "timed_out": timed_out,
        "stdout": b64(pipes.kept[out_r]),
        "stderr": b64(pipes.kept[err_r]),
        "stdout_bytes": pipes.total[out_r],
        "stderr_bytes": pipes.total[err_r],
        "ms": round((time.monotonic() - started) * 1000, 3),
        **(limit.limit.figures() if limit is not None else {}),
    }
    if timed_out and limit is not None and limit.limit.reason == HOST:
        result.update(timed_out=False, contention=True)
    if spawn_error is not None:
        result.update(exit_code=127, spawn_error=spawn_error)
    elif not timed_out:
        if os.WIFSIGNALED(status):
            result["signal"] = os.WTERMSIG(status)
        else:
            result["exit_code"] = os.WEXITSTATUS(status)
    return result


def command_argv(job: dict[str, Any]) -> list[str]:
    command = job.get("command")
    if type(command) is str:
        return ["/bin/sh", "-c", command]
    if type(command) is list and command and all(type(a) is str and "\0" not in a for a in command):
        return list(command)
    raise JobError("exec without a command")
