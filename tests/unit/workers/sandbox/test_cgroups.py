"""Pure logic of run cgroups, on plain files standing in for cgroupfs (no kernel needed)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from workers.sandbox.audit import pid_alive
from workers.sandbox.cgroups import RunCgroup


def _group(tmp_path: Path, procs: str) -> RunCgroup:
    run = tmp_path / "rewardstream-sandbox" / "123-1-abc"
    run.mkdir(parents=True)
    (run / "cgroup.procs").write_text(procs)
    return RunCgroup(2, [run], {"": run.parent})


def test_an_exiting_task_listed_as_pid_0_is_never_signalled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """cgroup v2 lists a dying task whose pid is released as 0; kill(0) would hit the worker's own process
    group (found on a cgroup v2 kernel: the worker SIGKILLed itself). Only positive pids are signalled, and
    the group does not count as empty while the entry is there."""
    group = _group(tmp_path, "0\n4242\n")
    sent: list[tuple[int, int]] = []

    def fake_kill(pid: int, sig: int) -> None:
        sent.append((pid, sig))
        if len(sent) == 3:  # the dying task is gone after a few rounds
            (group.dirs[0] / "cgroup.procs").write_text("")

    monkeypatch.setattr(os, "kill", fake_kill)
    assert group.pids() == [4242]
    assert group.kill_all(deadline_s=5.0) is True
    assert set(sent) == {(4242, signal.SIGKILL)}


def test_kill_all_reports_a_group_that_never_empties(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    group = _group(tmp_path, "0\n")
    monkeypatch.setattr(os, "kill", lambda pid, sig: pytest.fail(f"signalled {pid}"))
    assert group.kill_all(deadline_s=0.05) is False


@pytest.mark.parametrize("pid", [0, -1, "-own"])
def test_pid_alive_never_means_a_process_group(pid: int | str) -> None:
    """0 and negative pids name process groups (the test's own too), never a process (ids stay the same in
    every pytest-xdist worker: the own pid is taken at run time)."""
    assert pid_alive(-os.getpid() if pid == "-own" else int(pid)) is False


def test_pid_alive_sees_this_process() -> None:
    assert pid_alive(os.getpid()) is True
