"""How a sandbox container is made: the docker create arguments (no network, a read-only root, no capability,
``no-new-privileges``, the seccomp profile, capped tmpfs work dirs, memory/cpu/pids limits, no logging) and its
idle init, the same for every container of a backend (pooled or one-shot)."""

from __future__ import annotations

import contextlib
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from schemas.errors import SandboxError
from workers.sandbox.api import SandboxSpec
from workers.sandbox.cgroups import split_for_sockets
from workers.sandbox.guest_program import PYTHON_FLAGS, guest_program

LABEL = "rewardstream.sandbox"
OWNER_LABEL = "rewardstream.sandbox.owner"
_MAX_LIFETIME_S = 3600
#: pid 1 of every container (the image's own python3, the one loader; the program on its stdin: ``start_init``):
#: it makes itself non-dumpable, then sleeps, so nothing a run does to it can reach the next run
#: (``guest.container_init``).
INIT = guest_program("container_init.py")
INIT_ARGV = list(INIT.argv(("/usr/bin/python3", *PYTHON_FLAGS), str(_MAX_LIFETIME_S)))
_INIT_READY_S = 10.0
#: The container's writable mounts (wiped after every run); /mnt for files at absolute paths (SandboxFusion's).
WRITABLE = ("/work", "/tmp", "/dev/shm", "/dev/mqueue", "/mnt")  # noqa: S108


@dataclass(frozen=True, slots=True)
class Limits:
    """What a pooled container is made for: its limits and its image (one warm pool per toolchain family)."""

    memory_mb: int
    pids: int
    cpus: float
    size_mb: int
    inodes: int
    image: str = ""

    @classmethod
    def of(cls, spec: SandboxSpec, image: str) -> Limits:
        return cls(spec.memory_mb, spec.pids_limit, spec.cpus, spec.workdir_size_mb, spec.workdir_inodes, image)


@dataclass(frozen=True, slots=True)
class ContainerConfig:
    """What every container of one backend is created with: its uid, seccomp profile, the host's cgroup
    version (v1: the memory limit is split with socket buffers), its owner label and default image."""

    uid: int
    seccomp: str
    v1_memory: bool
    owner: str
    image: str

    def create(
        self, api: Any, limits: Limits, command: list[str], env: dict[str, str], *, oneshot: bool = False
    ) -> str:
        """Create (not start) a locked-down container with its stdin open (``start_init`` or a one-shot run
        writes it); ``oneshot``: its command is the run."""
        uid = self.uid
        memory = limits.memory_mb << 20
        if self.v1_memory:  # the rest of the limit goes to socket buffers (see ``cgroups.split_for_sockets``)
            memory = split_for_sockets(memory)[0]
        tmpfs_opts = f"size={limits.size_mb}m,nr_inodes={limits.inodes},uid={uid},gid={uid},mode=0700,nosuid,nodev"
        # /work is exec, as on the process backend: a compiled program runs from there (docker's tmpfs
        # default is noexec). /tmp stays noexec.
        work_opts = tmpfs_opts + ",exec"
        host_config = api.create_host_config(
            network_mode="none",
            mem_limit=memory,
            memswap_limit=memory,
            nano_cpus=int(limits.cpus * 1e9),
            pids_limit=limits.pids,
            read_only=True,
            tmpfs={"/work": work_opts, "/tmp": tmpfs_opts, "/mnt": tmpfs_opts},  # noqa: S108
            shm_size=limits.size_mb << 20,
            cap_drop=["ALL"],
            security_opt=["no-new-privileges", f"seccomp={self.seccomp}"],
            # Nothing of the idle init may be logged (its stdout, /proc/1/fd/1, is out of a run's reach only
            # because it is not dumpable).
            log_config={"Type": "none", "Config": {}},
            # No docker-init: pid 1 is the idle ``INIT`` itself, which the sandbox uid cannot signal.
            init=False,
            ipc_mode="private",
            ulimits=[{"Name": "core", "Soft": 0, "Hard": 0}, {"Name": "nofile", "Soft": 1024, "Hard": 1024}],
            auto_remove=not oneshot,
        )
        created = api.create_container(
            limits.image or self.image,
            command=command,
            user=f"{self.uid}:{self.uid}",
            working_dir="/work",
            hostname="sandbox",
            network_disabled=True,
            labels={LABEL: "1", OWNER_LABEL: self.owner},
            environment=env,
            host_config=host_config,
            stdin_open=True,
        )
        return str(created["Id"])


def start_init(api: Any, cid: str) -> None:
    """Start a container whose command is ``INIT_ARGV`` and hand its init the program on stdin (the loader
    reads exactly that; the init holds its stdin open and never reads it again)."""
    sock = api.attach_socket(cid, params={"stdin": 1, "stream": 1})
    raw: socket.socket = sock._sock if hasattr(sock, "_sock") else sock
    try:
        api.start(cid)
        raw.sendall(INIT.stdin())
        raw.shutdown(socket.SHUT_WR)
    finally:
        with contextlib.suppress(OSError):
            raw.close()
        with contextlib.suppress(Exception):
            sock.close()


def await_non_dumpable(pid: int) -> None:
    """Wait until the container's init (host pid ``pid``) made itself non-dumpable; ``SandboxError`` if it does
    not (it exited, or is still dumpable after ``_INIT_READY_S``). Non-dumpable: its /proc files (all but the
    directory) are owned by root of its user namespace instead of by its euid."""
    end = time.monotonic() + _INIT_READY_S
    while True:
        try:
            status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
            state, euid = status["State"].split()[0], int(status["Uid"].split()[1])
            owner = os.stat(f"/proc/{pid}/mem").st_uid
        except (OSError, KeyError, ValueError, IndexError) as exc:
            raise SandboxError(f"the container's init is gone: {exc}") from exc
        if state in ("Z", "X"):
            raise SandboxError("the container's init exited")
        if owner != euid:
            return
        if time.monotonic() > end:
            raise SandboxError("the container's init did not make itself non-dumpable")
        time.sleep(0.002)
