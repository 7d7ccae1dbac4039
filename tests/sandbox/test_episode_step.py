"""Agent steps in real sandboxes (every backend): a workspace in, one action, a workspace out.

Every command here runs ONLY inside the backend under test, through ``run_step``. Happy paths prove the
workspace really travels (write, read, exec, round trips, determinism); the hacks try to escape the
workspace, leave something alive or unpackable behind, break the runner or forge its report. None of them
may end as ``sandbox_error``, and each test asserts what the workspace holds afterwards.
"""

from __future__ import annotations

import io
import os
import secrets
import tarfile
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from schemas.status import REJECTED, SandboxStatus
from workers.episodes import step as step_module
from workers.episodes.snapshot import Caps, pack
from workers.episodes.step import StepAction, StepLimits, StepOutcome, run_step
from workers.sandbox.api import Sandbox
from workers.sandbox.guest_program import GuestProgram

pytestmark = pytest.mark.sandbox

CAPS = Caps(max_bytes=4 << 20, max_entries=200)
LIMITS = StepLimits(memory_mb=256, pids_limit=64, output_cap_bytes=64 << 10, read_cap_bytes=64 << 10, grace_s=20)


def snapshot(files: dict[str, bytes] | None = None, links: dict[str, str] | None = None) -> bytes:
    """A canonical snapshot of a directory holding ``files`` and ``links`` (made on the host, no program run)."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for name, data in (files or {}).items():
            path = root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        for name, target in (links or {}).items():
            path = root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.symlink_to(target)
        return pack(root, CAPS).data


def members(data: bytes) -> dict[str, tuple[str, Any, int]]:
    """name -> ('f', content, mode) / ('d', None, mode) / ('l', target, mode) of a snapshot."""
    out: dict[str, tuple[str, Any, int]] = {}
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for m in tar.getmembers():
            if m.isfile():
                f = tar.extractfile(m)
                assert f is not None
                out[m.name] = ("f", f.read(), m.mode)
            elif m.isdir():
                out[m.name] = ("d", None, m.mode)
            else:
                assert m.issym(), m.name
                out[m.name] = ("l", m.linkname, m.mode)
    return out


def step(sandbox: Sandbox, snap: bytes, action: StepAction, limits: StepLimits = LIMITS) -> StepOutcome:
    outcome = run_step(sandbox, snap, action, CAPS, limits)
    assert outcome.status != SandboxStatus.SANDBOX_ERROR, outcome.reason
    return outcome


def sh(sandbox: Sandbox, snap: bytes, command: str, timeout_s: float = 10.0, **kw: Any) -> StepOutcome:
    return step(sandbox, snap, StepAction.exec(command, timeout_s), **kw)


# --------------------------------------------------------------------------------------------------------
# Happy paths


MODULE = b"print('from the workspace')\n"


def test_write_read_exec_share_one_workspace(sandbox: Sandbox) -> None:
    snap0 = snapshot({"README": b"start\n"})
    wrote = step(sandbox, snap0, StepAction.write("src/pkg/mod.py", MODULE))
    assert wrote.status == SandboxStatus.OK
    assert wrote.workspace_kept
    assert members(wrote.snapshot)["src/pkg/mod.py"] == ("f", MODULE, 0o644)
    assert members(wrote.snapshot)["README"] == ("f", b"start\n", 0o644)
    read = step(sandbox, wrote.snapshot, StepAction.read("src/pkg/mod.py"))
    assert (read.status, read.content, read.content_truncated) == (SandboxStatus.OK, MODULE, False)
    assert read.sha256 == wrote.sha256  # a read changes nothing
    ran = sh(sandbox, wrote.snapshot, "python3 src/pkg/mod.py; cat README; echo made > out.txt; ls src/pkg")
    assert ran.status == SandboxStatus.OK
    assert ran.exit_code == 0
    assert ran.stdout == b"from the workspace\nstart\nmod.py\n"
    assert members(ran.snapshot)["out.txt"] == ("f", b"made\n", 0o644)
    again = step(sandbox, ran.snapshot, StepAction.exec(["cat", "out.txt", "src/pkg/mod.py"]))
    assert again.stdout == b"made\n" + MODULE
    assert again.sha256 == ran.sha256
    overwrite = step(sandbox, again.snapshot, StepAction.write("out.txt", b"second"))
    assert members(overwrite.snapshot)["out.txt"] == ("f", b"second", 0o644)


def test_the_contracts_tools_are_on_the_path(sandbox: Sandbox) -> None:
    """An agent's commands may count on python and python3, pytest and git (the episode contract)."""
    tests = b"def test_one():\n    assert 1 + 1 == 2\n"
    out = sh(
        sandbox,
        snapshot({"tests/test_one.py": tests}),
        "python -c 'import sys; print(sys.version_info[0])' && python3 -c 'print(3)'"
        " && python -m pytest -q -p no:cacheprovider tests && git --version",
        timeout_s=30,
    )
    assert out.status == SandboxStatus.OK, (out.stdout, out.stderr)
    lines = out.stdout.decode().splitlines()
    assert lines[:2] == ["3", "3"], lines
    assert any("1 passed" in line for line in lines), lines
    assert lines[-1].startswith("git version "), lines


def test_snapshot_round_trips_byte_for_byte(sandbox: Sandbox) -> None:
    """Long and non-ASCII names, long link targets, an executable, an empty dir: ``true`` changes nothing."""
    long_dir = "d" * 90 + "/" + "e" * 90
    files = {
        f"{long_dir}/{'f' * 120}.txt": b"deep\n",
        "naïve/ünïcode-名前.txt": "ü\n".encode(),
        "run.sh": b"#!/bin/sh\n",
    }
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for name, data in files.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_bytes(data)
        (root / "run.sh").chmod(0o755)
        (root / "empty").mkdir()
        (root / "far").symlink_to("x/" * 150 + "target")
        (root / "near").symlink_to("run.sh")
        original = pack(root, CAPS)
    same = sh(sandbox, original.data, "true")
    assert same.status == SandboxStatus.OK
    assert same.workspace_kept
    assert same.snapshot == original.data
    assert same.sha256 == original.sha256
    got = members(same.snapshot)
    assert got["run.sh"] == ("f", b"#!/bin/sh\n", 0o755)
    assert got["empty"][0] == "d"
    assert got["far"] == ("l", "x/" * 150 + "target", 0o777)
    assert got[f"{long_dir}/{'f' * 120}.txt"][1] == b"deep\n"
    assert got["naïve/ünïcode-名前.txt"][1] == "ü\n".encode()
    listed = sh(sandbox, same.snapshot, "cat near; ls naïve; readlink far | wc -c")
    assert listed.stdout == "#!/bin/sh\nünïcode-名前.txt\n307\n".encode()


def test_same_workspace_same_sha256(sandbox: Sandbox) -> None:
    """Two runs that leave the same files give the same bytes, whatever order or time they were written in."""
    snap0 = snapshot({"a": b"1"})
    one = sh(sandbox, snap0, "mkdir -p x/y; echo b > x/y/b; echo c > c; ln -s c lc; sleep 0.01; touch a")
    two = sh(sandbox, snap0, "echo c > c; ln -s c lc; mkdir x; mkdir x/y; echo b > x/y/b; chmod 600 c")
    assert one.status == two.status == SandboxStatus.OK
    assert one.sha256 == two.sha256
    assert one.snapshot == two.snapshot
    assert set(members(one.snapshot)) == {"a", "c", "lc", "x", "x/y", "x/y/b"}
    # a non-UTF-8 link target survives the runner's tar and the host's, both ways
    odd = sh(sandbox, one.snapshot, "ln -s \"$(printf 'bad\\377name')\" odd")
    back = sh(sandbox, odd.snapshot, "readlink odd | od -An -c | tr -s ' '")
    assert back.sha256 == odd.sha256
    assert b"b a d 377 n a m e" in back.stdout


def test_exec_statuses(sandbox: Sandbox) -> None:
    snap0 = snapshot({"a": b"1"})
    failed = step(sandbox, snap0, StepAction.exec(["sh", "-c", "echo out; echo err >&2; exit 3"]))
    assert (failed.status, failed.exit_code, failed.stdout, failed.stderr) == (
        SandboxStatus.NONZERO_EXIT, 3, b"out\n", b"err\n"
    )  # fmt: skip
    missing = step(sandbox, snap0, StepAction.exec(["no-such-program-here"]))
    assert missing.status == SandboxStatus.NONZERO_EXIT
    assert missing.exit_code == 127
    assert missing.reason is not None
    assert "no-such-program-here" in missing.reason
    slow = sh(sandbox, snap0, "echo before; sleep 30; echo after", timeout_s=0.5)
    assert slow.status == SandboxStatus.TIMEOUT
    assert slow.stdout == b"before\n"
    assert slow.wall_ms < 10_000
    assert slow.workspace_kept
    assert slow.snapshot == snap0
    killed = sh(sandbox, snap0, "kill -SEGV $$")
    assert (killed.status, killed.signal) == (SandboxStatus.CRASHED, 11)


# --------------------------------------------------------------------------------------------------------
# Escapes through paths and links


def test_writes_outside_the_workspace_are_rejected(sandbox: Sandbox) -> None:
    snap0 = snapshot({"sub/f": b"f"}, links={"out": "/tmp", "in": "sub", "pw": "/etc/passwd", "rel": "../x"})
    cases = {
        "../escape": "'..'",
        "sub/../../escape": "'..'",
        "/tmp/escape": "absolute",
        "": "empty",
        "sub//f": "normalised",
        "./f": "normalised",
        "out/escape": "symlink",  # parent is a link out of the workspace
        "in/f2": "symlink",  # parent is a link, even one that stays inside
        "pw": "symlink",  # the target itself is a link
        "rel": "symlink",
        "sub": "not a regular file",
        "sub/f/x": "not a directory",
    }
    for path, why in cases.items():
        out = step(sandbox, snap0, StepAction.write(path, b"pwned"))
        assert out.status == REJECTED, path
        assert out.reason is not None, (path, out.reason)
        assert why in out.reason, (path, out.reason)
        assert out.snapshot == snap0
        assert out.workspace_kept
    after = sh(sandbox, snap0, "cat sub/f; echo; ls -A /tmp; ls -A; grep -c pwned /etc/passwd")
    assert after.stdout == b"f\nin\nout\npw\nrel\nsub\n0\n"


def test_reads_outside_the_workspace_are_rejected(sandbox: Sandbox) -> None:
    links = {
        "pw": "/etc/passwd",
        "env": "/proc/self/environ",
        "mem": "/proc/self/mem",
        "fd0": "/proc/self/fd/0",
        "up": "../../../etc/passwd",
        "etc": "/etc",
        "loop": "loop",
        "inside": "sub/ok.txt",
        "self": "/proc/self/cwd/sub/ok.txt",
    }
    snap0 = snapshot({"sub/ok.txt": b"inside\n"}, links=links)
    cases = {
        "pw": "outside",
        "env": "outside",
        "mem": "outside",
        "fd0": "outside",
        "up": "outside",
        "etc/passwd": "outside",
        "../etc/passwd": "'..'",
        "/etc/passwd": "absolute",
        "nothing-here": "no such file",
        "sub": "not a regular file",
        "loop": "symbolic links",
    }
    for path, why in cases.items():
        out = step(sandbox, snap0, StepAction.read(path))
        assert out.status == REJECTED, path
        assert out.content is None, path
        assert out.reason is not None, (path, out.reason)
        assert why in out.reason, (path, out.reason)
        assert out.snapshot == snap0
    for path in ("inside", "self", "sub/ok.txt"):  # links that stay inside the workspace are followed
        out = step(sandbox, snap0, StepAction.read(path))
        assert (out.status, out.content) == (SandboxStatus.OK, b"inside\n"), path


# --------------------------------------------------------------------------------------------------------
# What a command leaves behind


def test_fifo_socket_and_setuid_do_not_survive(sandbox: Sandbox) -> None:
    command = (
        "mkfifo fifo 2>/dev/null && echo made-fifo; "
        "python3 -c \"import socket; socket.socket(socket.AF_UNIX).bind('sock')\" && echo made-sock; "
        "cp /bin/true suid && chmod 6755 suid && stat -c %a suid; "
        "echo x > group-writable && chmod 666 group-writable"
    )
    left = sh(sandbox, snapshot({"keep": b"k"}), command)
    assert left.status == SandboxStatus.OK, left.stderr
    assert b"made-sock\n" in left.stdout
    assert b"6755\n" in left.stdout
    got = members(left.snapshot)
    assert "sock" not in got
    assert "fifo" not in got
    assert "sock" in left.dropped
    assert left.reason is not None
    assert "left out of the workspace" in left.reason, left.reason
    assert "'sock'" in left.reason, left.reason
    assert b"made-fifo" not in left.stdout or "fifo" in left.dropped
    assert got["suid"][0] == "f"
    assert got["suid"][2] == 0o755
    assert got["group-writable"][2] == 0o644
    seen = sh(sandbox, left.snapshot, "stat -c '%n %a' *; ls -A")
    assert seen.stdout == b"group-writable 644\nkeep 644\nsuid 755\ngroup-writable\nkeep\nsuid\n"


# --------------------------------------------------------------------------------------------------------
# Deep trees and long link chains (issue 24): the agent builds them, the steps after it carry on

DEEP_CAPS = Caps(max_bytes=4 << 20, max_entries=2000)
#: The episode worker's own step limits but for memory and caps: the steps after a deep tree need no more time.
NORMAL = replace(LIMITS, grace_s=StepLimits().grace_s)
CALC_BUGGY = b"def add(a, b):\n    return a - b\n"
CALC_FIXED = b"def add(a, b):\n    return a + b\n"


def deep_step(sandbox: Sandbox, snap: bytes, action: StepAction) -> StepOutcome:
    outcome = run_step(sandbox, snap, action, DEEP_CAPS, NORMAL)
    assert outcome.status != SandboxStatus.SANDBOX_ERROR, outcome.reason
    return outcome


def test_a_deep_tree_costs_the_steps_after_it_nothing(sandbox: Sandbox) -> None:
    """450 levels made in one step (within the caps) used to make every later restore cubic: the steps after
    it timed out and an honest fix was lost. Now they are ordinary steps, and the tree and the fix are kept."""
    deep = "/".join(["d"] * 450)
    made = deep_step(sandbox, snapshot({"calc.py": CALC_BUGGY}),
                     StepAction.exec(f"mkdir -p {deep} && echo bottom > {deep}/f.txt && find d | wc -l"))  # fmt: skip
    assert (made.status, made.stdout, made.workspace_kept, made.reason) == (SandboxStatus.OK, b"451\n", True, None)
    assert members(made.snapshot)[f"{deep}/f.txt"] == ("f", b"bottom\n", 0o644)
    read = deep_step(sandbox, made.snapshot, StepAction.read(f"{deep}/f.txt"))
    assert (read.status, read.content) == (SandboxStatus.OK, b"bottom\n"), read.reason
    fixed = deep_step(sandbox, made.snapshot, StepAction.write("calc.py", CALC_FIXED))
    assert (fixed.status, fixed.workspace_kept) == (SandboxStatus.OK, True), fixed.reason
    check = "python3 -c 'import calc; print(calc.add(2, 2))'; find d -type d | wc -l"
    checked = deep_step(sandbox, fixed.snapshot, StepAction.exec(check))
    assert (checked.status, checked.stdout) == (SandboxStatus.OK, b"4\n450\n"), (checked.reason, checked.stderr)
    assert checked.snapshot == fixed.snapshot


MAKEDIRS_600 = ["python3", "-c", "import os; os.makedirs('/'.join(['d'] * 600))"]


def test_a_tree_deeper_than_a_path_allows_is_cut_where_paths_end_and_says_so(sandbox: Sandbox) -> None:
    """Depth is capped by the path cap (``MAX_NAME_BYTES``, 1024 bytes: 512 levels of one-letter names): what
    lies deeper is left out of the workspace, the outcome says so, and the workspace kept restores as usual."""
    made = deep_step(sandbox, snapshot({"keep": b"k"}), StepAction.exec(MAKEDIRS_600))
    assert (made.status, made.workspace_kept) == (SandboxStatus.OK, True), made.reason
    assert made.reason is not None
    assert "left out of the workspace" in made.reason, made.reason
    assert "1024 bytes" in made.reason, made.reason
    assert max(name.count("/") + 1 for name in members(made.snapshot) if name.startswith("d")) == 512
    after = deep_step(sandbox, made.snapshot, StepAction.exec("find d -type d | wc -l; cat keep"))
    assert (after.status, after.stdout, after.snapshot) == (SandboxStatus.OK, b"512\nk", made.snapshot), after.reason


LINKS = (
    "import os\n"
    "for i in range(1500): os.symlink(f'l{i + 1}' if i < 1499 else 'ok.txt', f'l{i}')\n"
    "for i in range(40): os.symlink(f'm{i + 1}' if i < 39 else 'ok.txt', f'm{i}')\n"
    "os.symlink('b', 'a'); os.symlink('a', 'b'); os.symlink('self', 'self')\n"
    "print(len(os.listdir()))\n"
)


def test_long_link_chains_and_loops_are_rejected_not_crashed(sandbox: Sandbox) -> None:
    """A read through a 1,500-link chain ended the step ``crashed`` (``os.path.realpath`` recursed until
    RecursionError). Links are followed as the kernel follows them, 40 at most: a longer chain or a loop is
    ``rejected`` with the reason, a write never goes through a link, and the episode's workspace goes on."""
    made = deep_step(sandbox, snapshot({"ok.txt": b"inside\n", "calc.py": CALC_BUGGY}),
                     StepAction.exec(["python3", "-c", LINKS]))  # fmt: skip
    assert (made.status, made.stdout, made.workspace_kept) == (SandboxStatus.OK, b"1545\n", True), made.reason
    for action, why in [
        (StepAction.read("l0"), "too many levels of symbolic links"),
        (StepAction.read("l1459"), "too many levels of symbolic links"),  # 41 links
        (StepAction.read("l0/x"), "too many levels of symbolic links"),
        (StepAction.read("a"), "too many levels of symbolic links"),
        (StepAction.read("self"), "too many levels of symbolic links"),
        (StepAction.write("l0", b"pwned"), "symlink"),
        (StepAction.write("a/x", b"pwned"), "symlink"),
    ]:
        out = deep_step(sandbox, made.snapshot, action)
        assert (out.status, out.snapshot, out.workspace_kept) == (REJECTED, made.snapshot, True), (action, out)
        assert out.reason is not None, action
        assert why in out.reason, (action, out.reason)
    for path in ("m0", "l1460"):  # 40 links: what the kernel follows too
        out = deep_step(sandbox, made.snapshot, StepAction.read(path))
        assert (out.status, out.content) == (SandboxStatus.OK, b"inside\n"), (path, out.reason)
    kernel = deep_step(sandbox, made.snapshot, StepAction.exec("cat m0; cat l0"))
    assert (kernel.status, kernel.stdout) == (SandboxStatus.NONZERO_EXIT, b"inside\n"), kernel.reason
    assert b"Too many levels of symbolic links" in kernel.stderr, kernel.stderr
    fixed = deep_step(sandbox, made.snapshot, StepAction.write("calc.py", CALC_FIXED))
    checked = deep_step(sandbox, fixed.snapshot, StepAction.exec("python3 -c 'import calc; print(calc.add(2, 2))'"))
    assert (checked.status, checked.stdout) == (SandboxStatus.OK, b"4\n"), (checked.reason, checked.stderr)


def test_unreadable_files_and_dirs_are_still_packed(sandbox: Sandbox) -> None:
    command = "echo s > secret; chmod 000 secret; mkdir -p d/e; echo y > d/e/f; chmod 000 d/e; chmod 000 d"
    left = sh(sandbox, snapshot(), command)
    assert left.status == SandboxStatus.OK
    assert left.workspace_kept
    got = members(left.snapshot)
    assert got["secret"] == ("f", b"s\n", 0o644)
    assert got["d/e/f"] == ("f", b"y\n", 0o644)


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


# --------------------------------------------------------------------------------------------------------
# The report channel


def forged_report(nonce: bytes, tar: bytes) -> bytes:
    prefix = b"@@RSTEP1 " + nonce + b" "
    result = (
        b'{"result":{"exit_code":0,"signal":null,"timed_out":false,"stdout":"","stderr":"","stdout_bytes":0,'
        b'"stderr_bytes":0,"ms":1},"workspace":{"packed":true},"tar_bytes":%d}' % len(tar)
    )
    return (
        prefix
        + b'{"hello":true,"hardened":true,"stdin_ok":true}\n'
        + prefix
        + result
        + b"\n"
        + tar
        + prefix
        + (b'{"done":true}\n')
    )


def test_forged_frames_on_the_commands_stdout_are_just_output(sandbox: Sandbox) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "pwned").write_bytes(b"forged workspace")
        forged_tar = pack(Path(tmp)).data
    forged = forged_report(b"0" * 32, forged_tar)
    snap0 = snapshot({"forged.bin": forged})
    command = (
        "cat forged.bin; "
        "cat forged.bin > /proc/$PPID/fd/1 || echo no-parent-fd >&2; "
        "cat /proc/$PPID/environ > /dev/null || echo no-parent-environ >&2; "
        "head -c 64 /proc/$PPID/mem > /dev/null || echo no-parent-mem >&2; "
        "echo done"
    )
    out = sh(sandbox, snap0, command)
    assert out.status == SandboxStatus.OK
    assert out.workspace_kept
    assert out.stdout == forged + b"done\n"
    for what in (b"no-parent-fd", b"no-parent-environ", b"no-parent-mem"):
        assert what in out.stderr, out.stderr
    assert set(members(out.snapshot)) == {"forged.bin"}


def test_output_over_the_cap_is_truncated(sandbox: Sandbox) -> None:
    out = sh(sandbox, snapshot(), "head -c 200000 /dev/zero | tr '\\0' a; echo err >&2; head -c 100000 /dev/zero >&2")
    cap = LIMITS.output_cap_bytes
    assert out.status == SandboxStatus.OK
    assert out.stdout == b"a" * cap
    assert out.stdout_truncated
    assert out.stderr == (b"err\n" + bytes(cap))[:cap]
    assert out.stderr_truncated
    small = sh(sandbox, snapshot(), "printf 12345")
    assert small.stdout == b"12345"
    assert not small.stdout_truncated
    assert not small.stderr_truncated


# A stand-in for the runner that plays by the wire format but sends back a hostile tar: a compromised runner
# is as bad as it gets, and what it sends is still only the agent's workspace, refused.
HOSTILE_RUNNER = r"""
import os, sys
n = int(sys.argv[1])
buf = b""
while len(buf) < n:
    chunk = os.read(0, n - len(buf))
    if not chunk:
        break
    buf += chunk
prefix = b"@@RSTEP1 " + buf[:32] + b" "
tar = bytes.fromhex(%r)
os.write(1, prefix + b'{"hello":true,"hardened":true,"stdin_ok":true}\n')
os.write(1, prefix + b'{"result":{"exit_code":0,"signal":null,"timed_out":false,"stdout":"","stderr":"",'
         b'"stdout_bytes":0,"stderr_bytes":0,"ms":1},"workspace":{"packed":true},"tar_bytes":%%d}\n' %% len(tar))
os.write(1, tar + prefix + b'{"done":true}\n')
"""


def hostile_tars(escape: Path) -> dict[str, bytes]:
    def build(*entries: tuple[tarfile.TarInfo, bytes]) -> bytes:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for info, data in entries:
                tar.addfile(info, io.BytesIO(data))
        return buf.getvalue()

    def info(name: str, kind: bytes = tarfile.REGTYPE, size: int = 0, link: str = "") -> tarfile.TarInfo:
        i = tarfile.TarInfo(name)
        i.type, i.size, i.linkname = kind, size, link
        return i

    return {
        "traversal": build((info(f"../../../../../..{escape}", size=5), b"pwned")),
        "absolute": build((info(str(escape), size=5), b"pwned")),
        "through-link": build(
            (info("l", tarfile.SYMTYPE, link=str(escape.parent)), b""), (info(f"l/{escape.name}", size=5), b"pwned")
        ),
        "hard-link": build((info("h", tarfile.LNKTYPE, link="/etc/passwd"), b"")),
        "device": build((info("dev", tarfile.CHRTYPE), b"")),
        "over-caps": build((info("big", size=CAPS.max_bytes + 1), bytes(CAPS.max_bytes + 1))),
        "twice": build((info("a", size=1), b"1"), (info("a", size=1), b"2")),
        "garbage": secrets.token_bytes(4096),
    }


def test_a_forged_tar_is_the_agents_problem(sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    escape = Path(tempfile.gettempdir()) / f"rs-step-escape-{secrets.token_hex(6)}"
    snap0 = snapshot({"keep": b"k"})
    for name, tar in hostile_tars(escape).items():
        source = (HOSTILE_RUNNER % tar.hex()).encode()
        hostile = GuestProgram("step_runner.py", source, bytes(16))  # no bytecode: the source runs
        monkeypatch.setattr(step_module, "step_runner", lambda hostile=hostile: hostile)
        out = sh(sandbox, snap0, "true")
        assert out.status == SandboxStatus.OK, (name, out.reason)
        assert not out.workspace_kept, name
        assert out.snapshot == snap0, name
        assert out.reason is not None, (name, out.reason)
        assert "refused" in out.reason, (name, out.reason)
        assert not escape.exists(), name
        assert not os.path.lexists(escape), name
    monkeypatch.undo()
    assert sh(sandbox, snap0, "cat keep").stdout == b"k"
