"""A program's output survives a busy host: what it wrote before it ended is read even when the reader got the
CPU back only after its drain deadline. The language step driver (a run's stdout is what io and call suites
compare) and the call harness's child pipes both drained with a deadline checked before reading; a reader kept
off the CPU past it returned with the output still in the pipes: a right program read as a wrong one.

The host's delay is a clock that jumps past the deadline right after the reader set it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from guest import child_pipes, driver
from guest.clock import ProcLimit

OUTPUT = b"inside\n" * 100


class LateClock:
    """``time`` as the reader sees it: ``late_after`` calls of ``monotonic`` from ``arm``, 10 s later than it is."""

    def __init__(self) -> None:
        self.calls_left: int | None = None

    def arm(self, late_after: int) -> None:
        self.calls_left = late_after

    def monotonic(self) -> float:
        if self.calls_left is None:
            return time.monotonic()
        self.calls_left -= 1
        return time.monotonic() + (10.0 if self.calls_left < 0 else 0.0)


@pytest.fixture
def ended_writer() -> Iterator[tuple[int, int, int]]:
    """(pid, stdout's read end, stderr's read end) of a program that wrote ``OUTPUT`` and ended (not reaped)."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    child = subprocess.Popen([sys.executable, "-c", f"import os; os.write(1, {OUTPUT!r})"], stdout=out_w, stderr=err_w)
    os.close(out_w)
    os.close(err_w)
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # ended, its output in the pipe, not reaped
    try:
        yield child.pid, out_r, err_r
    finally:
        child.wait()


def test_the_step_driver_reads_a_program_s_output_past_its_drain_deadline(
    ended_writer: tuple[int, int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    pid, out_r, err_r = ended_writer
    clock = LateClock()
    monkeypatch.setattr(driver, "time", clock)
    kill_group = driver._kill_group

    def ended(pid: int) -> None:  # the driver saw the program end; it sets its deadline, then waits for a CPU
        kill_group(pid)
        clock.arm(late_after=1)

    monkeypatch.setattr(driver, "_kill_group", ended)
    streams = driver.Streams(out_r, err_r, 1 << 20)
    try:
        assert driver._pump(pid, streams, ProcLimit(30.0)) is None
        assert bytes(streams.data[out_r]) == OUTPUT
    finally:
        streams.close()


def test_the_harness_reads_a_child_s_output_past_its_drain_deadline(
    ended_writer: tuple[int, int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    _pid, out_r, err_r = ended_writer
    clock = LateClock()
    clock.arm(late_after=1)  # ``finish`` sets its deadline, then waits for a CPU
    monkeypatch.setattr(child_pipes, "time", clock)
    capture = child_pipes.Capture(1 << 20)
    child_pipes.OutputPipes(capture, out_r, err_r).finish()
    assert (bytes(capture.kept[0]), capture.total) == (OUTPUT, [len(OUTPUT), 0])
