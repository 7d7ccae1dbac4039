"""Agent-step hacks on the runner and its resources: leftover processes, signals, disk, inodes, forks, memory."""

from __future__ import annotations

import time

import pytest

from schemas.status import REJECTED, SandboxStatus
from tests.sandbox.episode_step_env import CAPS, LIMITS, members, sh, snapshot, step
from workers.episodes.step import StepAction, StepLimits, run_step
from workers.sandbox.api import Sandbox

pytestmark = pytest.mark.sandbox


def test_background_processes_do_not_survive_the_step(sandbox: Sandbox) -> None:
    """``sleep 100 &``, a double-forked setsid daemon appending to a file, a process that ignores SIGTERM:
    the step returns at once, and nothing writes to the workspace after its snapshot."""
    command = (
        "sleep 100 & "
        "(setsid sh -c 'trap \"\" TERM HUP; while :; do echo tick >> log; sleep 0.01; done' &) ; "
        "nohup sh -c 'sleep 2; echo late > late.txt' >/dev/null 2>&1 & "
        "sleep 0.2; echo started"
    )
    t0 = time.monotonic()
    left = sh(sandbox, snapshot(), command)
    assert time.monotonic() - t0 < 8
    assert left.status == SandboxStatus.OK
    assert left.stdout == b"started\n"
    got = members(left.snapshot)
    assert "late.txt" not in got
    ticks = got["log"][1].count(b"tick\n")
    assert ticks >= 1
    assert got["log"][1] == b"tick\n" * ticks
    later = sh(sandbox, left.snapshot, "sleep 0.5; wc -l < log; ls")
    assert later.stdout == b"%d\nlog\n" % ticks
    assert later.sha256 == left.sha256


@pytest.mark.parametrize(
    "command",
    [
        "echo new > new.txt; kill -9 $PPID; sleep 1",
        "echo new > new.txt; kill -9 -1",
    ],
    ids=["parent", "everything"],
)
def test_command_that_kills_the_runner(sandbox: Sandbox, command: str) -> None:
    snap0 = snapshot({"keep": b"k"})
    out = sh(sandbox, snap0, command)
    assert out.status == SandboxStatus.KILLED, (out.status, out.reason)
    assert not out.workspace_kept
    assert out.snapshot == snap0
    assert out.reason is not None
    assert "previous snapshot" in out.reason
    after = sh(sandbox, out.snapshot, "ls")
    assert after.status == SandboxStatus.OK
    assert after.stdout == b"keep\n"


def test_catchable_signals_do_not_stop_the_runner(sandbox: Sandbox) -> None:
    command = "echo new > new.txt; for s in TERM HUP INT QUIT USR1 USR2 ALRM PIPE; do kill -$s $PPID; done; echo alive"
    out = sh(sandbox, snapshot({"keep": b"k"}), command)
    assert (out.status, out.stdout, out.stderr) == (SandboxStatus.OK, b"alive\n", b"")
    assert out.workspace_kept
    assert set(members(out.snapshot)) == {"keep", "new.txt"}


def test_command_that_stops_the_runner(sandbox: Sandbox) -> None:
    snap0 = snapshot({"keep": b"k"})
    out = sh(sandbox, snap0, "echo new > new.txt; kill -STOP $PPID", timeout_s=0.5, limits=replace_grace(2.0))
    assert out.status == SandboxStatus.TIMEOUT
    assert out.snapshot == snap0
    assert not out.workspace_kept


def replace_grace(grace_s: float) -> StepLimits:
    from dataclasses import replace

    return replace(LIMITS, grace_s=grace_s)


def test_filling_the_disk_fails_inside_the_step(sandbox: Sandbox) -> None:
    snap0 = snapshot({"keep": b"k"})
    full = sh(sandbox, snap0, "head -c 2G /dev/zero > big")
    assert full.status == SandboxStatus.NONZERO_EXIT
    assert b"No space left" in full.stderr
    assert not full.workspace_kept
    assert full.snapshot == snap0
    assert full.reason is not None
    assert "byte cap" in full.reason
    sparse = sh(sandbox, snap0, "truncate -s 2G sparse && echo ok")
    assert sparse.status == SandboxStatus.OK
    assert not sparse.workspace_kept
    assert sparse.snapshot == snap0
    cleaned = sh(sandbox, snap0, "head -c 2G /dev/zero > big; rm big; echo after > after.txt")
    assert cleaned.status == SandboxStatus.OK
    assert cleaned.workspace_kept
    assert set(members(cleaned.snapshot)) == {"keep", "after.txt"}
    huge = run_step(sandbox, snap0, StepAction.write("big", bytes(CAPS.max_bytes + 1)), CAPS, LIMITS)
    assert huge.status == REJECTED
    assert huge.snapshot == snap0
    assert huge.reason is not None
    assert "do not fit" in huge.reason
    goes_on = step(sandbox, full.snapshot, StepAction.read("keep"))
    assert goes_on.content == b"k"


def test_a_write_that_puts_the_workspace_over_its_cap_is_rejected_not_ok(sandbox: Sandbox) -> None:
    """The run's tmpfs has room beyond the caps (page rounding), so the write itself succeeds; the workspace it
    leaves is over the byte cap and not kept. The agent must see that the file is not there: ``rejected`` with
    why, never ``ok`` for a file that is gone."""
    snap0 = snapshot({"keep": b"k", "big": bytes(3 << 20)})
    over = step(sandbox, snap0, StepAction.write("more", bytes(3 << 19)))  # 3 MiB + 1.5 MiB > the 4 MiB cap
    assert over.status == REJECTED, (over.status, over.reason)
    assert over.reason is not None
    assert "byte cap" in over.reason, over.reason
    assert not over.workspace_kept
    assert over.snapshot == snap0
    gone = step(sandbox, over.snapshot, StepAction.read("more"))
    assert gone.status == REJECTED, gone
    assert "no such file" in (gone.reason or "")
    fits = step(sandbox, snap0, StepAction.write("big", bytes(1 << 20)))  # an overwrite: 1 MiB in all
    assert (fits.status, fits.workspace_kept) == (SandboxStatus.OK, True), fits.reason
    assert members(fits.snapshot)["big"][1] == bytes(1 << 20)


def test_running_out_of_inodes_fails_inside_the_step(sandbox: Sandbox) -> None:
    snap0 = snapshot({"keep": b"k"})
    out = sh(sandbox, snap0, "i=0; while true 2>/dev/null > f$i; do i=$((i+1)); done; echo $i")
    assert out.status == SandboxStatus.OK
    made = int(out.stdout)
    assert CAPS.max_entries - 1 <= made <= CAPS.max_entries + 16
    assert not out.workspace_kept
    assert out.snapshot == snap0
    assert out.reason is not None
    assert "entries" in out.reason
    fewer = sh(sandbox, snap0, "i=0; while true 2>/dev/null > f$i; do i=$((i+1)); done; rm f1*; ls | wc -l")
    assert fewer.workspace_kept
    assert len(members(fewer.snapshot)) == int(fewer.stdout)
    after = sh(sandbox, out.snapshot, "ls")
    assert after.stdout == b"keep\n"


def test_fork_bomb(sandbox: Sandbox) -> None:
    snap0 = snapshot({"keep": b"k"})
    out = sh(sandbox, snap0, "echo before > b.txt; bomb() { bomb | bomb & }; bomb; sleep 2", timeout_s=3)
    assert out.status in (SandboxStatus.OK, SandboxStatus.TIMEOUT, SandboxStatus.NONZERO_EXIT), out.reason
    assert out.workspace_kept
    assert members(out.snapshot)["b.txt"][1] == b"before\n"
    after = sh(sandbox, out.snapshot, "cat b.txt")
    assert after.stdout == b"before\n"


def test_memory_bomb_kills_the_command_not_the_step(sandbox: Sandbox) -> None:
    out = sh(sandbox, snapshot(), "echo kept > k; python3 -c 'x = b\"x\" * (1 << 30)'")
    assert out.status == SandboxStatus.MEMORY_LIMIT, (out.status, out.reason)
    assert out.workspace_kept
    assert members(out.snapshot)["k"][1] == b"kept\n"
