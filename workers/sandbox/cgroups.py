"""Per-run cgroups (v1 and v2, detected at runtime): limits, outside measurement, kill-all, removal.

Why cgroups and not rlimits alone: a cgroup bounds and measures the whole process tree (children, threads,
tmpfs pages) from outside, and lets the parent kill every process of a run even if it forked or daemonized.

Socket buffers: cgroup v2 charges them to ``memory.max`` with everything else. cgroup v1 charges TCP and UDP
buffers only to ``memory.kmem.tcp.*``, a counter of its own that is off (nothing charged anywhere) until its
limit is written; so on v1 the run's memory limit is split (``split_for_sockets``): the socket share is that
counter's limit and the rest is ``memory.limit_in_bytes``, and the run never holds more than its limit in all.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from guest.clock import WaitGain
from schemas.errors import SandboxError
from workers.sandbox.audit import pid_alive

#: A run's usage so far: (its CPU seconds, the largest run delay one of its threads gained since the last call).
Usage = Callable[[], tuple[float, float]]

_V1_CONTROLLERS = ("memory", "pids", "cpu", "cpuacct")
_V2_CONTROLLERS = ("memory", "pids", "cpu")
_CPU_PERIOD_US = 100_000
GROUP_NAME = "rewardstream-sandbox"


SOCKET_SHARE_DIVISOR = 16
SOCKET_SHARE_MIN = 4 << 20


def split_for_sockets(memory_bytes: int) -> tuple[int, int]:
    """cgroup v1: (limit for everything but socket buffers, limit for TCP/UDP socket buffers), summing to
    ``memory_bytes``. A sixteenth (at least 4 MiB, at most a quarter) is plenty for loopback servers."""
    share = min(max(memory_bytes // SOCKET_SHARE_DIVISOR, SOCKET_SHARE_MIN), memory_bytes // 4)
    return memory_bytes - share, share


def v1_memory_mounted() -> bool:
    """The memory controller is on a cgroup v1 hierarchy (docker's containers then get v1 limits too)."""
    v1, _ = cgroup_mounts()
    return "memory" in v1


@dataclass(frozen=True, slots=True)
class CgroupStats:
    """What a run consumed, read from the kernel's accounting."""

    cpu_ms: float
    memory_peak_bytes: int
    oom_kills: int
    pids_limit_hits: int


def _read(path: Path) -> str:
    return path.read_text(encoding="ascii")


def _write(path: Path, value: str) -> None:
    """Write one value to a cgroup file (open without truncation semantics that cgroupfs dislikes)."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, value.encode("ascii"))
    finally:
        os.close(fd)


def write_v1_socket_limit(memory_dir: Path, limit_bytes: int) -> None:
    """Cap (and so start charging) a v1 memory cgroup's TCP/UDP socket buffers. Only sockets created after
    this are charged: it must happen before anything of the run exists."""
    _write(memory_dir / "memory.kmem.tcp.limit_in_bytes", str(limit_bytes))


def _kv(text: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("-").isdigit():
            out[parts[0]] = int(parts[1])
    return out


def cgroup_mountinfo() -> tuple[list[tuple[list[str], Path]], Path | None]:
    """Every cgroup v1 mount (its super options: controllers, ``name=...``; its mount point) in mount order,
    and the first cgroup2 mount point (if any), from /proc/self/mountinfo."""
    v1: list[tuple[list[str], Path]] = []
    v2: Path | None = None
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fields, rfields = left.split(), right.split()
        if len(rfields) < 3:
            continue
        mount_point = Path(fields[4].replace("\\040", " "))
        if rfields[0] == "cgroup2" and v2 is None:
            v2 = mount_point
        elif rfields[0] == "cgroup":
            v1.append((rfields[2].split(","), mount_point))
    return v1, v2


def cgroup_mounts() -> tuple[dict[str, Path], Path | None]:
    """v1 mount point per controller (the first one), and the cgroup2 mount point (if any)."""
    v1: dict[str, Path] = {}
    mounts, v2 = cgroup_mountinfo()
    for opts, mount_point in mounts:
        for opt in opts:
            if opt in _V1_CONTROLLERS:
                v1.setdefault(opt, mount_point)
    return v1, v2


def _own_paths() -> dict[str, str]:
    """This process's cgroup path per v1 controller (and '' for the v2 unified hierarchy)."""
    out: dict[str, str] = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, ctrls, path = line.split(":", 2)
        if ctrls == "":
            out[""] = path
        for ctrl in ctrls.split(","):
            out[ctrl] = path
    return out


class CgroupManager:
    """Creates run cgroups under one parent directory per controller (or one for v2).

    The parent defaults to a ``rewardstream-sandbox`` child of this process's own cgroup, so nested limits
    (a container or VM memory cap) still apply and no write outside our delegated subtree is needed.
    """

    def __init__(self, parent: Path | None = None) -> None:
        v1, v2 = cgroup_mounts()
        own = _own_paths()
        if all(c in v1 for c in ("memory", "pids", "cpu")):
            self.version = 1
            self._parents = {
                ctrl: (
                    (mount / parent.relative_to("/")) if parent else mount / own.get(ctrl, "/").lstrip("/") / GROUP_NAME
                )
                for ctrl, mount in v1.items()
            }
            for path in self._parents.values():
                path.mkdir(parents=True, exist_ok=True)
            mem = self._parents["memory"]
            with contextlib.suppress(OSError):
                _write(mem / "memory.use_hierarchy", "1")
        elif v2 is not None:
            self.version = 2
            base = (v2 / parent.relative_to("/")) if parent else v2 / own.get("", "/").lstrip("/") / GROUP_NAME
            self._parents = {"": base}
            self._setup_v2(base)
        else:
            raise SandboxError("no usable cgroup hierarchy: need v1 memory+pids+cpu or cgroup2")

    @staticmethod
    def _setup_v2(base: Path) -> None:
        base.mkdir(parents=True, exist_ok=True)
        wanted = " ".join(f"+{c}" for c in _V2_CONTROLLERS)
        for directory in (base.parent, base):
            try:
                available = set(_read(directory / "cgroup.controllers").split())
                if not set(_V2_CONTROLLERS) <= available:
                    raise SandboxError(f"cgroup2 {directory} lacks controllers {_V2_CONTROLLERS}")
                _write(directory / "cgroup.subtree_control", wanted)
            except OSError as exc:
                raise SandboxError(
                    f"cannot enable cgroup2 controllers in {directory} ({exc.strerror}); set "
                    "RS_SANDBOX_CGROUP_PARENT to a delegated cgroup with no processes of its own"
                ) from exc

    def parents(self) -> list[Path]:
        """Every parent directory (one per v1 controller mount, one for v2)."""
        return sorted(set(self._parents.values()))

    def create(self, name: str, *, memory_bytes: int, pids: int, cpus: float) -> RunCgroup:
        """Create the run's cgroup(s) with limits applied; the caller must ``destroy()`` it."""
        dirs = sorted({p / name for p in self._parents.values()})
        group = RunCgroup(self.version, dirs, self._parents)
        try:
            for d in dirs:
                d.mkdir()
            group.apply_limits(memory_bytes=memory_bytes, pids=pids, cpus=cpus)
        except OSError as exc:
            group.destroy()
            raise SandboxError(f"cannot create cgroup {name}: {exc}") from exc
        return group

    def sweep(self) -> int:
        """Kill and remove run cgroups left by dead workers (name prefix ``<pid>-``); return how many."""
        removed = 0
        for parent in self.parents():
            if not parent.is_dir():
                continue
            for child in parent.iterdir():
                if not child.is_dir():
                    continue
                owner = child.name.split("-", 1)[0]
                if owner.isdigit() and not pid_alive(int(owner)):
                    RunCgroup(self.version, [child], self._parents).destroy()
                    removed += 1
        return removed


class RunCgroup:
    """One run's cgroup directories (several for v1, one for v2)."""

    def __init__(self, version: int, dirs: list[Path], parents: dict[str, Path]) -> None:
        self.version = version
        self.dirs = dirs
        self._by_ctrl = {ctrl: parent / dirs[0].name for ctrl, parent in parents.items()}

    def _file(self, ctrl: str, name: str) -> Path:
        return self._by_ctrl["" if self.version == 2 else ctrl] / name

    def procs_files(self) -> list[Path]:
        """The ``cgroup.procs`` files a new process must be written into."""
        return [d / "cgroup.procs" for d in self.dirs]

    def apply_limits(self, *, memory_bytes: int, pids: int, cpus: float) -> None:
        """Hard memory (no swap), pids and CPU-bandwidth limits."""
        quota = max(1000, int(cpus * _CPU_PERIOD_US))
        if self.version == 1:
            rest, sockets = split_for_sockets(memory_bytes)
            _write(self._file("memory", "memory.limit_in_bytes"), str(rest))
            memsw = self._file("memory", "memory.memsw.limit_in_bytes")
            if memsw.exists():
                _write(memsw, str(rest))
            write_v1_socket_limit(self._file("memory", ""), sockets)
            with contextlib.suppress(OSError):
                _write(self._file("memory", "memory.swappiness"), "0")
            _write(self._file("pids", "pids.max"), str(pids))
            _write(self._file("cpu", "cpu.cfs_period_us"), str(_CPU_PERIOD_US))
            _write(self._file("cpu", "cpu.cfs_quota_us"), str(quota))
        else:
            _write(self._file("", "memory.max"), str(memory_bytes))
            with contextlib.suppress(OSError):
                _write(self._file("", "memory.swap.max"), "0")
            _write(self._file("", "pids.max"), str(pids))
            _write(self._file("", "cpu.max"), f"{quota} {_CPU_PERIOD_US}")

    def stats(self) -> CgroupStats:
        """CPU time, peak memory, OOM kills and refused forks, as accounted by the kernel."""
        cg = self._by_ctrl
        return CgroupStats(cpu_ns(cg) / 1e6, peak_bytes(cg), oom_kills(cg), pids_limit_hits(cg))

    def usage(self) -> Usage:
        """The run's usage, for its time limit (``usage_of``)."""
        return usage_of(self._by_ctrl)

    def _members(self) -> set[int]:
        """What ``cgroup.procs`` lists. cgroup v2 lists a task whose pid is already released (it is exiting) as
        0, which ``kill`` would read as "my own process group": callers signal positive pids only."""
        found: set[int] = set()
        for d in self.dirs:
            with contextlib.suppress(FileNotFoundError):
                found.update(int(x) for x in _read(d / "cgroup.procs").split())
        return found

    def pids(self) -> list[int]:
        """Every live process still in the run's cgroup."""
        return sorted(pid for pid in self._members() if pid > 0)

    def kill_all(self, deadline_s: float = 5.0) -> bool:
        """SIGKILL every process in the cgroup until it is empty (exiting tasks gone too); True when empty."""
        kill_file = self._file("", "cgroup.kill") if self.version == 2 else None
        end = time.monotonic() + deadline_s
        while True:
            members = self._members()
            if not members:
                return True
            if kill_file is not None and kill_file.exists():
                with contextlib.suppress(OSError):
                    _write(kill_file, "1")
            for pid in members:
                if pid > 0:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
            if time.monotonic() > end:
                return False
            time.sleep(0.001)

    def destroy(self, deadline_s: float = 5.0) -> None:
        """Kill what is left and remove the directories; raise ``SandboxError`` if something stays."""
        self.kill_all(deadline_s)
        end = time.monotonic() + deadline_s
        for d in self.dirs:
            while True:
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError as exc:
                    if exc.errno != errno.EBUSY or time.monotonic() > end:
                        raise SandboxError(f"cannot remove cgroup {d}: {exc.strerror}") from exc
                    self.kill_all(0.1)
                    time.sleep(0.002)


# ---- figures of a cgroup given as its directory per v1 controller (or under '' for v2) --------------------
# A run cgroup's (strict: a file that cannot be read is an error) and a docker container's, read from the host
# (``lenient``: a container killed meanwhile takes its cgroup with it, and reads as 0).

CgroupDirs = Mapping[str, Path]


def cgroup_dirs_of(pid: int) -> dict[str, Path]:
    """Host cgroup directory per controller (v1) or under '' (v2) of process ``pid`` (a container's init)."""
    v1, v2 = cgroup_mounts()
    out: dict[str, Path] = {}
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, ctrls, path = line.split(":", 2)
        if ctrls == "" and v2 is not None:
            out[""] = v2 / path.lstrip("/")
        for ctrl in ctrls.split(","):
            if ctrl in v1:
                out[ctrl] = v1[ctrl] / path.lstrip("/")
    return out


def _v2(cg: CgroupDirs) -> Path:
    return cg.get("", Path("/nonexistent"))


def controller_dir(cg: CgroupDirs, controller: str) -> Path:
    """The directory of ``controller``'s files: its v1 hierarchy's, else the v2 one's."""
    return cg[controller] if controller in cg else _v2(cg)


def procs_file(cg: CgroupDirs) -> Path:
    """The ``cgroup.procs`` that lists every process of the cgroup (the pids controller's)."""
    return controller_dir(cg, "pids") / "cgroup.procs"


def listed_pids(procs: Path) -> list[int]:
    """The pids a ``cgroup.procs`` file lists; none once it is gone."""
    try:
        return [int(x) for x in procs.read_text().split()]
    except (OSError, ValueError):
        return []


def _number(path: Path, default: int | None) -> int:
    """The first number of a cgroup file; ``default`` if it cannot be read (``None``: raise)."""
    try:
        return int(_read(path).split()[0])
    except (OSError, ValueError, IndexError):
        if default is None:
            raise
        return default


def _flat_keyed(path: Path, lenient: bool) -> dict[str, int]:
    try:
        return _kv(_read(path))
    except OSError:
        if not lenient:
            raise
        return {}


def threads_file(cg: CgroupDirs) -> Path:
    """The file listing every thread of the cgroup (v1: the cpu controller's ``tasks``; v2: ``cgroup.threads``)."""
    return cg["cpu"] / "tasks" if "cpu" in cg else _v2(cg) / "cgroup.threads"


def usage_of(cg: CgroupDirs) -> Usage:
    """A run's usage from now on, for its time limit (``guest.clock``): the CPU seconds the cgroup used since
    this call, and the largest run delay one of its threads gained since the previous reading."""
    gain = WaitGain()
    threads = threads_file(cg)
    cpu0 = cpu_ns(cg, lenient=True)
    return lambda: (max(0, cpu_ns(cg, lenient=True) - cpu0) / 1e9, gain.read(listed_pids(threads)))


def pids_current(cg: CgroupDirs) -> int:
    """How many tasks the pids controller counts (zombies included); -1 if it cannot be read."""
    return _number(controller_dir(cg, "pids") / "pids.current", -1)


def cpu_ns(cg: CgroupDirs, *, lenient: bool = False) -> int:
    """CPU time used, in nanoseconds."""
    if "cpuacct" in cg:
        return _number(cg["cpuacct"] / "cpuacct.usage", 0 if lenient else None)
    return _flat_keyed(_v2(cg) / "cpu.stat", lenient).get("usage_usec", 0) * 1000


def oom_kills(cg: CgroupDirs, *, lenient: bool = False) -> int:
    """How many processes the OOM killer ended in the cgroup."""
    if "memory" in cg:
        return _flat_keyed(cg["memory"] / "memory.oom_control", lenient).get("oom_kill", 0)
    return _flat_keyed(_v2(cg) / "memory.events", lenient).get("oom_kill", 0)


def peak_bytes(cg: CgroupDirs, *, lenient: bool = False) -> int:
    """The memory peak (v2 before 5.19 has none: the current usage then)."""
    if "memory" in cg:
        return _number(cg["memory"] / "memory.max_usage_in_bytes", 0 if lenient else None)
    base = _v2(cg)
    if lenient:
        return _number(base / "memory.peak", _number(base / "memory.current", 0))
    peak = base / "memory.peak"
    return _number(peak if peak.exists() else base / "memory.current", None)


def pids_limit_hits(cg: CgroupDirs) -> int:
    """How many forks the pids limit refused."""
    return _kv(_read(controller_dir(cg, "pids") / "pids.events")).get("max", 0)


def reset_peak(cg: CgroupDirs) -> None:
    """Make the peak per run, not per container lifetime (v1: write 0; v2 >= 6.12: write resets)."""
    target = cg["memory"] / "memory.max_usage_in_bytes" if "memory" in cg else cg.get("", Path()) / "memory.peak"
    with contextlib.suppress(OSError):
        target.write_text("0")
