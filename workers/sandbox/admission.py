"""Admission: how many sandbox runs a host runs at once, and how fast it starts them.

Why: the field's most reported sandbox failure is a creation storm (hundreds of sandboxes started at once,
stuck starting, rewards timing out). A host here runs every sandbox of every worker process and CLI on it
through one pool of *slots*; a run that finds none free waits for one before it starts, and its limits never
count that wait (a run's clock starts with the program). Starts are paced host-wide (one every
``1 / starts_per_s`` seconds on average, with jitter), so a burst of runs begins over a short ramp instead of
in one instant.

How: each slot is a file under ``<run dir>/slots`` held with ``flock`` for the length of a run, so the pool is
shared by every process of the host and a process that dies gives its slots back (the kernel drops its
locks). The pacing is one more locked file holding the next start time on the host's monotonic clock.

A worker process may add its share of the fleet's start rate (``fleet_pace``): a run then starts only once it
has its slot, the host's pace and a fleet token, in that order, so that the start follows its token at once.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import struct
import time
from collections.abc import Iterator
from pathlib import Path

from schemas.errors import SandboxError
from schemas.settings import Settings
from workers.sandbox.fleet_pace import FleetPace

#: How many runs per core a host admits by default: a run uses at most one CPU (its quota) and spends part
#: of its time starting or waiting on I/O; more only makes every run wait for a CPU.
RUNS_PER_CORE = 2
#: Memory a run is assumed to need when sizing the default pool (the default run limit).
RUN_MEMORY_BYTES = 512 << 20
#: Starts per second per core by default (a start costs a few ms of host CPU).
STARTS_PER_CORE_S = 25.0
#: How long a run waiting for a slot sleeps between tries at most (with jitter): short, so that every waiter has
#: about the same chance at a slot that comes free.
_POLL_MAX_S = 0.01


def host_cores() -> int:
    """The CPUs this process may run on."""
    return len(os.sched_getaffinity(0)) or 1


def host_memory_bytes() -> int:
    """The host's memory (``MemTotal``); 0 if it cannot be read."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    return 0


def default_slots() -> int:
    """Runs the host can run at once without starving them: ``RUNS_PER_CORE`` per core, fewer if three
    quarters of the memory does not hold that many default runs."""
    by_cpu = RUNS_PER_CORE * host_cores()
    memory = host_memory_bytes()
    by_memory = (memory * 3 // 4) // RUN_MEMORY_BYTES if memory else by_cpu
    return max(1, min(by_cpu, by_memory))


class Admission:
    """The host's slots and start pacing, under ``directory`` (created if missing)."""

    @classmethod
    def from_settings(cls, settings: Settings, fleet: FleetPace | None = None) -> Admission:
        """The host's admission as the settings size it (``RS_SANDBOX_SLOTS``, ``RS_SANDBOX_START_RATE``),
        and ``fleet``, the worker's share of the fleet's starts, if it has one."""
        directory = settings.sandbox.slots_dir or settings.sandbox.run_dir / "slots"
        return cls(directory, settings.sandbox.slots, settings.sandbox.start_rate, fleet=fleet)

    def __init__(
        self, directory: Path, slots: int = 0, starts_per_s: float = 0.0, *, fleet: FleetPace | None = None
    ) -> None:
        self.fleet = fleet
        self.slots = slots if slots > 0 else default_slots()
        self.starts_per_s = starts_per_s if starts_per_s > 0 else STARTS_PER_CORE_S * host_cores()
        self.directory = directory
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SandboxError(
                f"cannot create the sandbox slots directory {directory} ({exc.strerror}): set RS_SANDBOX_SLOTS_DIR "
                "to a directory every worker of this host can write"
            ) from exc

    @contextlib.contextmanager
    def admit(self) -> Iterator[float]:
        """Hold one slot for the length of the ``with`` block, started at the host's pace and the fleet's (if
        any: a ``SandboxError`` when this worker may start nothing); yields how many seconds the run waited."""
        began = time.monotonic()
        fd = self._take_slot()
        try:
            self._pace()
            if self.fleet is not None:
                self.fleet.acquire()
            yield time.monotonic() - began
        finally:
            os.close(fd)  # closing the file drops its lock

    def _take_slot(self) -> int:
        """A locked slot file's fd: the first free slot from a random one on, else a short jittered sleep."""
        delay = 0.002
        while True:
            first = random.randrange(self.slots)  # noqa: S311 - spreading load, not crypto
            for i in range(self.slots):
                fd = os.open(self.directory / f"slot-{(first + i) % self.slots}", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    continue
                except OSError:
                    os.close(fd)
                    raise
                return fd
            time.sleep(delay * random.uniform(0.5, 1.5))  # noqa: S311
            delay = min(_POLL_MAX_S, delay * 2)

    def _pace(self) -> None:
        """Reserve the next start time on the host (one ``1 / starts_per_s`` apart on average, jittered) and
        sleep until it."""
        spacing = 1.0 / self.starts_per_s
        fd = os.open(self.directory / "pace", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            raw = os.pread(fd, 8, 0)
            now = time.monotonic()
            next_at = struct.unpack("<d", raw)[0] if len(raw) == 8 else 0.0
            mine = max(now, next_at) if next_at - now < 60 else now  # a stale or foreign value is not waited for
            os.pwrite(fd, struct.pack("<d", mine + spacing * random.uniform(0.5, 1.5)), 0)  # noqa: S311
        finally:
            os.close(fd)
        if mine > now:
            time.sleep(mine - now)
