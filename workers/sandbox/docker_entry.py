"""Host side of the docker warm pool's entry server (see ``docker_entry_main``): start, feed, stop, watch.

One server per pooled container, started with ``nsenter --no-fork`` into the container's namespaces (its pid
namespace only for the server's children) running the image's own ``/usr/bin/python3``. A run is one
``sendmsg`` of five fds; no docker API call and no ``runc exec`` per run. The server lives exactly as long as
its container: ``close`` (or the worker's death) closes the control socket and it exits.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import secrets
import shutil
import signal
import socket
import subprocess
from array import array
from collections.abc import Sequence
from pathlib import Path

from schemas.errors import SandboxError
from workers.sandbox.cgroups import cgroup_mountinfo
from workers.sandbox.guest_program import PYTHON_FLAGS, guest_program
from workers.sandbox.output_pump import Deadlines

_START_S = 15.0
_HOST_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
TAG_PREFIX = "rs-docker-entry-of-"


def nsenter_path() -> str | None:
    """``nsenter`` (Debian ``util-linux``) when this worker may use it (root: it enters other namespaces)."""
    if os.geteuid() != 0:
        return None
    return shutil.which("nsenter", path=_HOST_ENV["PATH"])


def same_user_namespace(init_pid: int) -> bool:
    """The entry maps no uids: it needs the container in the host's user namespace (no userns-remap)."""
    try:
        return os.readlink(f"/proc/{init_pid}/ns/user") == os.readlink("/proc/self/ns/user")
    except OSError:
        return False


def cgroup_procs_files(init_pid: int) -> list[Path]:
    """``cgroup.procs`` of every hierarchy (v1 controllers, named v1, v2) the container's init is in."""
    v1_mounts, v2 = cgroup_mountinfo()
    v1 = [(set(opts), mount_point) for opts, mount_point in v1_mounts]
    out: list[Path] = []
    for line in Path(f"/proc/{init_pid}/cgroup").read_text().splitlines():
        _, ctrls, path = line.split(":", 2)
        wanted = set(ctrls.split(","))
        base = v2 if ctrls == "" else next((m for opts, m in v1 if wanted <= opts), None)
        if base is None:
            raise SandboxError(f"cgroup hierarchy {ctrls or 'v2'!r} of the container is not mounted here")
        out.append(base / path.lstrip("/") / "cgroup.procs")
    return out


_LIMIT_NAMES = {
    "Max cpu time": "RLIMIT_CPU", "Max file size": "RLIMIT_FSIZE", "Max data size": "RLIMIT_DATA",
    "Max stack size": "RLIMIT_STACK", "Max core file size": "RLIMIT_CORE", "Max resident set": "RLIMIT_RSS",
    "Max processes": "RLIMIT_NPROC", "Max open files": "RLIMIT_NOFILE", "Max locked memory": "RLIMIT_MEMLOCK",
    "Max address space": "RLIMIT_AS", "Max file locks": "RLIMIT_LOCKS", "Max pending signals": "RLIMIT_SIGPENDING",
    "Max msgqueue size": "RLIMIT_MSGQUEUE", "Max nice priority": "RLIMIT_NICE",
    "Max realtime priority": "RLIMIT_RTPRIO", "Max realtime timeout": "RLIMIT_RTTIME",
}  # fmt: skip


def init_rlimits(init_pid: int) -> list[list[int]]:
    """``[resource, soft, hard]`` of the container's init, from ``/proc/<pid>/limits`` (prlimit on another
    uid's process needs CAP_SYS_RESOURCE, which a worker in a container may lack)."""
    out: list[list[int]] = []
    for line in Path(f"/proc/{init_pid}/limits").read_text().splitlines()[1:]:
        name = next((n for n in _LIMIT_NAMES if line.startswith(n)), None)
        res = getattr(resource, _LIMIT_NAMES[name], None) if name else None
        if name is None or res is None:
            continue
        soft, hard = line[len(name) :].split()[:2]
        out.append([res, *(resource.RLIM_INFINITY if v == "unlimited" else int(v) for v in (soft, hard))])
    return out


def _init_config(init_pid: int, filter_len: int) -> bytes:
    """The container init's identity, rlimits and oom_score_adj (a docker exec'd process gets the same)."""
    status: dict[str, list[str]] = {}
    for line in Path(f"/proc/{init_pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        status[key] = value.split()
    uid, gid = int(status["Uid"][0]), int(status["Gid"][0])
    if uid == 0 or gid == 0 or len(set(status["Uid"])) != 1 or len(set(status["Gid"])) != 1:
        raise SandboxError("the container's init does not run as one non-root uid/gid")
    config = {
        "uid": uid,
        "gid": gid,
        "groups": [int(g) for g in status["Groups"]],
        "rlimits": init_rlimits(init_pid),
        "oom_score_adj": int(Path(f"/proc/{init_pid}/oom_score_adj").read_text().strip()),
        "filter_len": filter_len,
    }
    return json.dumps(config).encode()


class EntryServer:
    """The entry server of one container. ``launch`` is called by one run at a time (one run per container)."""

    def __init__(self, *, nsenter: str, init_pid: int, procs_files: Sequence[Path], seccomp: bytes, name: str) -> None:
        self.tag = f"{TAG_PREFIX}{os.getpid()}-{name}-{secrets.token_hex(3)}"
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        procs: list[int] = []
        payload = b""
        try:
            procs = [os.open(p, os.O_WRONLY | os.O_CLOEXEC) for p in procs_files]
            program = guest_program("docker_entry_main.py")
            payload = program.stdin(_init_config(init_pid, len(seccomp)) + b"\n" + seccomp)
            argv = [
                nsenter, f"--target={init_pid}",
                "--mount", "--uts", "--ipc", "--net", "--cgroup", "--pid", "--no-fork", "--root", "--wd",
                "--", *program.argv(
                    ("/usr/bin/python3", *PYTHON_FLAGS), str(theirs.fileno()), self.tag, *(str(fd) for fd in procs)
                ),
            ]  # fmt: skip
            self._proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(), *procs),
                env=_HOST_ENV,
                cwd="/",
                close_fds=True,
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
            for fd in procs:
                os.close(fd)
        self._sock = ours
        try:
            if self._proc.stdin is None:
                raise SandboxError("entry server stdin missing")
            self._proc.stdin.write(payload)
            self._proc.stdin.close()
            ours.settimeout(_START_S)
            if ours.recv(16) != b"ready":
                raise SandboxError(f"entry server did not start (exit {self._proc.poll()})")
            ours.settimeout(None)
        except (OSError, SandboxError) as exc:
            self.close()
            raise SandboxError(f"entry server did not start: {exc}") from exc

    @property
    def pid(self) -> int:
        return self._proc.pid

    def alive(self) -> bool:
        return self._proc.poll() is None

    def launch(self, fds: Sequence[int]) -> None:
        """Hand one run's fds (spec, stdin, stdout, stderr, status) to the server; it forks the run."""
        self._sock.sendmsg([b"run"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array("i", fds))])

    def close(self) -> None:
        """EOF makes the server exit; it is killed if it has not within a second. Idempotent."""
        with contextlib.suppress(OSError):
            self._sock.close()
        try:
            self._proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                self._proc.send_signal(signal.SIGKILL)
            self._proc.wait()


#: Runs entered through the entry server: the clock runs from the start marker; setup (entering, writing the
#: files) gets its own small allowance.
ENTRY_DEADLINES = Deadlines(setup_s=5.0, drain_s=2.0, timeout_before_start=False)
