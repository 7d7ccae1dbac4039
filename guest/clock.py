"""A time limit that measures the program, not the host: its CPU time and its own time, never the time it spent
waiting for a CPU that the host gave to someone else.

Why: production hosts run full on purpose. A wall-clock limit kills a correct program whose CPU share a busy
host cut to a third (a JIT runtime's start-up is the usual victim) and scores it 0. So a limit of ``L`` seconds
stops a run when

* its CPU time passes ``L`` (``"cpu"``: the program's doing), or
* its *own time* passes ``L`` (``"idle"``: it slept or blocked; a sleeper is stopped too). Own time is the wall
  clock minus the time the run was kept waiting for a CPU (``host_wait``).

If the wall clock passes ``CEILING_FACTOR * L`` (plus ``CEILING_SLACK_S``) while both are still within ``L``,
the host starved the run (``"host"``): the caller repeats it or withholds it as an infrastructure failure,
never a verdict on the program.

How waiting is read: ``/proc/<tid>/schedstat``'s second field is a thread's run delay, the time it spent
runnable on a run queue (CPU-quota throttling included). The run is sampled every ``every_s``; over each
interval, ``host_wait`` grows by the largest run delay any one of its threads gained, never by a sum over
threads. Why the largest and not the sum: a program cannot wait for itself. To keep one thread of its own
waiting, a run has to fill every CPU with its other threads or use up its CPU quota, which its CPU time counts;
so a run without a busy host never gets more than half of its wall time credited, and cannot reach the
ceiling. The sum would credit a program that only makes its own threads queue behind each other. What this
misses (a process that lived and died between two samples) counts as the run's own time: a run made of many
very short processes on a starved host is credited less than it waited.

This works the same on cgroup v1 and v2, on the host (the run cgroup's threads; CPU time from the cgroup) and
inside a sandbox (the in-sandbox program and every process it started, whatever session it moved to: a process
that escapes a case's process group still counts against the case it runs in; CPU time from
``/proc/<pid>/stat``).

Guest code: standard library only, and no ``from __future__`` import (it is spliced in after the host
program's). The in-sandbox programs (the grading harness, the language driver, the episode step runner) get
this module's source in place of their import of it (``workers.sandbox.guest_source``); the host's output
pump imports it as a module.
"""

import os
import time

#: Clock ticks of ``/proc/<pid>/stat``'s CPU times.
TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")
#: A run may take this many times its limit in wall time while it waits for a CPU; past it, the host is blamed.
CEILING_FACTOR = 10.0
#: The wall time always allowed on top of the ceiling (a short limit on a host that takes seconds to fork).
CEILING_SLACK_S = 5.0
#: How often a run is sampled (and its limit checked).
EVERY_S = 0.025

#: Why a run was stopped for time: its CPU time, its own time (it slept), or the host starved it.
CPU = "cpu"
IDLE = "idle"
HOST = "host"
#: How every part of the sandbox begins the error of a run the host starved: never the program's doing.
CONTENTION = "host contention"


def run_delay_s(tid: int) -> float | None:
    """The scheduler's run delay of thread ``tid`` (seconds runnable but not running), None once it is gone."""
    try:
        with open(f"/proc/{tid}/schedstat", "rb") as f:
            fields = f.read().split()
        return int(fields[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None


def stat_fields(pid: int) -> list[bytes] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (``[0]`` is the state, ``[1]`` the parent's
    pid), None once the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: the fields after it follow the last ')'.
    return data[data.rfind(b")") + 2 :].split()


def cpu_of(fields: list[bytes]) -> float | None:
    """CPU seconds of a process and of the children it reaped, from its ``stat_fields``."""
    try:
        return (int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])) * TICK_S
    except (IndexError, ValueError):
        return None


def proc_cpu_s(pid: int) -> float | None:
    """CPU seconds of process ``pid`` and of the children it reaped; None once it is gone."""
    fields = stat_fields(pid)
    return None if fields is None else cpu_of(fields)


def run_tree(root: int) -> dict[int, list[bytes]]:
    """``root`` and every process descended from it, each with its ``stat_fields``.

    Why descendants and not every process ``/proc`` shows: inside a sandbox the two are the same, but a program
    run anywhere else (a test runs the harness on the host) must never count, or kill, what is not its own.
    A descendant that leaves its session or whose parent dies stays one as long as ``root`` is the run's child
    subreaper (``become_subreaper``): orphans are reparented to it, not to pid 1."""
    try:
        names = os.listdir("/proc")
    except OSError:
        names = []
    stats: dict[int, list[bytes]] = {}
    children: dict[int, list[int]] = {}
    for name in names:
        if not name.isdigit():
            continue
        fields = stat_fields(int(name))
        if fields is None or len(fields) < 2 or not fields[1].isdigit():
            continue
        stats[int(name)] = fields
        children.setdefault(int(fields[1]), []).append(int(name))
    tree: dict[int, list[bytes]] = {}
    todo = [root] if root in stats else []
    while todo:
        pid = todo.pop()
        if pid not in tree:
            tree[pid] = stats[pid]
            todo += children.get(pid, [])
    return tree


def threads_of(pid: int) -> list[int]:
    """The thread ids of process ``pid`` (none once it is gone)."""
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except (OSError, ValueError):
        return []


class WaitGain:
    """The largest run delay any one thread gained since the last reading (see the module docstring)."""

    def __init__(self) -> None:
        self.last: dict[int, float] = {}

    def read(self, tids: list[int]) -> float:
        """Read ``tids`` now; the largest gain since the previous reading (a new thread: since it started)."""
        gain = 0.0
        now: dict[int, float] = {}
        for tid in tids:
            delay = run_delay_s(tid)
            if delay is None:
                continue
            now[tid] = delay
            gain = max(gain, delay - self.last.get(tid, 0.0))
        self.last = now
        return gain


class ProcUsage:
    """CPU time and run delay of this process and all it started (``run_tree``): the in-sandbox program, the
    candidate's processes, whatever they started. The CPU of a process that died is in the figure of
    whichever process of the tree reaped it; the total never goes down."""

    def __init__(self, root: int | None = None) -> None:
        self.root = os.getpid() if root is None else root
        self.gain = WaitGain()
        self.cpu_s = 0.0
        self.base_cpu_s, _ = self._read()

    def _read(self) -> tuple[float, float]:
        cpu = 0.0
        tids: list[int] = []
        for pid, fields in run_tree(self.root).items():
            used = cpu_of(fields)
            if used is not None:
                cpu += used
                tids += threads_of(pid)
        return cpu, self.gain.read(tids)

    def sample(self) -> tuple[float, float]:
        """(CPU seconds since this object was made, the largest wait gain of a thread since the last sample)."""
        cpu, gain = self._read()
        self.cpu_s = max(self.cpu_s, cpu - self.base_cpu_s)
        return self.cpu_s, gain


class Limit:
    """A limit of ``limit_s`` on one run, started at ``started`` (``time.monotonic()``).

    Feed it readings: ``check(cpu_s, wait_gain_s)`` with the run's CPU time so far and the largest run delay
    one of its threads gained since the previous reading; it says whether to stop the run now and why (``CPU``,
    ``IDLE``, ``HOST``), or None. ``next_wait()`` is how long the caller may block before the next reading.
    """

    def __init__(
        self,
        limit_s: float,
        started: float | None = None,
        every_s: float = EVERY_S,
        ceiling_factor: float = CEILING_FACTOR,
    ) -> None:
        self.limit_s = float(limit_s)
        self.started = time.monotonic() if started is None else started
        self.every_s = every_s
        self.ceiling_s = self.limit_s * ceiling_factor + CEILING_SLACK_S
        self.cpu_s = 0.0
        self.host_wait_s = 0.0
        self.wall_s = 0.0
        self.reason: str | None = None

    def own_s(self) -> float:
        """The run's own time so far: wall time minus the time the host kept it waiting."""
        return self.wall_s - self.host_wait_s

    def check(self, cpu_s: float, wait_gain_s: float, now: float | None = None) -> str | None:
        """Record a reading; the reason to stop the run now, or None."""
        now = time.monotonic() if now is None else now
        wall = max(self.wall_s, now - self.started)
        self.host_wait_s += max(0.0, min(wait_gain_s, wall - self.wall_s))
        self.wall_s = wall
        self.cpu_s = max(self.cpu_s, cpu_s)
        own = self.own_s()
        if self.cpu_s > self.limit_s or (own > self.limit_s and self.cpu_s >= own / 2):
            self.reason = CPU  # a busy program's own time is its CPU time and a little: it ran out of CPU
        elif own > self.limit_s:
            self.reason = IDLE
        elif self.wall_s > self.ceiling_s:
            self.reason = HOST
        else:
            self.reason = None
        return self.reason

    def next_wait(self) -> float:
        """Seconds until the next reading is due: never past the point the limit could be reached."""
        room = self.limit_s - max(self.own_s(), self.cpu_s)
        return max(0.001, min(self.every_s, room))

    def stop_text(self) -> str:
        """Why the limit stopped the run, in words: a timeout (the program's), or host contention."""
        if self.reason == HOST:
            return f"{CONTENTION}: waited {self.host_wait_s:.1f} s for a CPU in {self.wall_s:.1f} s"
        asleep = max(0.0, self.own_s() - self.cpu_s)
        return f"timeout: past its {self.limit_s:g} s limit ({self.cpu_s:.1f} s of CPU, {asleep:.1f} s not running)"

    def figures(self) -> dict[str, float]:
        """What a record reports of the run: its CPU time and how long the host kept it waiting for a CPU."""
        return {"cpu_ms": round(self.cpu_s * 1000, 3), "wait_ms": round(self.host_wait_s * 1000, 3)}


class ProcLimit:
    """``Limit`` over the in-sandbox program and every process it started, read by ``ProcUsage``: the in-sandbox
    programs' form, one per case or step, from its start."""

    def __init__(self, limit_s: float) -> None:
        self.usage = ProcUsage()
        self.limit = Limit(limit_s)

    def poll(self) -> str | None:
        """Read the run now; the reason to stop, or None."""
        cpu, gain = self.usage.sample()
        return self.limit.check(cpu, gain)

    def next_wait(self) -> float:
        """How long the caller may block before ``poll`` is due."""
        return self.limit.next_wait()
