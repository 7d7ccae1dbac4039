"""Host-wide sandbox admission (``workers/sandbox/admission.py``): slots shared by every process of a host,
given back by a process that dies, and starts paced.

Real processes and real ``flock``s on a temporary directory: the slots are shared across processes, so that is
what is tested.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from schemas.settings import Settings
from workers.sandbox.admission import RUNS_PER_CORE, Admission, default_slots, host_cores


def _hold(directory: str, slots: int, ready: multiprocessing.synchronize.Event) -> None:
    """A process that takes one slot and keeps it until it is killed."""
    with Admission(Path(directory), slots, 1000.0).admit():
        ready.set()
        time.sleep(300)


def _start_holders(tmp_path: Path, count: int, slots: int) -> list[multiprocessing.context.ForkProcess]:
    ctx = multiprocessing.get_context("fork")
    holders = []
    for _ in range(count):
        ready = ctx.Event()
        proc = ctx.Process(target=_hold, args=(str(tmp_path), slots, ready), daemon=True)
        proc.start()
        assert ready.wait(30), "a holder never got its slot"
        holders.append(proc)
    return holders


def test_a_run_waits_for_a_slot_another_process_holds_and_gets_it_when_that_process_dies(tmp_path: Path) -> None:
    holders = _start_holders(tmp_path, 2, slots=2)
    try:
        admission = Admission(tmp_path, 2, 1000.0)
        killer_at = time.monotonic() + 0.5

        def kill_one_later() -> None:
            time.sleep(max(0.0, killer_at - time.monotonic()))
            os.kill(holders[0].pid or 0, signal.SIGKILL)  # a dead process's lock goes with it

        threading.Thread(target=kill_one_later, daemon=True).start()
        with admission.admit() as waited:
            assert waited >= 0.4
    finally:
        for proc in holders:
            proc.kill()
            proc.join(10)


def test_free_slots_are_taken_at_once(tmp_path: Path) -> None:
    holders = _start_holders(tmp_path, 1, slots=3)
    try:
        admission = Admission(tmp_path, 3, 1000.0)
        with admission.admit() as first, admission.admit() as second:
            assert first < 0.5
            assert second < 0.5
    finally:
        for proc in holders:
            proc.kill()
            proc.join(10)


class FakeClock:
    """The host's monotonic clock, advanced only by sleeping: what the pacing decides, without the scheduler's
    overshoot (a late wake-up on a busy machine moves one start, not the schedule)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += max(0.0, seconds)


def test_starts_are_paced_across_the_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    monkeypatch.setattr(time, "monotonic", clock.monotonic)  # the module's clock, for this test only
    monkeypatch.setattr(time, "sleep", clock.sleep)
    admission = Admission(tmp_path, 8, 20.0)  # 50 ms apart on average, jittered 25-75 ms
    started = []
    for _ in range(6):
        with admission.admit():
            started.append(clock.monotonic())
    gaps = [b - a for a, b in itertools.pairwise(started)]
    assert min(gaps) >= 0.025, gaps
    assert max(gaps) <= 0.075, gaps


def test_defaults_follow_the_host() -> None:
    assert 1 <= default_slots() <= RUNS_PER_CORE * host_cores()
    admission = Admission.from_settings(Settings(sandbox={"slots_dir": "/tmp/rs-admission-test"}))
    assert admission.slots == default_slots()
    assert admission.starts_per_s > 0


def test_an_unusable_directory_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(Exception, match="RS_SANDBOX_SLOTS_DIR"):
        Admission(blocker / "slots", 1, 1.0)
