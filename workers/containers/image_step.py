"""One agent step of an image task on the docker backend: the task image + the episode's delta in, one action,
the new delta out (``delta``), as one call with the result as a value, like ``episodes.step.run_step``.

A step is a fresh container of the task's image (``container_run``: no network, the task's CPUs, memory and
pids, few capabilities), the delta restored into it (deletions by the image's own ``rm``, then the entries by
the daemon's archive extraction), the action run as root with cwd = WORKDIR, every process stopped, and the
container's changes read back by the daemon (``changes``) and re-packed by the host. Nothing else survives a
step: a process left running dies with its container. The daemon failing is ``sandbox_error`` (withheld and
retried); everything the agent did, including changes over the delta's caps (the step's filesystem is then not
kept: the episode goes on from the previous delta), is the agent's outcome.
"""

from __future__ import annotations

import io
import posixpath
import tarfile
import time
from typing import Any

from schemas.caps import QUOTE_CHARS
from schemas.environments import TaskEnvironment
from schemas.status import REJECTED, SandboxStatus
from workers.containers.changes import GO_DIR, read_changes
from workers.containers.delta import Delta, DeltaCaps, DeltaError, restore_tar
from workers.containers.image_containers import OUTPUT_LIMIT_BYTES, ContainerInfraError, ContainerRun, container_run
from workers.episodes.step import Previous, StepAction, StepLimits, StepOutcome
from workers.sandbox.common import classify, exit_of
from workers.sandbox.guest import workspace_paths
from workers.sandbox.guest.step_errors import StepError

#: Bytes of ``rm`` arguments per command: far under ARG_MAX (all deletions are at most ``MAX_DELETED_BYTES``).
_RM_BATCH_BYTES = 64 << 10
_RM_OUTPUT_BYTES = 4096
_RESTORE_S = 120.0
#: Where the programs and libraries ``rm`` needs live: deleted last, together.
_SYSTEM = ("/usr/bin/", "/bin/", "/usr/sbin/", "/sbin/", "/usr/lib", "/lib", "/usr/libexec/", "/etc/ld.so")
#: How many symlinks a read follows (the kernel's own limit is 40).
_MAX_LINK_HOPS = 8


def run_image_step(  # noqa: PLR0917 - the step's whole context
    client: Any,
    image: str,
    environment: TaskEnvironment,
    delta: Delta,
    action: StepAction,
    caps: DeltaCaps,
    limits: StepLimits,
) -> StepOutcome:
    """Run ``action`` on ``image`` + ``delta``; the outcome's ``snapshot`` is the delta after it."""
    before = Previous(delta.data, delta.sha256)
    if action.kind == "write" and len(action.data) > caps.max_bytes:
        return before.outcome(REJECTED, f"{len(action.data)} bytes are over the delta's {caps.max_bytes}", kept=True)
    started = time.monotonic()
    try:
        with container_run(client, image, environment, purpose="step") as run:
            restore(run, delta)
            fields = {**_act(run, environment.workdir, action, limits), "image_id": run.image_id}
            run.kill()  # nothing runs while the filesystem is read
            try:
                after = read_changes(run, caps)
            except DeltaError as exc:
                fields["reason"] = _joined(fields.get("reason"), f"the step's filesystem was not kept: {exc}")
                fields["status"] = REJECTED if action.kind == "write" else fields["status"]
                return before.outcome(wall_ms=_ms(started), **fields)
    except ContainerInfraError as exc:
        return before.outcome(SandboxStatus.SANDBOX_ERROR, str(exc))
    reason = fields.pop("reason", None)
    if after.dropped:
        shown = ", ".join(repr(p[:QUOTE_CHARS]) for p in after.dropped[:5])
        reason = _joined(reason, f"{len(after.dropped)} entries left out (only files, directories and links "
                                 f"survive a step, under plain UTF-8 names): {shown}")  # fmt: skip
    return StepOutcome(snapshot=after.data, sha256=after.sha256, reason=reason, dropped=after.dropped,
                       wall_ms=_ms(started), **fields)  # fmt: skip


def restore(run: ContainerRun, delta: Delta) -> None:
    """Make ``run``'s fresh container hold ``delta``: its deletions (by the image's own ``rm``, without a shell;
    the system's programs and libraries last, in one command, since the agent may have deleted ``rm``, its
    libraries or ``bash``), then its entries."""
    system = [p for p in delta.deleted if p.startswith(_SYSTEM)]
    rest = [p for p in delta.deleted if not p.startswith(_SYSTEM)]
    batches: list[list[str]] = []
    for path in rest:
        if not batches or sum(map(len, batches[-1])) > _RM_BATCH_BYTES:
            batches.append([])
        batches[-1].append(path)
    for batch in [*batches, system] if system else batches:
        got = run.run(["rm", "-rf", "--", *batch], timeout_s=_RESTORE_S, cwd="/", output_cap=_RM_OUTPUT_BYTES)
        if got.ended != "finished" or got.exit_code != 0:
            why = got.stderr.decode("utf-8", "replace").strip() or got.ended
            raise ContainerInfraError(f"restoring an episode's deletions failed (exit {got.exit_code}): {why}")
    if delta.entries:
        run.put("/", restore_tar(delta))


def _act(run: ContainerRun, workdir: str, action: StepAction, limits: StepLimits) -> dict[str, Any]:
    """StepOutcome fields of the action, run in ``run``'s container."""
    if action.kind == "exec":
        return _exec(run, workdir, action, limits)
    try:
        path = posixpath.join(workdir, "/".join(workspace_paths.check_path(action.path)))
    except StepError as exc:
        return {"status": REJECTED, "reason": str(exc)}
    if action.kind == "write":
        stat = run.stat(path)
        if stat is not None and int(stat.get("mode", 0)) & GO_DIR:
            return {"status": REJECTED, "reason": f"is a directory: {path}"}
        run.put("/", _one_file(path.lstrip("/"), action.data))
        return {"status": SandboxStatus.OK}
    return _read(run, path, limits.read_cap_bytes)


def _exec(run: ContainerRun, workdir: str, action: StepAction, limits: StepLimits) -> dict[str, Any]:
    argv = ["/bin/sh", "-c", action.command] if isinstance(action.command, str) else list(action.command)
    got = run.run(argv, timeout_s=action.timeout_s, cwd=workdir, output_cap=limits.output_cap_bytes)
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


def _read(run: ContainerRun, path: str, cap: int) -> dict[str, Any]:
    """A read of ``path`` (following links inside the container, as ``cat`` would)."""
    for _ in range(_MAX_LINK_HOPS):
        stat = run.stat(path)
        if stat is None:
            return {"status": REJECTED, "reason": f"no such file: {path}"}
        target = stat.get("linkTarget") or ""
        if not target:
            break
        path = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
    else:
        return {"status": REJECTED, "reason": f"too many symlinks from {path}"}
    with run.get(path) as stream, tarfile.open(fileobj=stream, mode="r|") as tar:
        member = tar.next()
        if member is None or not member.isreg():
            return {"status": REJECTED, "reason": f"not a regular file: {path}"}
        source = tar.extractfile(member)
        content = source.read(cap) if source is not None else b""
        return {"status": SandboxStatus.OK, "content": content, "content_truncated": member.size > len(content)}


def _one_file(name: str, data: bytes) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
        tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def _joined(first: str | None, second: str) -> str:
    return f"{first}; {second}" if first else second


def _ms(started: float) -> float:
    return (time.monotonic() - started) * 1000
