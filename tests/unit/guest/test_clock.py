"""The time limit that measures the program, not the host (``guest/clock.py``).

The decisions are pure arithmetic over readings, tested with made-up readings; the readings themselves come
from ``/proc``, tested on real processes of our own (a busy loop, a sleeper: never candidate code).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from guest.clock import (
    CEILING_FACTOR,
    CEILING_SLACK_S,
    CPU,
    HOST,
    IDLE,
    Limit,
    ProcUsage,
    WaitGain,
    proc_cpu_s,
    run_delay_s,
)


def _feed(limit: Limit, steps: list[tuple[float, float, float]]) -> str | None:
    """Feed (seconds elapsed, cpu seconds so far, wait gained in the step) readings; the last verdict."""
    now = limit.started
    reason = None
    for dt, cpu, gain in steps:
        now += dt
        reason = limit.check(cpu, gain, now)
        if reason is not None:
            return reason
    return reason


def test_a_busy_program_stops_on_its_cpu_time() -> None:
    limit = Limit(2.0, started=0.0)
    steps = [(0.1, 0.1 * (i + 1), 0.0) for i in range(25)]
    assert _feed(limit, steps) == CPU
    assert limit.cpu_s >= 2.0


def test_a_sleeper_stops_on_its_own_time() -> None:
    limit = Limit(2.0, started=0.0)
    assert _feed(limit, [(0.1, 0.0, 0.0)] * 25) == IDLE
    assert limit.stop_text() == "timeout: past its 2 s limit (0.0 s of CPU, 2.0 s not running)"
    assert 2.0 < limit.wall_s <= 2.1


def test_waiting_for_a_cpu_does_not_count() -> None:
    """A third of a CPU: 1.5 s of CPU takes 4.5 s, 3 s of it waiting; a 2 s limit is not reached."""
    limit = Limit(2.0, started=0.0)
    steps = [(0.3, 0.1 * (i + 1), 0.2) for i in range(15)]
    assert _feed(limit, steps) is None
    assert limit.wall_s == pytest.approx(4.5)
    assert limit.own_s() == pytest.approx(1.5)
    assert limit.figures() == {"cpu_ms": pytest.approx(1500.0), "wait_ms": pytest.approx(3000.0)}


def test_a_starved_run_past_the_ceiling_is_the_host() -> None:
    limit = Limit(1.0, started=0.0)
    ceiling = 1.0 * CEILING_FACTOR + CEILING_SLACK_S
    steps = [(0.5, 0.01 * (i + 1), 0.49) for i in range(int(ceiling / 0.5) + 2)]
    assert _feed(limit, steps) == HOST
    assert limit.wall_s > ceiling
    assert limit.cpu_s < 1.0


def test_a_gain_is_never_more_than_the_time_that_passed() -> None:
    """A thread cannot have waited longer than the interval: a bogus reading credits at most the interval."""
    limit = Limit(5.0, started=0.0)
    limit.check(0.0, 100.0, now=1.0)
    assert limit.host_wait_s == pytest.approx(1.0)


@given(
    st.lists(
        st.tuples(
            st.floats(min_value=0.001, max_value=0.2),  # interval
            st.floats(min_value=0.0, max_value=1.0),  # share of it the run's own threads fill every core
            st.floats(min_value=0.0, max_value=1.0),  # share of it the run sleeps
        ),
        min_size=1,
        max_size=400,
    )
)
def test_a_program_cannot_wait_for_itself_to_the_ceiling(steps: list[tuple[float, float, float]]) -> None:
    """Self-contention: to keep one of its threads waiting with no one else on the host, a run must fill every
    CPU (two here) with its own threads for as long; then it uses CPU for it. Whatever the pattern, its CPU
    time or its own time reaches the limit before the ceiling: it is stopped as a timeout, never blamed on the
    host (which would withhold its 0)."""
    cores = 2
    limit = Limit(1.0, started=0.0)
    now, cpu = 0.0, 0.0
    for dt, busy, sleep in steps:
        burn = dt * busy * (1 - sleep)
        now += dt
        cpu += cores * burn  # every core busy with its threads while one of them waits
        reason = limit.check(cpu, burn, now)
        assert reason != HOST
        if reason is not None:
            break
    assert max(limit.cpu_s, limit.own_s()) >= min(limit.wall_s, limit.ceiling_s) / 2 - 1e-9


@pytest.fixture
def child() -> Iterator[subprocess.Popen[bytes]]:
    """A process of our own in a session of its own that burns CPU for a while."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time\nend = time.monotonic() + 30\nwhile time.monotonic() < end: pass"],
        start_new_session=True,
    )
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def test_readings_of_a_real_process(child: subprocess.Popen[bytes]) -> None:
    """On the host ``/proc`` shows every process: the busy child's CPU is among what is read."""
    usage = ProcUsage()
    deadline = time.monotonic() + 20
    cpu = 0.0
    while cpu < 0.3 and time.monotonic() < deadline:
        time.sleep(0.05)
        cpu, _gain = usage.sample()
    assert cpu >= 0.3
    used = proc_cpu_s(child.pid)
    assert used is not None
    assert used > 0
    assert run_delay_s(child.pid) is not None
    assert proc_cpu_s(2**22 + 1) is None  # past pid_max: no such process
    assert run_delay_s(2**22 + 1) is None


def test_wait_gain_keeps_per_thread_deltas() -> None:
    gain = WaitGain()
    me = os.getpid()
    assert gain.read([me]) >= 0.0
    assert gain.read([me]) >= 0.0
    assert gain.read([]) == 0.0  # a thread that is gone adds nothing
