"""The worker's output pump reads everything a run wrote before it ended, even when the worker got the CPU back
only after the drain deadline: the run's output (the harness's report) must not depend on the host's load. The
host's delay is a clock that jumps past the deadline right after the pump set it."""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator

import pytest

from workers.sandbox import output_pump
from workers.sandbox.capture import Capture
from workers.sandbox.output_pump import Deadlines, pump

#: More than one read (64 KiB) of output left in the pipe when the exit fd fires.
WRITTEN = bytes(range(256)) * 800


class LateClock:
    """``time`` as the pump sees it: from the ``late_after``-th ``monotonic`` call on, 10 s later than it is."""

    def __init__(self, late_after: int) -> None:
        self.calls = 0
        self.late_after = late_after

    def monotonic(self) -> float:
        self.calls += 1
        return time.monotonic() + (10.0 if self.calls >= self.late_after else 0.0)


@pytest.fixture
def ended_run() -> Iterator[tuple[int, int, int]]:
    """(stdout, stderr, exit) read ends of a run that wrote ``WRITTEN`` and ended (writers closed, status sent)."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    exit_r, exit_w = os.pipe()
    fcntl.fcntl(out_w, fcntl.F_SETPIPE_SZ, 1 << 20)  # room for it all before anyone reads
    os.write(out_w, WRITTEN)
    os.write(exit_w, (0).to_bytes(4, "big"))
    for fd in (out_w, err_w, exit_w):
        os.close(fd)
    try:
        yield out_r, err_r, exit_r
    finally:
        for fd in (out_r, err_r, exit_r):
            os.close(fd)


@pytest.mark.parametrize("drain_s", [0.0, 2.0])
def test_output_left_when_the_run_ended_is_read_past_the_drain_deadline(
    ended_run: tuple[int, int, int], monkeypatch: pytest.MonkeyPatch, drain_s: float
) -> None:
    out_r, err_r, exit_r = ended_run
    # call 1: the loop's first look; 2: when the exit fd fired (the deadline is set from it); then late
    monkeypatch.setattr(output_pump, "time", LateClock(late_after=3))
    cap = Capture(len(WRITTEN) * 2)
    obs = pump(out_fd=out_r, err_fd=err_r, exit_fd=exit_r, timeout_s=5.0, spawn_at=time.monotonic(), cap=cap,
               deadlines=Deadlines(setup_s=5.0, drain_s=drain_s, timeout_before_start=False))  # fmt: skip
    assert obs.exited
    assert bytes(cap.data["out"]) == WRITTEN


def test_a_writer_still_holding_the_pipe_costs_no_wait_past_the_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Something of the run still holds stdout after its exit fired: the pump keeps what came and returns at the
    deadline, not at the writer's end."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    exit_r, exit_w = os.pipe()
    try:
        os.write(out_w, b"partial")
        os.write(exit_w, (0).to_bytes(4, "big"))
        cap = Capture(1024)
        started = time.monotonic()
        obs = pump(out_fd=out_r, err_fd=err_r, exit_fd=exit_r, timeout_s=5.0, spawn_at=started, cap=cap,
                   deadlines=Deadlines(setup_s=5.0, drain_s=0.2, timeout_before_start=False))  # fmt: skip
        assert obs.exited
        assert time.monotonic() - started < 2.0
        assert bytes(cap.data["out"]) == b"partial"
    finally:
        for fd in (out_r, out_w, err_r, err_w, exit_r, exit_w):
            os.close(fd)
