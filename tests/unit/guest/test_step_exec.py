"""An agent step's output survives a busy host: what the command wrote is read even when the runner got the CPU
back only after its drain deadline (a sandbox test lost ``cat``'s output that way under CI's load: the step's
observation then depended on the host, not on the command)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest

from guest.step_exec import Pipes


@pytest.fixture
def pipes() -> Iterator[tuple[Pipes, int, int]]:
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    pipes = Pipes(1024, out_r, err_r)
    try:
        yield pipes, out_w, err_w
    finally:
        pipes.close()
        for fd in (out_w, err_w):
            try:  # noqa: SIM105 - closed by the test already
                os.close(fd)
            except OSError:
                pass


def test_output_already_written_is_read_past_the_deadline(pipes: tuple[Pipes, int, int]) -> None:
    reader, out_w, err_w = pipes
    os.write(out_w, b"inside\n")
    os.write(err_w, b"cat: l0: Too many levels of symbolic links\n")
    os.close(out_w)
    os.close(err_w)
    assert reader.pump(time.monotonic() - 5.0)  # the deadline passed while the runner waited for a CPU
    out_r, err_r = reader.fds
    assert bytes(reader.kept[out_r]) == b"inside\n"
    assert reader.total[err_r] == len(b"cat: l0: Too many levels of symbolic links\n")


def test_past_the_deadline_a_writer_still_open_ends_the_wait_not_the_read(pipes: tuple[Pipes, int, int]) -> None:
    """A writer that never closes (a process the sweep could not end) costs no wait past the deadline, and what it
    wrote before is kept."""
    reader, out_w, _err_w = pipes
    os.write(out_w, b"partial")
    started = time.monotonic()
    assert not reader.pump(time.monotonic() - 1.0)
    assert time.monotonic() - started < 1.0
    assert bytes(reader.kept[reader.fds[0]]) == b"partial"


def test_before_the_deadline_it_waits_for_the_end_of_output(pipes: tuple[Pipes, int, int]) -> None:
    reader, out_w, err_w = pipes
    os.write(out_w, b"x" * 4096)
    os.close(out_w)
    os.close(err_w)
    assert reader.pump(time.monotonic() + 5.0)
    out_r, _ = reader.fds
    assert (len(reader.kept[out_r]), reader.total[out_r]) == (1024, 4096)  # the first bytes kept, all counted
