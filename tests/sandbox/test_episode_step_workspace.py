"""Agent steps on every backend: the workspace travels in and out; escapes via paths, links, special files fail."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from schemas.status import REJECTED, SandboxStatus
from tests.sandbox.episode_step_env import CAPS, members, sh, snapshot, step
from workers.episodes.snapshot import pack
from workers.episodes.step import StepAction
from workers.sandbox.api import Sandbox

pytestmark = pytest.mark.sandbox


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
