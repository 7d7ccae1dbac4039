"""The one output pump of every sandbox path that ends with a readable "exit" fd (a pidfd, a status pipe).

Pumps stdout/stderr into a ``Capture`` (caps, start marker) until the exit fd fires and the output drained,
the run's time limit stops it (``guest.clock.Limit``: its CPU time and its own time, read by the backend's
``usage``; never time it waited for a CPU) or output overflows. What differs between backends is only the
``Deadlines`` policy and where ``usage`` reads the run.
"""

from __future__ import annotations

import os
import select
import selectors
import time
from collections.abc import Callable
from dataclasses import dataclass

from guest.clock import HOST, Limit
from workers.sandbox.api import SandboxStatus
from workers.sandbox.capture import Capture
from workers.sandbox.cgroups import Usage

#: How often the host reads a run for its limit. Coarser than inside the sandbox (where the per-case limits are
#: enforced): one worker reads every run of its slots, and a tenth of a second past a limit is no verdict's.
HOST_EVERY_S = 0.1

_READ_CHUNK = 1 << 16


@dataclass(frozen=True, slots=True)
class Deadlines:
    """When a run is stopped for time. Once the start marker arrived, every backend applies the limit
    (``timeout_s``) from the program's start (the marker), not from the spawn.

    ``setup_s``: allowance on top of ``timeout_s`` from the spawn until the marker arrives.
    ``drain_s``: how long output may still arrive after the exit fd fired.
    ``timeout_before_start``: running out of time before the marker is reported as ``TIMEOUT`` (else as no
    stop reason at all: the caller turns a run that never started into a ``sandbox_error`` either way).
    """

    setup_s: float
    drain_s: float
    timeout_before_start: bool


@dataclass(slots=True)
class Observed:
    """What the worker saw of one run."""

    stopped_for: SandboxStatus | None = None
    exited: bool = False
    started_at: float | None = None
    ended_at: float | None = None
    #: The run's clock: its time limit's figures, and why it stopped the run (``HOST``: the host starved it,
    #: ``stopped_for`` is then ``SANDBOX_ERROR``).
    clock: RunClock | None = None

    def host_wait_ms(self) -> float:
        """How long the host kept the run waiting for a CPU."""
        return self.clock.host_wait_ms() if self.clock is not None else 0.0

    def contention(self) -> str | None:
        """Why the run says nothing about the program because the host starved it, or None."""
        return self.clock.contention() if self.clock is not None else None


def _take_waiting_marker(out_fd: int, cap: Capture) -> None:
    """stderr overflowed before the start marker was read from stdout. The marker is written (one write, less
    than a pipe buffer) before the program exists, so if the program wrote that stderr, its marker is waiting
    on stdout: take it now (only it, never more), without blocking, so that the overflow is the program's."""
    poller = select.poll()
    poller.register(out_fd, select.POLLIN)
    while cap.marker and cap.started_at is None and not cap.bad_start and poller.poll(0):
        chunk = os.read(out_fd, max(1, len(cap.marker) - len(cap.prefix)))
        if not chunk or not cap.feed("out", chunk):
            return


class _Watcher:
    """Calls ``watch`` at most every ``every_s``, and never for more than ``1 / COST_SHARE`` of the time: a
    call that took ``t`` seconds waits ``COST_SHARE * t`` before the next. Why: a worker pumps every slot's run
    in one process; on a slow or loaded host (an emulated guest, 8 runs at once) a fixed 10 ms poll of each
    run's sockets starved the runs' own pumps until honest programs timed out. ``None`` as ``watch``: never."""

    COST_SHARE = 20

    def __init__(self, watch: Callable[[], SandboxStatus | None] | None, every_s: float, first_at: float) -> None:
        self._watch = watch
        self._every_s = every_s
        self.next_at = first_at if watch is not None else float("inf")

    def poll(self, now: float) -> SandboxStatus | None:
        if self._watch is None or now < self.next_at:
            return None
        verdict = self._watch()
        took = time.monotonic() - now
        self.next_at = now + max(self._every_s, took * self.COST_SHARE)
        return verdict


class RunClock:
    """The run's time: before the start marker a plain deadline (setup is the sandbox's, not the program's),
    from it the run's ``Limit`` read every ``Limit.every_s`` through ``usage`` (without one: wall time only)."""

    def __init__(self, timeout_s: float, spawn_at: float, deadlines: Deadlines, usage: Usage | None) -> None:
        self.timeout_s = timeout_s
        self.deadlines = deadlines
        self.usage = usage
        self.deadline = spawn_at + timeout_s + deadlines.setup_s
        self.limit: Limit | None = None
        self.next_at = self.deadline

    def restart(self, spawn_at: float) -> None:
        """The run was spawned at ``spawn_at`` (not when this clock was made): its setup allowance runs from then."""
        self.deadline = spawn_at + self.timeout_s + self.deadlines.setup_s
        self.next_at = self.deadline

    def host_wait_ms(self) -> float:
        """How long the host kept the run waiting for a CPU."""
        return round(self.limit.host_wait_s * 1000, 3) if self.limit is not None else 0.0

    def contention(self) -> str | None:
        """Why the run says nothing about the program because the host starved it, or None."""
        lim = self.limit
        return lim.stop_text() if lim is not None and lim.reason == HOST else None

    def start(self, started_at: float) -> None:
        """The program started: its limit runs from now."""
        self.limit = Limit(self.timeout_s, started=started_at, every_s=HOST_EVERY_S)
        if self.usage is not None:
            self.usage()  # the baseline of the wait gains
        self.next_at = started_at

    def stop_reason(self, now: float) -> tuple[bool, SandboxStatus | None]:
        """Whether to stop the run now, and as what."""
        if self.limit is None:
            if now < self.deadline:
                return False, None
            return True, SandboxStatus.TIMEOUT if self.deadlines.timeout_before_start else None
        if now < self.next_at:
            return False, None
        cpu_s, gain_s = self.usage() if self.usage is not None else (0.0, 0.0)
        reason = self.limit.check(cpu_s, gain_s, now)
        self.next_at = now + self.limit.next_wait()
        if reason is None:
            return False, None
        return True, SandboxStatus.SANDBOX_ERROR if reason == HOST else SandboxStatus.TIMEOUT


def _stop_while_running(now: float, clock: RunClock, watcher: _Watcher) -> tuple[bool, SandboxStatus | None]:
    """Whether to stop a run that has not exited yet, and why (the watch's verdict, the clock)."""
    verdict = watcher.poll(now)
    if verdict is not None:
        return True, verdict
    return clock.stop_reason(now)


def pump(
    *,
    out_fd: int,
    err_fd: int,
    exit_fd: int,
    timeout_s: float,
    spawn_at: float,
    cap: Capture,
    deadlines: Deadlines,
    watch: Callable[[], SandboxStatus | None] | None = None,
    watch_every_s: float = 0.01,
    watch_first_s: float = 0.02,
    usage: Usage | None = None,
) -> Observed:
    """Pump output with caps until the exit fd fires (and the output is drained or ``drain_s`` passed), the
    time limit stops the run (``usage`` reads it; a run the host starved past the ceiling stops as
    ``SANDBOX_ERROR``, ``obs.contention()`` says why), output overflows or ``watch`` (called ``watch_first_s``
    after the spawn, then every ``watch_every_s`` while the run runs) returns a stop reason. ``ended_at`` is
    when the exit fd fired (else when the pump stopped); ``started_at`` is when the start marker arrived, if
    the loop got to see it."""
    clock = RunClock(timeout_s, spawn_at, deadlines, usage)
    obs = Observed(clock=clock)
    sel = selectors.DefaultSelector()
    try:
        sel.register(out_fd, selectors.EVENT_READ, "out")
        sel.register(err_fd, selectors.EVENT_READ, "err")
        sel.register(exit_fd, selectors.EVENT_READ, "exit")
        drain_until: float | None = None
        watcher = _Watcher(watch, watch_every_s, spawn_at + watch_first_s)
        while sel.get_map():
            now = time.monotonic()
            if drain_until is None:
                stop, obs.stopped_for = _stop_while_running(now, clock, watcher)
                if stop:
                    return obs
            wake = drain_until or min(clock.next_at, watcher.next_at)
            events = sel.select(max(0.0, wake - now))
            if not events and drain_until is not None and time.monotonic() >= drain_until:
                # Drained. Checked after a read, never before: a worker the host kept off the CPU past the
                # deadline (a busy host) still reads what the run wrote; it only stops waiting for more.
                return obs
            for key, _ in events:
                fd, which = int(key.fd), str(key.data)
                if which == "exit":
                    obs.ended_at = time.monotonic()
                    obs.exited = True
                    sel.unregister(fd)
                    drain_until = obs.ended_at + deadlines.drain_s
                    continue
                chunk = os.read(fd, _READ_CHUNK)
                if not chunk:
                    sel.unregister(fd)
                    continue
                within = cap.feed(which, chunk)
                if not within and which == "err":
                    _take_waiting_marker(out_fd, cap)
                if obs.started_at is None and cap.started_at is not None:
                    # The clock starts with the program, not the sandbox. Taken before an overflow returns:
                    # the marker and the program's first flood can come in one read.
                    obs.started_at = cap.started_at
                    clock.start(obs.started_at)
                if not within:
                    obs.stopped_for = None if cap.bad_start else SandboxStatus.OUTPUT_LIMIT
                    return obs
        return obs
    finally:
        sel.close()
        if obs.ended_at is None:
            obs.ended_at = time.monotonic()
