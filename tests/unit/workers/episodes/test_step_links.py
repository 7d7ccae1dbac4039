"""The runner's reads and writes through links, against the kernel's own path walk."""

from __future__ import annotations

import base64
import errno
import os
import stat
import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from guest import step_files, workspace_tar
from guest import step_runner as runner
from tests.unit.workers.episodes.step_parts import CAPS, make_tree
from workers.episodes.snapshot import Caps
from workers.episodes.step import (
    ENTRY_OVERHEAD,
    StepLimits,
    output_limit,
    tar_budget,
    workdir_limits,
)

# --------------------------------------------------------------------------------------------------------
# Reads and writes through links (the links are made by the test: nothing hostile runs)


def runner_action(root: Path, job: dict[str, object], data: bytes = b"") -> dict[str, object]:
    """What the runner's ``step`` answers for a read or write run with ``root`` as the work dir."""
    old = os.getcwd()
    os.chdir(root)
    try:
        answer, _ = runner.step({"read_cap": 1 << 16, **job}, memoryview(data))
        return answer
    finally:
        os.chdir(old)


def chain(root: Path, prefix: str, n: int, last: str) -> str:
    """``prefix0`` -> ``prefix1`` -> ... -> ``prefix{n-1}`` -> ``last``: n links; the first one's name."""
    for i in range(n):
        os.symlink(f"{prefix}{i + 1}" if i < n - 1 else last, root / f"{prefix}{i}")
    return f"{prefix}0"


def test_reads_follow_links_as_the_kernel_does_and_reject_chains_and_loops(tmp_path: Path) -> None:
    """A 1,500-link chain used to end the step ``crashed`` (``os.path.realpath`` recursed until
    RecursionError): every chain and loop is a ``rejected`` answer, and whatever stays inside is read."""
    (tmp_path / "outside.txt").write_text("outside\n")
    ws = make_tree(tmp_path / "ws", {"target.txt": b"inside\n", "sub/f.txt": b"sub\n"}, {})
    links = {"a": "b", "b": "a", "self": "self", "abs": f"{ws}/target.txt", "round": "../ws/sub/f.txt",
             "dirlink": "sub", "out": "../outside.txt", "slash": "target.txt/", "dangle": "nothing",
             "sub/up": "../sub/up", "proc": "/proc/self/cwd/target.txt", "gone": "/no/such/host/file"}  # fmt: skip
    for name, target in links.items():
        os.symlink(target, ws / name)
    expect = {
        chain(ws, "long", 1500, "target.txt"): "symbolic links",
        chain(ws, "over", step_files.MAX_SYMLINKS + 1, "target.txt"): "symbolic links",
        chain(ws, "far", 1500, "../outside.txt"): "symbolic links",
        "a": "symbolic links", "self": "symbolic links", "sub/up": "symbolic links",
        "long0/x": "symbolic links",
        "out": "outside", "gone": "outside", "slash": "not a directory", "dangle": "no such file",
        "sub": "not a regular file",
    }  # fmt: skip
    for path, why in expect.items():
        answer = runner_action(ws, {"kind": "read", "path": path})
        assert answer["ok"] is False, (path, answer)
        assert why in str(answer["rejected"]), (path, answer)
    fine = {chain(ws, "max", step_files.MAX_SYMLINKS, "target.txt"): b"inside\n", "abs": b"inside\n",
            "round": b"sub\n", "dirlink/f.txt": b"sub\n", "proc": b"inside\n"}  # fmt: skip
    for path, content in fine.items():
        answer = runner_action(ws, {"kind": "read", "path": path})
        assert (answer["ok"], base64.b64decode(str(answer["content"]))) == (True, content), (path, answer)


def test_writes_never_go_through_a_link_however_long_the_chain(tmp_path: Path) -> None:
    ws = make_tree(tmp_path / "ws", {"keep.txt": b"k"}, {})
    first = chain(ws, "l", 1500, "keep.txt")
    os.symlink("loop", ws / "loop")
    for path in (first, f"{first}/x", "loop", "loop/x"):
        answer = runner_action(ws, {"kind": "write", "path": path}, b"pwned")
        assert answer["ok"] is False, (path, answer)
        assert "symlink" in str(answer["rejected"]), (path, answer)
    deep = "/".join(["d"] * 500) + "/f.txt"  # 1006 bytes: parents made one name at a time
    assert runner_action(ws, {"kind": "write", "path": deep}, b"deep")["ok"] is True
    assert (ws / deep).read_bytes() == b"deep"
    assert (ws / "keep.txt").read_bytes() == b"k"


LINK_NAMES = ("b", "c", "a/b", "a/c")
LINK_TARGETS = st.lists(st.sampled_from(["a", "b", "c", "f.txt", "..", "ws", "nothing", "", "."]), min_size=1,
                        max_size=4).map("/".join).filter(bool)  # fmt: skip


@given(
    links=st.dictionaries(st.sampled_from(LINK_NAMES), st.tuples(st.booleans(), LINK_TARGETS), max_size=4),
    path=st.lists(st.sampled_from(["a", "b", "c", "f.txt"]), min_size=1, max_size=3).map("/".join),
)
def test_a_read_opens_what_the_kernel_opens_or_says_why_not(links: dict[str, tuple[bool, str]], path: str) -> None:
    """Against the kernel's own path walk (``open`` of the same path, links followed): the same file when it is
    inside the workspace; ``rejected`` with the kernel's reason (a loop or chain, a missing name, a file where a
    directory should be) or because it is outside or not a regular file."""
    with tempfile.TemporaryDirectory() as tmp:
        outer = Path(tmp)
        (outer / "f.txt").write_text("outer\n")
        ws = make_tree(outer / "ws", {"f.txt": b"top\n", "a/f.txt": b"in a\n"}, {})
        for name, (absolute, target) in links.items():
            os.symlink(f"{ws}/{target}" if absolute else target, ws / name)
        answer = runner_action(ws, {"kind": "read", "path": path})
        kernel = kernel_open(ws / path)
        if isinstance(kernel, int):  # a missing name is "outside" when the path would have led out
            words = {errno.ELOOP: ("symbolic links",), errno.ENOENT: ("no such file", "leads outside"),
                     errno.ENOTDIR: ("not a directory",)}  # fmt: skip
            assert answer["ok"] is False, (path, answer)
            assert any(w in str(answer["rejected"]) for w in words[kernel]), (path, kernel, answer)
            return
        real, regular = kernel
        if real != str(ws) and not real.startswith(f"{ws}/"):
            assert answer == {"ok": False, "rejected": f"{path} leads outside the workspace"}, answer
        elif not regular:
            assert answer == {"ok": False, "rejected": f"{path} is not a regular file"}, answer
        else:
            assert answer["ok"] is True, (path, answer)
            assert base64.b64decode(str(answer["content"])) == Path(real).read_bytes()


def kernel_open(path: Path) -> int | tuple[str, bool]:
    """The kernel's own walk of ``path``: its errno, or (the real path it opened, whether a regular file)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        return exc.errno or 0
    try:
        return os.path.realpath(f"/proc/self/fd/{fd}"), stat.S_ISREG(os.fstat(fd).st_mode)
    finally:
        os.close(fd)


def test_entry_overhead_bounds_the_worst_member() -> None:
    """``tar_budget`` is a bound: a member with the longest name and link costs under ENTRY_OVERHEAD."""
    name = ("é" * 511 + "x").encode()  # 1023 bytes, not ASCII: pax path
    assert len(workspace_tar.tar_entry(name, b"2", link=b"\xff" * 4095)) <= ENTRY_OVERHEAD
    assert len(workspace_tar.tar_entry(name, b"0", bytes(1000))) <= 1000 + ENTRY_OVERHEAD
    limits = StepLimits(output_cap_bytes=1000, read_cap_bytes=3000)
    assert output_limit(CAPS, limits) >= tar_budget(CAPS) + 4 * 1000 // 3 * 2 + 4 * 3000 // 3
    assert tar_budget(CAPS) >= CAPS.max_bytes + CAPS.max_entries * ENTRY_OVERHEAD
    assert workdir_limits(CAPS) == (2, 116)  # 1 MiB + 100 pages -> 2 MiB; 100 entries + the sandbox's dirs
    assert workdir_limits(Caps(max_bytes=64 << 20, max_entries=5000)) == (84, 5016)
