"""The docker backend's warm pool: started containers per ``Limits`` (limits and image, so one pool per toolchain
family), each with its entry server when it can have one; taken by one run at a time, then reset and verified
from the host in background (``docker_reset``) or discarded and replaced."""

from __future__ import annotations

import contextlib
import queue
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workers.sandbox import init_watch
from workers.sandbox.audit import pid_alive
from workers.sandbox.cgroups import cgroup_dirs_of, split_for_sockets, write_v1_socket_limit
from workers.sandbox.docker_config import (
    INIT_ARGV,
    LABEL,
    OWNER_LABEL,
    ContainerConfig,
    Limits,
    await_non_dumpable,
    start_init,
)
from workers.sandbox.docker_entry import EntryServer, cgroup_procs_files, same_user_namespace
from workers.sandbox.docker_reset import mount_roots, reset_and_verify
from workers.sandbox.init_watch import InitSnapshot
from workers.sandbox.seccomp import build_filter


@dataclass(slots=True)
class Container:
    """A container of the pool as the host knows it."""

    cid: str
    limits: Limits
    cgroup: dict[str, Path]  # its cgroup directories (``cgroups.cgroup_dirs_of``)
    init_pid: int = 0
    runs: int = 0
    entry: EntryServer | None = None
    init: InitSnapshot | None = None  # the settled init as the host saw it when the container joined the pool
    roots: dict[str, tuple[int, int, int]] = field(default_factory=dict)  # writable mount -> (mode, uid, gid)


class WarmPool:
    """Thread-safe; ``size=0`` is the naive mode (a new container per run, never reused). ``nsenter``: runs
    enter pooled containers through entry servers (else ``docker exec``)."""

    def __init__(self, api: Any, config: ContainerConfig, size: int, nsenter: str | None) -> None:
        self._api = api
        self._config = config
        self.size = size
        self._pools: dict[Limits, queue.Queue[Container]] = {}
        self._lock = threading.Lock()
        self._closed = False
        self._busy: set[str] = set()
        self._nsenter = nsenter
        self._filter = build_filter() if nsenter else b""
        self._entries: dict[str, EntryServer] = {}
        self._bg = ThreadPoolExecutor(max_workers=4, thread_name_prefix="rs-docker-pool")
        self.sweep_stale()

    @property
    def closed(self) -> bool:
        return self._closed

    def sweep_stale(self) -> int:
        """Remove sandbox containers whose owning worker process on this host is gone."""
        host = socket.gethostname()
        removed = 0
        for c in self._api.containers(all=True, filters={"label": LABEL}):
            owner = c.get("Labels", {}).get(OWNER_LABEL, "")
            parts = owner.split(":")
            if len(parts) >= 2 and parts[0] == host and parts[1].isdigit() and not pid_alive(int(parts[1])):
                with contextlib.suppress(Exception):
                    self._api.remove_container(c["Id"], force=True)
                    removed += 1
        return removed

    def create(self, limits: Limits) -> Container:
        """A new started container for ``limits``, its init settled and its entry server (if any) ready."""
        cid = self._config.create(self._api, limits, INIT_ARGV, {})
        try:
            start_init(self._api, cid)
            info = self._api.inspect_container(cid)
            pid = int(info["State"]["Pid"])
            await_non_dumpable(pid)
            container = Container(cid, limits, cgroup_dirs_of(pid), pid, roots=mount_roots(pid))
            if self._config.v1_memory:  # before any run: only sockets created after it are charged
                write_v1_socket_limit(container.cgroup["memory"], split_for_sockets(limits.memory_mb << 20)[1])
            labelled = info.get("AppArmorProfile") not in (None, "", "unconfined") or bool(info.get("ProcessLabel"))
            if self._nsenter and not labelled and same_user_namespace(pid):
                container.entry = EntryServer(
                    nsenter=self._nsenter,
                    init_pid=pid,
                    procs_files=cgroup_procs_files(pid),
                    seccomp=self._filter,
                    name=cid[:12],
                )
                with self._lock:
                    self._entries[cid] = container.entry
                container.init = init_watch.snapshot(pid)  # the entry server is ready: the init has settled
            return container
        except Exception:
            self.remove(cid)
            raise

    def remove(self, cid: str) -> None:
        """Stop the container's entry server (if any), then remove the container."""
        with self._lock:
            entry = self._entries.pop(cid, None)
        if entry is not None:
            entry.close()
        with contextlib.suppress(Exception):
            self._api.remove_container(cid, force=True)

    def _pool(self, limits: Limits) -> queue.Queue[Container]:
        with self._lock:
            pool = self._pools.get(limits)
            if pool is None:
                pool = self._pools[limits] = queue.Queue()
                for _ in range(self.size):
                    self._bg.submit(self._refill, limits)
            return pool

    def _refill(self, limits: Limits) -> None:
        if self._closed:
            return
        try:
            container = self.create(limits)
        except Exception:  # the next acquire creates one synchronously and reports the error
            return
        if self._closed:
            self.remove(container.cid)
            return
        self._pools[limits].put(container)

    def acquire(self, limits: Limits) -> Container:
        """A pristine container for ``limits``, busy until ``release``: a pooled one, else a new one."""
        container = self._take(limits)
        with self._lock:
            self._busy.add(container.cid)
        return container

    def _take(self, limits: Limits) -> Container:
        if self.size <= 0:
            return self.create(limits)
        pool = self._pool(limits)
        while True:
            try:
                container = pool.get_nowait()
            except queue.Empty:
                return self.create(limits)
            if container.entry is None or container.entry.alive():
                return container
            self.release(container, reusable=False)  # its entry server is gone: replace the container

    def release(self, container: Container, reusable: bool) -> None:
        """Return the container off the caller's critical path: reset+verify (or replace) in background."""
        try:
            self._bg.submit(self._recycle, container, reusable)
        except RuntimeError:  # executor shut down by close()
            self.remove(container.cid)

    def _recycle(self, container: Container, reusable: bool) -> None:
        try:
            pool = self._pools.get(container.limits)
            if reusable and pool is not None and not self._closed and self._reset(container):
                pool.put(container)
                return
            self.remove(container.cid)
            if pool is not None and not self._closed:
                self._refill(container.limits)
        finally:
            with self._lock:
                self._busy.discard(container.cid)

    @staticmethod
    def _reset(container: Container) -> bool:
        """Reset and verify from the host (``docker_reset``); True only if the container is pristine."""
        return reset_and_verify(container.cgroup, container.init_pid, container.roots, container.init)

    def remove_soon(self, cid: str) -> None:
        """Remove a container off the caller's critical path (inline once the pool is closed)."""
        try:
            self._bg.submit(self.remove, cid)
        except RuntimeError:
            self.remove(cid)

    def close(self) -> None:
        """Remove every container this instance created; idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._bg.shutdown(wait=True)
        for pool in self._pools.values():
            while True:
                try:
                    self.remove(pool.get_nowait().cid)
                except queue.Empty:
                    break
        for c in self._api.containers(all=True, filters={"label": f"{OWNER_LABEL}={self._config.owner}"}):
            self.remove(c["Id"])
        for cid in list(self._entries):
            self.remove(cid)

    def leftovers(self) -> list[str]:
        """Containers of ours neither pooled nor busy, extra processes in pooled ones, dead entry servers."""
        with self._lock:
            pooled = {c.cid for pool in self._pools.values() for c in list(pool.queue)}
            busy = set(self._busy)
        found: list[str] = []
        with self._lock:
            entries = dict(self._entries)
        for cid, entry in entries.items():
            if cid not in pooled and cid not in busy:
                found.append(
                    f"entry server {entry.pid} of container {cid[:12]} ({'alive' if entry.alive() else 'exited'})"
                )
            elif not entry.alive():
                found.append(f"entry server {entry.pid} of pooled container {cid[:12]} is dead")
        for c in self._api.containers(all=True, filters={"label": f"{OWNER_LABEL}={self._config.owner}"}):
            if c["Id"] in busy:
                continue
            if c["Id"] not in pooled:
                found.append(f"container {c['Id'][:12]} ({c['State']})")
                continue
            top = self._api.top(c["Id"]).get("Processes") or []
            if len(top) > 1:  # only the idle init
                found.append(f"container {c['Id'][:12]} has {len(top)} processes")
        return found
