"""The leftover audit: dying tasks are not "escaped"; live ones always are, whatever their cmdline."""

from __future__ import annotations

from pathlib import Path

from workers.sandbox.audit import PF_EXITING, processes_of_uid

UID = 60123


def _task(root: Path, pid: int, *, state: str, flags: int, cgroup: str, cmdline: bytes, uid: int = UID) -> None:
    d = root / str(pid)
    d.mkdir()
    letter = state.split(maxsplit=1)[0]
    (d / "status").write_text(f"Name:\tx\nState:\t{state}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n")
    (d / "stat").write_text(f"{pid} (a) b) {letter} 1 {pid} {pid} 0 -1 {flags} 0 0\n")
    (d / "cgroup").write_text(cgroup)
    (d / "cmdline").write_bytes(cmdline)


def test_dying_and_zombie_tasks_are_skipped_live_ones_reported(tmp_path: Path) -> None:
    root_cg = "4:memory:/\n0::/\n"
    _task(tmp_path, 10, state="Z (zombie)", flags=PF_EXITING, cgroup=root_cg, cmdline=b"")
    # Killed, run cgroup already removed, not yet a zombie: the flake "escaped process 12780 ()".
    _task(tmp_path, 11, state="R (running)", flags=0x400000 | PF_EXITING, cgroup=root_cg, cmdline=b"")
    _task(tmp_path, 12, state="S (sleeping)", flags=0x400000, cgroup=root_cg, cmdline=b"")  # live, no argv
    _task(tmp_path, 13, state="S (sleeping)", flags=0, cgroup=root_cg, cmdline=b"python3\0x.py\0")
    _task(tmp_path, 14, state="S (sleeping)", flags=0, cgroup=root_cg, cmdline=b"sh\0", uid=0)
    (tmp_path / "self").mkdir()
    found = {p.pid: p.cmdline for p in processes_of_uid(UID, tmp_path)}
    assert found == {12: "", 13: "python3 x.py "}


def test_task_reaped_while_reading_is_skipped(tmp_path: Path) -> None:
    _task(tmp_path, 20, state="R (running)", flags=0, cgroup="0::/\n", cmdline=b"")
    (tmp_path / "20" / "stat").unlink()
    assert processes_of_uid(UID, tmp_path) == []
