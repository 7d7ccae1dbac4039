"""The host's reading of a run, fed crafted results from a stand-in backend that runs nothing."""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from guest import workspace_snapshot
from guest.framing import NONCE_LEN, STEP_MAGIC
from schemas.status import REJECTED, ObservationStatus
from tests.unit.workers.episodes.step_parts import CAPS, make_tree, runner_pack
from workers.episodes.snapshot import Caps, SnapshotTooLargeError, pack
from workers.episodes.step import (
    StepAction,
    StepLimits,
    build_spec,
    output_limit,
    run_step,
    step_runner,
    tar_budget,
)
from workers.sandbox.api import SandboxResult, SandboxSpec, SandboxStatus
from workers.sandbox.guest_program import LOADER

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
