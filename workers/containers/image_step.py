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

import time
from typing import Any

from schemas.environments import TaskEnvironment
from schemas.status import SandboxStatus
from workers.containers.changes import read_changes
from workers.containers.delta import Delta, DeltaCaps, DeltaError, restore_tar
from workers.containers.image_containers import ContainerInfraError, ContainerRun, container_run
from workers.containers.step_action import act, kept, not_kept, oversized_write
from workers.episodes.step import Previous, StepAction, StepLimits, StepOutcome

#: Bytes of ``rm`` arguments per command: far under ARG_MAX (all deletions are at most ``MAX_DELETED_BYTES``).
_RM_BATCH_BYTES = 64 << 10
_RM_OUTPUT_BYTES = 4096
_RESTORE_S = 120.0
#: Where the programs and libraries ``rm`` needs live: deleted last, together.
_SYSTEM = ("/usr/bin/", "/bin/", "/usr/sbin/", "/sbin/", "/usr/lib", "/lib", "/usr/libexec/", "/etc/ld.so")


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
    if (refused := oversized_write(before, action, caps)) is not None:
        return refused
    started = time.monotonic()
    try:
        with container_run(client, image, environment, purpose="step") as run:
            restore(run, delta)
            fields = {**act(run, environment.workdir, action, limits), "image_id": run.image_id}
            run.kill()  # nothing runs while the filesystem is read
            try:
                after = read_changes(run, caps)
            except DeltaError as exc:
                return not_kept(before, action, fields, exc, started)
    except ContainerInfraError as exc:
        return before.outcome(SandboxStatus.SANDBOX_ERROR, str(exc))
    return kept(after, fields, started)


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
