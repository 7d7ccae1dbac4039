"""An agent's action in an image task's sandbox, whichever backend holds it: ``exec`` as root with cwd =
WORKDIR, ``read``/``write`` of one file by a path relative to WORKDIR, as the fields of the step's outcome."""

from __future__ import annotations

import posixpath
import time
from typing import Any, Protocol

from guest import workspace_paths
from guest.step_errors import StepError
from schemas.caps import QUOTE_CHARS
from schemas.status import REJECTED, SandboxStatus
from workers.containers.delta import Delta, DeltaCaps, DeltaError
from workers.containers.executed import OUTPUT_LIMIT_BYTES, Executed
from workers.episodes.step import Previous, StepAction, StepLimits, StepOutcome
from workers.sandbox.common import classify, exit_of


class StepSandbox(Protocol):
    """A started sandbox of an image task: a container (docker) or an overlay (process)."""

    def run(self, argv: list[str], *, timeout_s: float, cwd: str, output_cap: int) -> Executed:
        """Run ``argv`` as root (see ``Executed``)."""

    def write_file(self, path: str, data: bytes) -> str | None:
        """Write one file; None, or why it was refused (a directory there)."""

    def read_file(self, path: str, cap: int) -> tuple[bytes, int] | str:
        """The first ``cap`` bytes of a regular file (links followed inside the sandbox) and its size, or why not."""


def act(sandbox: StepSandbox, workdir: str, action: StepAction, limits: StepLimits) -> dict[str, Any]:
    """StepOutcome fields of ``action`` run in ``sandbox``."""
    if action.kind == "exec":
        return _exec(sandbox, workdir, action, limits)
    try:
        path = posixpath.join(workdir, "/".join(workspace_paths.check_path(action.path)))
    except StepError as exc:
        return {"status": REJECTED, "reason": str(exc)}
    if action.kind == "write":
        refused = sandbox.write_file(path, action.data)
        return {"status": REJECTED, "reason": refused} if refused else {"status": SandboxStatus.OK}
    got = sandbox.read_file(path, limits.read_cap_bytes)
    if isinstance(got, str):
        return {"status": REJECTED, "reason": got}
    content, size = got
    return {"status": SandboxStatus.OK, "content": content, "content_truncated": size > len(content)}


def _exec(sandbox: StepSandbox, workdir: str, action: StepAction, limits: StepLimits) -> dict[str, Any]:
    argv = ["/bin/sh", "-c", action.command] if isinstance(action.command, str) else list(action.command)
    got = sandbox.run(argv, timeout_s=action.timeout_s, cwd=workdir, output_cap=limits.output_cap_bytes)
    fields: dict[str, Any] = {
        "stdout": got.stdout,
        "stderr": got.stderr,
        "stdout_truncated": got.stdout_bytes > len(got.stdout),
        "stderr_truncated": got.stderr_bytes > len(got.stderr),
    }
    if got.ended == "timeout":
        return {**fields, "status": SandboxStatus.TIMEOUT, "reason": f"the command ran out of its {action.timeout_s} s"}
    if got.ended == "output":
        why = f"the command wrote over {OUTPUT_LIMIT_BYTES} bytes of output and was stopped"
        return {**fields, "status": SandboxStatus.OUTPUT_LIMIT, "reason": why}
    if got.ended == "storage":
        return {**fields, "status": SandboxStatus.KILLED, "reason": "the command wrote over the task's storage_mb"}
    code, sig = exit_of(got.exit_code) if got.exit_code is not None else (None, None)
    return {**fields, "status": classify(stopped_for=None, oom_kills=0, exit_code=code, sig=sig), "exit_code": code,
            "signal": sig}  # fmt: skip


def oversized_write(before: Previous, action: StepAction, caps: DeltaCaps) -> StepOutcome | None:
    """The outcome of a write larger than the delta may hold, before any sandbox is made for it."""
    if action.kind == "write" and len(action.data) > caps.max_bytes:
        return before.outcome(REJECTED, f"{len(action.data)} bytes are over the delta's {caps.max_bytes}", kept=True)
    return None


def not_kept(
    before: Previous, action: StepAction, fields: dict[str, Any], why: DeltaError, started: float
) -> StepOutcome:
    """The outcome of a step whose filesystem is over the delta's caps: the episode goes on from ``before``."""
    fields["reason"] = joined(fields.get("reason"), f"the step's filesystem was not kept: {why}")
    fields["status"] = REJECTED if action.kind == "write" else fields["status"]
    return before.outcome(wall_ms=_ms(started), **fields)


def kept(after: Delta, fields: dict[str, Any], started: float) -> StepOutcome:
    """The outcome of a step whose filesystem is ``after``, saying what it left out."""
    reason = fields.pop("reason", None)
    if after.dropped:
        shown = ", ".join(repr(p[:QUOTE_CHARS]) for p in after.dropped[:5])
        reason = joined(reason, f"{len(after.dropped)} entries left out (only files, directories and links "
                                f"survive a step, under plain UTF-8 names): {shown}")  # fmt: skip
    return StepOutcome(snapshot=after.data, sha256=after.sha256, reason=reason, dropped=after.dropped,
                       wall_ms=_ms(started), **fields)  # fmt: skip


def _ms(started: float) -> float:
    return (time.monotonic() - started) * 1000


def joined(first: str | None, second: str) -> str:
    """Two reasons as one."""
    return f"{first}; {second}" if first else second
