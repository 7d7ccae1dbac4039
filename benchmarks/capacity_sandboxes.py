"""Many sandboxes at once on one host (issue 27): ``n`` process-backend sandboxes, each a program that sleeps,
all alive together, with no error, and the host memory each idle one costs.

A few worker-like processes each hold one backend instance (one fork server) and a thread per run that calls
``run``, as a worker's runner threads do (a worker takes at most 256 runs at once). The host's slots are sized
to ``n`` (a host admits two runs per core by default: right for CPU-bound grading, not for sleeping agents)
and starts are paced at the host's rate (``RS_SANDBOX_START_RATE``, 25 per core by default); every program
sleeps until one wall-clock time, so all end together however long the starts took.

Memory: ``MemAvailable`` from ``/proc/meminfo`` before the first start and at the moment most programs ran at
once, over that number (what the host lost per sandbox: the run's cgroup-charged pages, its supervisor, the
worker's thread and pipes, kernel objects, and the worker processes' own share); the run cgroups' own charge
is reported beside it. The machine is shared, so other processes move ``MemAvailable`` too: the cgroup figure
is the steadier one.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from schemas.settings import Settings
from workers.sandbox.admission import STARTS_PER_CORE_S, host_cores
from workers.sandbox.api import SandboxResult, SandboxSpec, SandboxStatus
from workers.sandbox.cgroups import CgroupManager
from workers.sandbox.factory import make_sandbox

MIB = 1 << 20


def meminfo(name: str) -> int:
    """A ``/proc/meminfo`` field in bytes."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith(f"{name}:"):
            return int(line.split()[1]) * 1024
    raise KeyError(name)


def sleeping_programs(uid: int) -> int:
    """Live ``sleep`` programs of the sandbox uid (every run's program, once it started)."""
    count = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if entry.stat().st_uid != uid:
                continue
            if (entry / "cmdline").read_bytes().split(b"\0", 1)[0] == b"sleep":
                count += 1
        except OSError:
            continue
    return count


def children_cpu_s() -> float:
    """CPU seconds (user + system) the live child processes of this one have used so far."""
    total = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    for task in Path("/proc/self/task").iterdir():
        try:
            pids = (task / "children").read_text().split()
        except OSError:
            continue
        for pid in pids:
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return total


def cgroup_bytes(parents: list[Path]) -> int:
    """What the run cgroups under ``parents`` are charged now (v1 ``memory.usage_in_bytes``, v2 ``memory.current``)."""
    total = 0
    for parent in parents:
        try:
            children = [c for c in parent.iterdir() if c.is_dir()]
        except OSError:
            continue
        for child in children:
            for name in ("memory.usage_in_bytes", "memory.current"):
                try:
                    total += int((child / name).read_text())
                    break
                except (OSError, ValueError):
                    continue
    return total


class Peak:
    """Samples, every ``every_s``, how many programs run and the host's memory, keeping the busiest moment."""

    def __init__(self, parents: list[Path], uid: int, want: int, every_s: float = 1.0) -> None:
        self.parents, self.uid, self.want, self.every_s = parents, uid, want, every_s
        self.running = 0
        self.available = 0
        self.cgroups = 0
        self.first_full_s: float | None = None
        #: (when, programs running, the worker processes' CPU seconds so far), every sample
        self.samples: list[tuple[float, int, float]] = []
        self.t0 = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop.wait(self.every_s):
            running = sleeping_programs(self.uid)
            self.samples.append((time.monotonic(), running, children_cpu_s()))
            if running >= self.running:
                self.running = running
                self.available = meminfo("MemAvailable")
                self.cgroups = cgroup_bytes(self.parents)
            if running >= self.want and self.first_full_s is None:
                self.first_full_s = time.monotonic() - self.t0

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def cpu_ms_per_s(self) -> float | None:
        """The worker processes' CPU per running sandbox (ms per second) while the most ran (95 % of the peak or
        more, over at least 3 s): what an idle sandbox costs its worker."""
        top = [s for s in self.samples if s[1] >= 0.95 * self.running]
        if len(top) < 2 or top[-1][0] - top[0][0] < 3.0:
            return None
        span = top[-1][0] - top[0][0]
        mean_running = sum(s[1] for s in top) / len(top)
        return round((top[-1][2] - top[0][2]) / span / mean_running * 1e3, 2)


def sleepers(n: int, until_epoch: int, slots: int, rate: float) -> list[str]:
    """In a worker-like process: ``n`` runs at once on one backend, each sleeping until ``until_epoch`` (wall
    clock: every program ends about together, however long the starts took); what went wrong with each."""
    settings = Settings(sandbox_slots=slots, sandbox_start_rate=rate)
    sandbox = make_sandbox(settings, "process")
    wait = f"t=$(({until_epoch} - $(date +%s))); [ $t -gt 0 ] && exec sleep $t; exit 0"
    spec = SandboxSpec(argv=("sh", "-c", wait), timeout_s=until_epoch - time.time() + 120, memory_mb=64, pids_limit=8)
    try:
        with ThreadPoolExecutor(n, thread_name_prefix="sleeper") as pool:
            results: list[SandboxResult] = list(pool.map(lambda _i: sandbox.run(spec), range(n)))
    finally:
        sandbox.close()
    return [f"{r.status.value}: {r.error}" for r in results if r.status != SandboxStatus.OK]


def concurrent_sandboxes(n: int, *, processes: int = 4, start_rate: float = 0.0, hold_s: float = 0.0) -> dict[str, Any]:
    """``n`` sleeping sandboxes at once, from ``processes`` worker-like processes (each one backend, ``n /
    processes`` runner threads): errors, how many ran together, the host memory per idle sandbox. Every program
    sleeps until ``hold_s`` after the first start (default 0.4 s per sandbox, at least 60 s): the starts are
    paced host-wide and each running sandbox costs its process a poll every 10 ms, so the ramp is slow."""
    rate = start_rate or STARTS_PER_CORE_S * host_cores()
    hold = hold_s or max(60.0, 0.4 * n)
    settings = Settings()
    parents = CgroupManager(settings.sandbox.cgroup_parent).parents()
    shares = [n // processes + (1 if i < n % processes else 0) for i in range(processes)]
    base_available = meminfo("MemAvailable")
    until = int(time.time() + hold)
    peak = Peak(parents, settings.sandbox.uid, n)
    started = time.monotonic()
    with ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("spawn")) as pool:
        failed = [e for errors in pool.map(sleepers, shares, [until] * processes, [n] * processes,
                                           [rate] * processes) for e in errors]  # fmt: skip
    elapsed = time.monotonic() - started
    peak.stop()
    running = max(peak.running, 1)
    return {
        "n": n,
        "errors": len(failed),
        "host_mb_per_sandbox": round((base_available - peak.available) / running / MIB, 2),
        "peak_running": peak.running,
        "all_running_after_s": None if peak.first_full_s is None else round(peak.first_full_s, 1),
        "processes": processes,
        "start_rate_per_s": rate,
        "hold_s": hold,
        "elapsed_s": round(elapsed, 1),
        "cgroup_mb_per_sandbox": round(peak.cgroups / running / MIB, 3),
        "worker_cpu_ms_per_s_per_sandbox": peak.cpu_ms_per_s(),
        "first_errors": sorted(set(failed))[:5],
    }
