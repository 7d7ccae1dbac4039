"""The host side of a step and the runner's pure parts, without a sandbox.

Nothing here runs the runner's ``main`` or ``sweep`` (they kill processes and belong inside a sandbox):
its tar code, path checks and packer are pure functions over a temporary directory, and the host's
reading of a run is fed crafted ``SandboxResult``s from a stand-in backend that runs nothing.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import io
import json
import os
import stat
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schemas.status import REJECTED, ObservationStatus
from workers.episodes.snapshot import Caps, SnapshotTooLargeError, pack, unpack
from workers.episodes.step import (
    ENTRY_OVERHEAD,
    StepAction,
    StepLimits,
    build_spec,
    output_limit,
    run_step,
    step_runner,
    tar_budget,
    workdir_limits,
)
from workers.sandbox.api import SandboxResult, SandboxSpec, SandboxStatus
from workers.sandbox.guest import step_errors, step_files, workspace_paths, workspace_snapshot, workspace_tar
from workers.sandbox.guest import step_runner as runner
from workers.sandbox.guest.framing import NONCE_LEN, STEP_MAGIC
from workers.sandbox.guest_program import LOADER

CAPS = Caps(max_bytes=1 << 20, max_entries=100)


def listing(root: Path) -> dict[str, tuple[str, bytes]]:
    out: dict[str, tuple[str, bytes]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            if path.is_symlink():
                out[rel] = ("l", os.readlink(os.fsencode(path)))
            elif path.is_dir():
                out[rel] = ("d", b"")
            else:
                out[rel] = ("f" if not os.access(path, os.X_OK) else "x", path.read_bytes())
    return out


def make_tree(root: Path, files: dict[str, bytes], links: dict[str, bytes]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    for name, target in links.items():
        os.symlink(target, os.fsencode(root / name))
    return root


def runner_pack(root: Path, caps: Caps = CAPS) -> tuple[bytes, workspace_snapshot.Packer]:
    """The runner's tar of ``root`` (the packer walks its cwd), and the packer (what it counted, dropped)."""
    old = os.getcwd()
    os.chdir(root)
    try:
        packer = workspace_snapshot.Packer(caps.max_bytes, caps.max_entries, tar_budget(caps))
        return b"".join(packer.pack()), packer
    finally:
        os.chdir(old)


def runner_restore(data: bytes, root: Path) -> int:
    root.mkdir(parents=True)
    old = os.getcwd()
    os.chdir(root)
    try:
        return workspace_snapshot.restore(data)
    finally:
        os.chdir(old)


# --------------------------------------------------------------------------------------------------------
# The runner's tar subset against tarfile and the snapshot module


def test_runner_tar_and_snapshot_tar_read_each_other(tmp_path: Path) -> None:
    files = {
        "a.txt": b"a\n",
        "d" * 99 + "/" + "e" * 99 + "/" + "f" * 150: b"long\n",
        "naïve/名前.txt": "ü".encode(),
        "run.sh": b"#!/bin/sh\n",
        "empty/.keep": b"",
    }
    links = {"near": b"a.txt", "far": b"x/" * 200 + b"y", "odd": b"bad\xffname", "abs": b"/etc/passwd"}
    src = make_tree(tmp_path / "src", files, links)
    (src / "run.sh").chmod(0o755)
    (src / "emptydir").mkdir()
    canonical = pack(src, CAPS)
    # the runner restores what snapshot.pack made...
    assert runner_restore(canonical.data, tmp_path / "restored") == len(listing(src))
    assert listing(tmp_path / "restored") == listing(src)
    # ... and snapshot.unpack restores what the runner made, to the same canonical bytes
    tar, packer = runner_pack(src)
    dest = tmp_path / "dest"
    dest.mkdir()
    unpack(tar, dest, CAPS)
    assert listing(dest) == listing(src)
    assert pack(dest, CAPS).data == canonical.data
    assert (packer.entries, packer.bytes) == (len(listing(src)), sum(len(v) for v in files.values()))
    # tarfile reads the runner's tar member for member
    with tarfile.open(fileobj=io.BytesIO(tar)) as opened:
        names = {m.name: m for m in opened.getmembers()}
    assert names["far"].linkname == "x/" * 200 + "y"
    assert names["run.sh"].mode == 0o755
    assert names["a.txt"].mode == 0o644


@given(
    st.dictionaries(
        st.lists(st.text(st.characters(blacklist_characters="/\x00\n\r", blacklist_categories=["Cs"]), min_size=1,
                         max_size=40).filter(lambda s: s not in (".", "..")), min_size=1, max_size=3).map("/".join),
        st.binary(max_size=600),
        max_size=8,
    ),
    st.booleans(),
)  # fmt: skip
def test_runner_pack_round_trips_any_tree(files: dict[str, bytes], executable: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "src"
        root.mkdir()
        for name, data in files.items():
            path = root / name
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
            except (NotADirectoryError, FileExistsError, IsADirectoryError, OSError):
                continue  # a name that is another's directory: the tree just has one of them
            if executable:
                path.chmod(0o755)
        tar, _ = runner_pack(root)
        dest = Path(tmp) / "dest"
        dest.mkdir()
        unpack(tar, dest, CAPS)
        assert listing(dest) == listing(root)
        back = Path(tmp) / "back"
        runner_restore(pack(dest, CAPS).data, back)
        assert listing(back) == listing(root)


def test_runner_pack_drops_what_is_not_a_file_and_keeps_only_the_exec_bit(tmp_path: Path) -> None:
    import socket

    src = make_tree(tmp_path / "src", {"keep": b"k", "suid": b"s"}, {})
    os.mkfifo(src / "fifo")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(src / "sock"))
    (src / "suid").chmod(0o6777)
    (src / "bad\nname").write_bytes(b"x")
    (src / "hidden").write_bytes(b"h")
    (src / "hidden").chmod(0)
    try:
        tar, packer = runner_pack(src)
    finally:
        sock.close()
    assert sorted(packer.dropped) == ["bad\nname", "fifo", "sock"]
    with tarfile.open(fileobj=io.BytesIO(tar)) as opened:
        modes = {m.name: m.mode for m in opened.getmembers()}
    assert modes == {"hidden": 0o644, "keep": 0o644, "suid": 0o755}


def test_runner_pack_stops_at_the_caps(tmp_path: Path) -> None:
    src = make_tree(tmp_path / "big", {"a": bytes(600), "b": bytes(600)}, {})
    with pytest.raises(step_errors.WorkspaceError, match="byte cap"):
        runner_pack(src, Caps(max_bytes=1000, max_entries=10))
    many = make_tree(tmp_path / "many", {f"f{i}": b"" for i in range(11)}, {})
    with pytest.raises(step_errors.WorkspaceError, match="more than 10 entries"):
        runner_pack(many, Caps(max_bytes=1000, max_entries=10))
    # the frame's byte budget holds even where the caps would not stop it
    packer = workspace_snapshot.Packer(1 << 20, 100, 4 * workspace_tar.BLOCK)
    old = os.getcwd()
    os.chdir(src)
    try:
        with pytest.raises(step_errors.WorkspaceError, match="tar is over"):
            packer.pack()
    finally:
        os.chdir(old)


def crafted(*entries: tuple[str, bytes, bytes, str]) -> bytes:
    """A tar by tarfile: (name, kind, data, link) entries."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, kind, data, link in entries:
            info = tarfile.TarInfo(name)
            info.type, info.size, info.linkname = kind, len(data), link
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (crafted(("../x", tarfile.REGTYPE, b"x", "")), "plain relative path"),
        (crafted(("/abs", tarfile.REGTYPE, b"x", "")), "plain relative path"),
        (crafted(("l", tarfile.SYMTYPE, b"", "/tmp"), ("l/x", tarfile.REGTYPE, b"x", "")), "non-directory"),
        (crafted(("f", tarfile.REGTYPE, b"x", ""), ("f/x", tarfile.REGTYPE, b"x", "")), "non-directory"),
        (crafted(("a", tarfile.REGTYPE, b"1", ""), ("a", tarfile.REGTYPE, b"2", "")), "repeats"),
        (crafted(("h", tarfile.LNKTYPE, b"", "/etc/passwd")), "not a file"),
        (crafted(("c", tarfile.CHRTYPE, b"", "")), "not a file"),
        (b"\x01" * 1024, "corrupt"),
    ],
    ids=["traversal", "absolute", "under-link", "under-file", "twice", "hardlink", "device", "garbage"],
)
def test_runner_restore_refuses_what_snapshots_never_hold(tmp_path: Path, data: bytes, why: str) -> None:
    with pytest.raises(step_errors.JobError, match=why):
        runner_restore(data, tmp_path / "w")
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("", "empty"),
        ("/etc/passwd", "absolute"),
        ("../x", "'..'"),
        ("a/../../x", "'..'"),
        ("a//b", "normalised"),
        ("./a", "normalised"),
        ("a/", "normalised"),
        ("a\nb", "plain"),
        ("x" * 1025, "plain"),
        (["a"], "empty"),
    ],
)
def test_check_path_refuses_paths_that_are_not_plain_and_relative(path: object, why: str) -> None:
    with pytest.raises(step_errors.StepError, match=why):
        workspace_paths.check_path(path)


def test_check_path_accepts_plain_paths() -> None:
    assert workspace_paths.check_path("src/pkg/mod.py") == ["src", "pkg", "mod.py"]
    assert workspace_paths.check_path(".hidden/..dots") == [".hidden", "..dots"]


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


# --------------------------------------------------------------------------------------------------------
# The host's reading of a run


@dataclass
class Scripted:
    """A backend that runs nothing: it answers each spec with ``reply(spec, nonce)``."""

    reply: Callable[[SandboxSpec, bytes], SandboxResult]
    name: str = "scripted"
    specs: list[SandboxSpec] = field(default_factory=list)

    def run(self, spec: SandboxSpec) -> SandboxResult:
        self.specs.append(spec)
        pyc, src = int(spec.argv[-3]), int(spec.argv[-2])
        return self.reply(spec, spec.stdin[pyc + src : pyc + src + NONCE_LEN])

    def close(self) -> None:
        """Nothing to release."""


def result(stdout: bytes, status: SandboxStatus = SandboxStatus.OK, **kw: object) -> SandboxResult:
    fields: dict[str, object] = {
        "status": status, "exit_code": 0, "signal": None, "stdout": stdout, "stderr": b"", "stdout_truncated": False,
        "stderr_truncated": False, "wall_ms": 5.0, "cpu_ms": 1.0, "max_rss_kb": 1, "backend": "scripted",
    }  # fmt: skip
    fields.update(kw)
    return SandboxResult(**fields)  # type: ignore[arg-type]


def frame(nonce: bytes, obj: object, payload: bytes = b"") -> bytes:
    return STEP_MAGIC + b" " + nonce + b" " + json.dumps(obj).encode() + b"\n" + payload


HELLO = {"hello": True, "hardened": True, "stdin_ok": True}


def exec_result(**kw: object) -> dict[str, object]:
    res: dict[str, object] = {"exit_code": 0, "signal": None, "timed_out": False, "stdout": "", "stderr": "",
                              "stdout_bytes": 0, "stderr_bytes": 0, "ms": 1.0}  # fmt: skip
    res.update(kw)
    return res


def full_report(nonce: bytes, res: dict[str, object], tar: bytes, workspace: dict[str, object] | None = None) -> bytes:
    ws = workspace if workspace is not None else {"packed": True, "dropped": []}
    head = frame(nonce, HELLO) + frame(nonce, {"result": res, "workspace": ws, "tar_bytes": len(tar)}, tar)
    return head + frame(nonce, {"done": True})


@pytest.fixture
def workspaces(tmp_path: Path) -> tuple[bytes, bytes]:
    """(the step's input snapshot, a tar of a different workspace the runner could send back)."""
    before = pack(make_tree(tmp_path / "before", {"keep": b"k"}, {}), CAPS).data
    after, _ = runner_pack(make_tree(tmp_path / "after", {"keep": b"k", "new": b"n"}, {}))
    return before, after


def test_a_complete_report_gives_the_canonical_workspace(workspaces: tuple[bytes, bytes], tmp_path: Path) -> None:
    before, after = workspaces
    out_b64 = base64.b64encode(b"hello\n").decode()
    backend = Scripted(lambda s, n: result(full_report(n, exec_result(stdout=out_b64, stdout_bytes=6), after)))
    out = run_step(backend, before, StepAction.exec("echo hello"), CAPS)
    expected = pack(make_tree(tmp_path / "expected", {"keep": b"k", "new": b"n"}, {}), CAPS)
    assert (out.status, out.stdout, out.stdout_truncated) == (SandboxStatus.OK, b"hello\n", False)
    assert (out.snapshot, out.sha256, out.workspace_kept) == (expected.data, expected.sha256, True)
    spec = backend.specs[0]
    assert spec.argv[-6:-4] == ("-c", LOADER)
    assert spec.stdin.startswith(step_runner().stdin())
    assert spec.workdir_size_mb == 2
    assert spec.output_limit_bytes == output_limit(CAPS, StepLimits())
    assert spec.timeout_s == 10.0 + StepLimits().grace_s


@pytest.mark.parametrize(
    ("stdout", "status"),
    [
        (lambda n: b"", SandboxStatus.SANDBOX_ERROR),  # never started
        (lambda n: frame(b"f" * 32, HELLO), SandboxStatus.SANDBOX_ERROR),  # someone else's nonce
        (lambda n: b"noise\n" + frame(n, HELLO), SandboxStatus.SANDBOX_ERROR),  # hello must come first
        (lambda n: frame(n, HELLO) + frame(n, {"runner_error": "bad job"}), SandboxStatus.SANDBOX_ERROR),
        (lambda n: frame(n, HELLO), SandboxStatus.CRASHED),  # started, then stopped without a report
        (lambda n: frame(n, HELLO) + frame(n, {"result": exec_result(), "workspace": {"packed": True},
                                                "tar_bytes": 5000}, b"short"), SandboxStatus.CRASHED),
        (lambda n: full_report(n, exec_result(), b"") + b"trailing", SandboxStatus.CRASHED),
        (lambda n: full_report(n, exec_result(stdout="%%%"), b""), SandboxStatus.CRASHED),  # not base64
        (lambda n: full_report(n, exec_result(exit_code="0"), b""), SandboxStatus.CRASHED),  # not an int
        (lambda n: full_report(n, exec_result(stdout="QUFB" * 1000), b""), SandboxStatus.CRASHED),  # over the cap
    ],
    ids=["silent", "foreign-nonce", "noise-first", "runner-error", "cut", "short-tar", "trailing", "bad-b64",
         "bad-int", "over-cap"],
)  # fmt: skip
def test_what_the_host_makes_of_a_bad_report(
    workspaces: tuple[bytes, bytes], stdout: Callable[[bytes], bytes], status: ObservationStatus
) -> None:
    before, _ = workspaces
    backend = Scripted(lambda s, n: result(stdout(n), exit_code=1))
    out = run_step(backend, before, StepAction.exec("true"), CAPS, StepLimits(output_cap_bytes=100))
    assert out.status == status
    assert out.snapshot == before
    assert not out.workspace_kept
    assert out.reason


def test_the_sandbox_status_of_a_cut_report_is_kept(workspaces: tuple[bytes, bytes]) -> None:
    before, _ = workspaces
    for status in (SandboxStatus.KILLED, SandboxStatus.TIMEOUT, SandboxStatus.MEMORY_LIMIT):

        def cut(spec: SandboxSpec, nonce: bytes, status: SandboxStatus = status) -> SandboxResult:
            return result(frame(nonce, HELLO), status)

        out = run_step(Scripted(cut), before, StepAction.exec("true"), CAPS)
        assert (out.status, out.snapshot) == (status, before)
    error = Scripted(lambda s, n: result(b"", SandboxStatus.SANDBOX_ERROR, error="docker went away"))
    out = run_step(error, before, StepAction.exec("true"), CAPS)
    assert out.status == SandboxStatus.SANDBOX_ERROR
    assert out.reason is not None
    assert "docker went away" in out.reason


def test_a_backend_that_raises_is_a_sandbox_error(workspaces: tuple[bytes, bytes]) -> None:
    def boom(spec: SandboxSpec, nonce: bytes) -> SandboxResult:
        raise OSError("no such device")

    out = run_step(Scripted(boom), workspaces[0], StepAction.read("keep"), CAPS)
    assert (out.status, out.snapshot) == (SandboxStatus.SANDBOX_ERROR, workspaces[0])


def test_workspace_outcomes(workspaces: tuple[bytes, bytes]) -> None:
    before, after = workspaces
    oom = Scripted(lambda s, n: result(full_report(n, exec_result(signal=9), after), SandboxStatus.MEMORY_LIMIT))
    out = run_step(oom, before, StepAction.exec("true"), CAPS)
    assert (out.status, out.signal, out.workspace_kept) == (SandboxStatus.MEMORY_LIMIT, 9, True)
    over = {"packed": False, "error": "the workspace has more than 100 entries"}
    full = Scripted(lambda s, n: result(full_report(n, exec_result(exit_code=1), b"", over)))
    out = run_step(full, before, StepAction.exec("true"), CAPS)
    assert (out.status, out.snapshot, out.workspace_kept) == (SandboxStatus.NONZERO_EXIT, before, False)
    assert out.reason is not None
    assert "more than 100 entries" in out.reason
    read = {"ok": True, "content": base64.b64encode(b"k").decode(), "size": 1, "truncated": False}
    reader = Scripted(lambda s, n: result(full_report(n, read, b"", {"packed": False, "error": None})))
    out = run_step(reader, before, StepAction.read("keep"), CAPS)
    assert (out.status, out.content, out.snapshot, out.workspace_kept) == (SandboxStatus.OK, b"k", before, True)
    refused = {"ok": False, "rejected": "keep is a symlink"}
    writer = Scripted(lambda s, n: result(full_report(n, refused, b"", {"packed": False, "error": None})))
    out = run_step(writer, before, StepAction.write("keep", b"x"), CAPS)
    assert (out.status, out.reason, out.snapshot) == (REJECTED, "keep is a symlink", before)


def test_host_side_refusals_run_nothing(workspaces: tuple[bytes, bytes]) -> None:
    backend = Scripted(lambda s, n: pytest.fail("nothing should run"))
    out = run_step(backend, workspaces[0], StepAction.write("big", bytes(CAPS.max_bytes + 1)), CAPS)
    assert (out.status, out.snapshot, backend.specs) == (REJECTED, workspaces[0], [])
    with pytest.raises(SnapshotTooLargeError):
        run_step(backend, bytes(tar_budget(CAPS) + 1), StepAction.read("x"), CAPS)
    with pytest.raises(ValueError, match="needs a command"):
        StepAction("exec")
    with pytest.raises(ValueError, match="unknown action"):
        StepAction("rm", path="x")  # type: ignore[arg-type]
    for timeout in (0, -1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="positive"):
            StepAction.exec("x", timeout_s=timeout)


def test_build_spec_sends_the_job_after_the_runner(workspaces: tuple[bytes, bytes]) -> None:
    before, _ = workspaces
    action = StepAction.write("a/b", b"DATA")
    spec = build_spec(before, action, CAPS, replace(StepLimits(), grace_s=3.0), b"n" * 32)
    pyc, src, job = (int(x) for x in spec.argv[-3:])
    assert len(spec.stdin) == pyc + src + job
    body = spec.stdin[pyc + src :]
    assert body[:32] == b"n" * 32
    header_end = body.index(b"\n")
    header = json.loads(body[32:header_end])
    assert (header["kind"], header["path"], header["data_bytes"], header["tar_bytes"]) == (
        "write",
        "a/b",
        4,
        len(before),
    )
    assert body[header_end + 1 :] == b"DATA" + before
    assert spec.timeout_s == 3.0
    assert spec.files == {}  # the work dir holds nothing but the workspace


def test_the_hosts_own_scratch_failures_are_not_the_agents(
    workspaces: tuple[bytes, bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    from workers.episodes import step as step_module
    from workers.episodes.snapshot import SnapshotError

    before, after = workspaces
    backend = Scripted(lambda s, n: result(full_report(n, exec_result(), after)))
    for code, status in ((errno.ENOSPC, SandboxStatus.SANDBOX_ERROR), (errno.ENAMETOOLONG, SandboxStatus.OK)):

        def failing(data: bytes, dest: Path, caps: Caps, code: int = code) -> int:
            raise SnapshotError("cannot restore the snapshot") from OSError(code, os.strerror(code))

        monkeypatch.setattr(step_module, "unpack", failing)
        out = run_step(backend, before, StepAction.exec("true"), CAPS)
        assert (out.status, out.snapshot, out.workspace_kept) == (status, before, False)
    monkeypatch.undo()
    assert step_module.scratch_dir(CAPS) in (None, "/dev/shm")
    assert step_module.scratch_dir(Caps(max_bytes=1 << 62)) is None  # no room anywhere: tempfile's default


NAMES = st.text(st.characters(blacklist_characters="/\x00\n\r", blacklist_categories=["Cs"]), min_size=1, max_size=60)


@given(
    st.dictionaries(st.lists(NAMES, min_size=1, max_size=3).map("/".join), st.binary(max_size=700), max_size=6),
    st.dictionaries(NAMES, st.binary(min_size=1, max_size=300).filter(lambda b: b"\x00" not in b), max_size=3),
    st.sets(NAMES, max_size=3),
)
def test_the_runner_tar_is_byte_for_byte_the_snapshot_tar(
    files: dict[str, bytes], links: dict[str, bytes], executables: set[str]
) -> None:
    """Long, non-ASCII and non-UTF-8 names and targets, exec bits, empty dirs: the same bytes as
    ``snapshot.pack`` (so an unchanged workspace is recognised in the sandbox)."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "w"
        root.mkdir()
        for name, data in files.items():
            with contextlib.suppress(OSError):  # a name that is another's directory or file: one of them
                (root / name).parent.mkdir(parents=True, exist_ok=True)
                (root / name).write_bytes(data)
        for name, target in links.items():
            with contextlib.suppress(OSError):
                os.symlink(target, os.fsencode(root / name))
        for name in executables:
            with contextlib.suppress(OSError):
                (root / name).mkdir()
                (root / name / "x").write_bytes(b"#!/bin/sh\n")
                (root / name / "x").chmod(0o755)
        tar, _ = runner_pack(root)
        assert tar == pack(root, CAPS).data


def test_an_unchanged_workspace_is_not_sent_back(tmp_path: Path) -> None:
    src = make_tree(tmp_path / "src", {"a": b"1", "d/b": b"2"}, {"l": b"a"})
    canonical = pack(src, CAPS).data
    tar, _ = runner_pack(src)
    assert workspace_snapshot.same_bytes([tar[:700], tar[700:]], memoryview(canonical))
    assert not workspace_snapshot.same_bytes([tar[:-1]], memoryview(canonical))
    assert not workspace_snapshot.same_bytes([tar, b"\0"], memoryview(canonical))
    claim: dict[str, object] = {"packed": True, "unchanged": True}
    backend = Scripted(lambda s, n: result(full_report(n, exec_result(), b"", claim)))
    out = run_step(backend, canonical, StepAction.exec("true"), CAPS)
    assert (out.status, out.snapshot, out.workspace_kept) == (SandboxStatus.OK, canonical, True)
    echoed = Scripted(lambda s, n: result(full_report(n, exec_result(), canonical)))
    assert run_step(echoed, canonical, StepAction.exec("true"), CAPS).snapshot == canonical
