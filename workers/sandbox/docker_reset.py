"""The host-side reset of a pooled container after a clean run: its run killed, its writable mounts emptied, its
SysV IPC removed and its init compared with its snapshot (``init_watch``), all from the host as root with no
docker API call and nothing inside the container taking part. A container that cannot be verified pristine
is discarded, never reused."""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from pathlib import Path

from workers.sandbox import init_watch
from workers.sandbox.audit import pid_alive
from workers.sandbox.cgroups import CgroupDirs, listed_pids, pids_current, procs_file
from workers.sandbox.docker_config import WRITABLE
from workers.sandbox.init_watch import InitSnapshot

_RESET_DEADLINE_S = 2.0


def host_reset(cg: CgroupDirs, init_pid: int, roots: dict[str, tuple[int, int, int]]) -> bool:
    """Reset a container after a clean run from the host; True only when verified pristine.

    1. SIGKILL every process of the container's cgroup but its init, through a pidfd opened and then checked
       to still be in that cgroup (a recycled pid can never make us signal a host process).
    2. Wait until the pids controller counts the init alone: a zombie (an orphan the idle init never reaps)
       holds a pid slot forever, so such a container is not reused.
    3. Empty /work, /tmp, /dev/shm, /dev/mqueue via ``/proc/<init>/root`` (``shutil.rmtree`` is symlink-attack
       safe; every process is dead by now, so nothing races the deletion) and verify they are empty.
    4. SysV IPC objects (they live in the container's IPC namespace) are removed; a container where any is
       left is not reused.
    """
    if init_pid <= 0 or not pid_alive(init_pid):
        return False
    procs = procs_file(cg)
    marker = str(procs.parent).split("/sys/fs/cgroup", 1)[-1].split("/", 2)[-1]
    end = time.monotonic() + _RESET_DEADLINE_S
    if not _kill_all_but(init_pid, procs, marker, end):
        return False
    while pids_current(cg) != 1:
        if time.monotonic() > end:
            return False
        time.sleep(0.001)
    return _wipe_writable(init_pid, roots) and pid_alive(init_pid) and not _sysv_ipc_left(init_pid)


def kill_run(cg: CgroupDirs, init_pid: int) -> None:
    """SIGKILL every process of the container but its init (a stopped run's tree, its supervisor included)."""
    procs = procs_file(cg)
    marker = str(procs.parent).split("/sys/fs/cgroup", 1)[-1].split("/", 2)[-1]
    _kill_all_but(init_pid, procs, marker, time.monotonic() + _RESET_DEADLINE_S)


def _kill_all_but(init_pid: int, procs: Path, marker: str, end: float) -> bool:
    """SIGKILL every process listed in ``procs`` except the init until none is left; False past ``end``."""
    while True:
        pids = [p for p in listed_pids(procs) if p != init_pid]
        if not pids:
            return True
        for pid in pids:
            _kill_in_cgroup(pid, marker)
        if time.monotonic() > end:
            return False
        time.sleep(0.001)


def mount_roots(init_pid: int) -> dict[str, tuple[int, int, int]]:
    """(mode, uid, gid) of each writable mount's root as the fresh container has it."""
    out: dict[str, tuple[int, int, int]] = {}
    for mount in WRITABLE:
        base = Path(f"/proc/{init_pid}/root") / mount.lstrip("/")
        if base.is_dir():
            st = base.stat()
            out[mount] = (st.st_mode & 0o7777, st.st_uid, st.st_gid)
    return out


def _wipe_writable(init_pid: int, roots: dict[str, tuple[int, int, int]]) -> bool:
    """Empty the container's writable mounts through its init's root and give their roots back the fresh
    container's mode, owner and no xattrs (a run may chmod or tag ``/work`` itself); True when verified."""
    root = Path(f"/proc/{init_pid}/root")
    for mount in WRITABLE:
        base = root / mount.lstrip("/")
        if not base.is_dir():
            if mount in roots:
                return False
            continue
        for entry in os.scandir(base):
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)
        if any(True for _ in os.scandir(base)):
            return False
        if mount not in roots:
            return False  # a writable mount the fresh container did not have
        mode, uid, gid = roots[mount]
        os.chown(base, uid, gid)
        os.chmod(base, mode)
        for name in os.listxattr(base):
            os.removexattr(base, name)
        st = base.stat()
        if (st.st_mode & 0o7777, st.st_uid, st.st_gid) != roots[mount] or os.listxattr(base):
            return False
    return True


def _kill_in_cgroup(pid: int, marker: str) -> None:
    """SIGKILL ``pid`` only if, once pinned by a pidfd, it is still a process of the container's cgroup."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return  # already gone
    try:
        if marker and marker in Path(f"/proc/{pid}/cgroup").read_text():
            signal.pidfd_send_signal(fd, signal.SIGKILL)
    except OSError:
        pass
    finally:
        os.close(fd)


_IPC_TABLES = ("/proc/sysvipc/shm", "/proc/sysvipc/sem", "/proc/sysvipc/msg")


def _sysv_ipc_left(init_pid: int) -> bool:
    """Remove every SysV object of the container's IPC namespace (from a thread that joins it; every process
    of the container but its idle init is dead by now, so nothing holds or recreates one); True if any is
    left or the namespace could not be checked."""
    found: list[bool] = []

    def look() -> None:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        own = os.open("/proc/thread-self/ns/ipc", os.O_RDONLY)
        theirs = os.open(f"/proc/{init_pid}/ns/ipc", os.O_RDONLY)
        try:
            if libc.setns(theirs, _CLONE_NEWIPC) != 0:
                found.append(True)  # cannot check: treat as dirty
                return
            try:
                for table, rmid in zip(_IPC_TABLES, (libc.shmctl, libc.semctl, libc.msgctl), strict=True):
                    for row in Path(table).read_text().splitlines()[1:]:
                        # shmctl(id, IPC_RMID, NULL) / semctl(id, 0, IPC_RMID) / msgctl(id, IPC_RMID, NULL)
                        ipc_id = int(row.split()[1])
                        if rmid is libc.semctl:
                            rmid(ipc_id, 0, _IPC_RMID)
                        else:
                            rmid(ipc_id, _IPC_RMID, None)
                found.append(any(len(Path(t).read_text().splitlines()) > 1 for t in _IPC_TABLES))
            finally:
                if libc.setns(own, _CLONE_NEWIPC) != 0:
                    found.append(True)
        finally:
            os.close(own)
            os.close(theirs)

    worker = threading.Thread(target=look, name="rs-docker-ipc-check", daemon=True)
    worker.start()
    worker.join(timeout=5)
    return not found or any(found)


_CLONE_NEWIPC = 0x08000000
_IPC_RMID = 0


def reset_and_verify(
    cg: CgroupDirs, init_pid: int, roots: dict[str, tuple[int, int, int]], init: InitSnapshot | None
) -> bool:
    """Kill every process but the init, wipe writable mounts; True only if verified clean (host side) and the
    init is exactly as when the container joined the pool."""
    try:
        clean = host_reset(cg, init_pid, roots)
    except Exception:
        return False
    return clean and init is not None and init_watch.unchanged(init_pid, init)
