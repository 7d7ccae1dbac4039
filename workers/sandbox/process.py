"""The ``process`` backend: bubblewrap namespaces + cgroups + rlimits + seccomp, no daemon needed.

A fork server (``fork_server``: a python3 started once per toolchain family under bubblewrap on the family's
read-only rootfs) forks a pristine sandbox per run (``forked_run``): its own cgroup, user/pid/net/mount/ipc/
uts/cgroup namespaces, capped tmpfs work dir, uid drop, no-new-privs and the seccomp filter
(``fork_server_main``). The grader's harness then runs without exec'ing anything. Everything is measured and
enforced by the parent: wall clock, cgroup CPU time and memory peak, output caps. This module holds the
backend's lifecycle: the rootfs binds, the fork servers, the audit of leftovers.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import secrets
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

from schemas.errors import SandboxError
from schemas.settings import PYTHON_TOOLCHAIN, Settings
from workers.sandbox.admission import Admission
from workers.sandbox.api import SandboxResult, SandboxSpec
from workers.sandbox.audit import pid_alive, poll_until_empty, processes_of_uid
from workers.sandbox.cgroups import GROUP_NAME, CgroupManager
from workers.sandbox.common import error_result
from workers.sandbox.error_kinds import CLOSED
from workers.sandbox.fleet_pace import FleetPace
from workers.sandbox.fork_server import HOST_ENV, ForkServer
from workers.sandbox.forked_run import BACKEND, run_forked
from workers.sandbox.mounts import Mounter, remove_tree
from workers.sandbox.seccomp import build_filter


def baked_toolchain_rootfs(settings: Settings, family: str) -> Path:
    """A toolchain family's tree as the platform baked it (``settings.toolchain_rootfs_path``); never built
    here: a worker runs no package manager. Missing is an infrastructure failure naming what to build."""
    path = settings.toolchain_rootfs_path(family)
    if not (path / "usr" / "bin").is_dir():
        raise SandboxError(
            f"no root filesystem for toolchain {family!r} at {path}: build it with "
            f"`rewardstream sandbox toolchains --build {family}` or set RS_SANDBOX_TOOLCHAINS_DIR"
        )
    return path


class ProcessSandbox:
    """Thread-safe; one instance serves many concurrent runs. ``close()`` removes its mounts."""

    name = BACKEND

    def __init__(
        self,
        settings: Settings,
        rootfs: Path,
        *,
        toolchains: Callable[[str], Path] | None = None,
        fleet: FleetPace | None = None,
    ) -> None:
        """``rootfs`` is the python family's tree; ``toolchains(family)`` gives another family's (by default
        the platform's baked tree from the settings), asked the first time a run names that family; ``fleet``
        the worker's share of the fleet's starts, if it has one."""
        bwrap = shutil.which("bwrap", path=HOST_ENV["PATH"])
        if bwrap is None:
            raise SandboxError("process sandbox needs bwrap (Debian: bubblewrap)")
        self._bwrap = bwrap
        if not (rootfs / "usr" / "bin" / "python3").exists():
            raise SandboxError(f"sandbox rootfs {rootfs} is incomplete (no /usr/bin/python3)")
        self._uid = settings.sandbox.uid
        self._admission = Admission.from_settings(settings, fleet)
        self._seccomp = build_filter()
        self._mounter = Mounter()
        self._cgroups = CgroupManager(settings.sandbox.cgroup_parent)
        self._lock = threading.Lock()
        self._active = 0
        self._closed = False
        self._counter = itertools.count()
        base = settings.sandbox.run_dir
        base.mkdir(parents=True, exist_ok=True)
        base.chmod(0o711)
        self.sweep_stale(base)
        self._dir = base / f"{os.getpid()}-{secrets.token_hex(4)}"
        self._rootfs = self._dir / "rootfs"
        try:
            for d in (self._dir, self._rootfs):
                d.mkdir(mode=0o711)
                d.chmod(0o711)
            self._mounter.bind_readonly(rootfs, self._rootfs)
        except (OSError, SandboxError) as exc:
            remove_tree(self._mounter, self._dir)
            raise SandboxError(f"cannot prepare {self._dir}: {exc}") from exc
        self._fork_server = ForkServer(bwrap=self._bwrap, rootfs=self._rootfs, uid=self._uid, seccomp=self._seccomp)
        self._toolchains = toolchains or functools.partial(baked_toolchain_rootfs, settings)
        self._family_lock = threading.Lock()
        #: One fork server per other toolchain family, started on the family's first run.
        self._family_servers: dict[str, ForkServer] = {}

    def sweep_stale(self, base: Path) -> int:
        """Remove mounts, dirs and cgroups left by workers that died (named ``<pid>-...``); return count."""
        removed = self._cgroups.sweep()
        for child in base.iterdir():
            owner = child.name.split("-", 1)[0]
            if owner.isdigit() and not pid_alive(int(owner)):
                remove_tree(self._mounter, child)
                removed += 1
        return removed

    @property
    def cgroup_parents(self) -> list[Path]:
        """Where run cgroups are created (tests check that nothing stays there)."""
        return self._cgroups.parents()

    @property
    def run_dir(self) -> Path:
        """This instance's host directory (the rootfs bind lives below it)."""
        return self._dir

    def audit(self, wait_s: float = 0.0) -> list[str]:
        """Leftovers of finished runs: run cgroups, sandbox-uid processes outside any sandbox."""
        return poll_until_empty(self._leftovers, wait_s)

    def _leftovers(self) -> list[str]:
        found: list[str] = []
        if self._active == 0:
            prefix = f"{os.getpid()}-"
            for parent in self._cgroups.parents():
                with contextlib.suppress(FileNotFoundError):
                    found += [f"cgroup {p}" for p in parent.iterdir() if p.is_dir() and p.name.startswith(prefix)]
        for proc in processes_of_uid(self._uid):
            if GROUP_NAME not in proc.cgroups and "docker" not in proc.cgroups:
                found.append(f"escaped process {proc.pid} ({proc.cmdline})")
        return found

    def close(self) -> None:
        """Unmount the rootfs bind and remove this instance's directory; idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            with self._family_lock:
                servers = [self._fork_server, *self._family_servers.values()]
                self._family_servers.clear()
            for server in servers:
                server.close()
        finally:
            remove_tree(self._mounter, self._dir)

    @property
    def fork_server_tag(self) -> str:
        """The argument that marks this instance's fork-server processes."""
        return self._fork_server.tag

    def run(self, spec: SandboxSpec) -> SandboxResult:
        """Run ``spec``; every failure of the machinery becomes a ``sandbox_error`` result."""
        t0 = time.monotonic()
        with self._lock:
            if self._closed:
                return error_result(self.name, CLOSED)
            self._active += 1
        try:
            with self._admission.admit():
                return self._run(spec)
        except (SandboxError, OSError, subprocess.SubprocessError, ValueError) as exc:
            return error_result(self.name, f"{type(exc).__name__}: {exc}", (time.monotonic() - t0) * 1e3)
        finally:
            with self._lock:
                self._active -= 1

    def _fork_server_for(self, family: str) -> ForkServer:
        """The fork server of toolchain ``family``: the python one, or one started on the family's own tree
        (bound read-only next to the python one) the first time a run names it."""
        if family == PYTHON_TOOLCHAIN:
            return self._fork_server
        with self._family_lock:
            if self._closed:
                raise SandboxError(CLOSED)
            server = self._family_servers.get(family)
            if server is not None:
                return server
            source = self._toolchains(family)
            if not (source / "usr" / "bin" / "python3").exists():
                raise SandboxError(f"toolchain {family!r} rootfs {source} is incomplete (no /usr/bin/python3)")
            target = self._dir / f"rootfs-{family}"
            target.mkdir(mode=0o711)
            target.chmod(0o711)
            self._mounter.bind_readonly(source, target)
            server = ForkServer(bwrap=self._bwrap, rootfs=target, uid=self._uid, seccomp=self._seccomp)
            self._family_servers[family] = server
            return server

    def _run(self, spec: SandboxSpec) -> SandboxResult:
        run_id = f"{os.getpid()}-{next(self._counter)}-{secrets.token_hex(3)}"
        return run_forked(spec, self._fork_server_for(spec.toolchain), self._cgroups, run_id)
