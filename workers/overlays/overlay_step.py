"""One agent step of an image task on the process backend: the image's unpacked tree + the episode's delta in,
one action, the new delta out, as one call with the result as a value (the docker backend's is
``containers.image_step``). The delta is restored as the overlay's upper directory by the host before anything
runs, the action runs under bubblewrap (``overlay_run``), and once its processes are gone and the overlay is
unmounted, the upper directory is read back as the new delta. The host failing is ``sandbox_error``."""

from __future__ import annotations

import os
import stat
import time

from schemas.environments import TaskEnvironment
from schemas.errors import SandboxError
from schemas.status import REJECTED, SandboxStatus
from workers.containers.delta import Delta, DeltaCaps, DeltaError
from workers.containers.step_action import act, kept, not_kept, oversized_write
from workers.episodes.snapshot import Caps, Packed, SnapshotError, pack
from workers.episodes.step import Previous, StepAction, StepLimits, StepOutcome
from workers.overlays.host import OverlayHost
from workers.overlays.overlay_run import OverlayRun, overlay_run
from workers.overlays.upper import read_upper, restore_upper


def run_overlay_step(  # noqa: PLR0917 - the step's whole context
    host: OverlayHost,
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
        rootfs = host.rootfs(image)
        with overlay_run(host, rootfs, environment) as run:
            restore_upper(delta, run.upper, rootfs.path)
            run.mount()
            fields = {**act(run, environment.workdir, action, limits), "image_id": rootfs.image_id}
            if action.kind == "write" and fields["status"] == REJECTED:  # e.g. storage full: no half-written file
                return before.outcome(REJECTED, fields.get("reason"), kept=True)
            run.unmount()  # its processes are gone: each command's die with it
            try:
                after = read_upper(run.upper, rootfs.path, caps)
            except DeltaError as exc:
                return not_kept(before, action, fields, exc, started)
    except (SandboxError, OSError, DeltaError) as exc:  # DeltaError: ``restore_upper`` refused the state given
        return before.outcome(SandboxStatus.SANDBOX_ERROR, f"{type(exc).__name__}: {exc}")
    return kept(after, fields, started)


def overlay_workdir(host: OverlayHost, image: str, environment: TaskEnvironment, delta: Delta, caps: Caps) -> Packed:
    """The WORKDIR of ``image`` + ``delta`` as a workspace snapshot (SnapshotError: one no snapshot may hold, a
    WORKDIR that is a link or gone included; SandboxError/OSError: the host's)."""
    rootfs = host.rootfs(image)
    with overlay_run(host, rootfs, environment) as run:
        try:
            restore_upper(delta, run.upper, rootfs.path)
        except DeltaError as exc:  # a state no overlay holds: no WORKDIR to grade (never a worker's crash)
            raise SnapshotError(f"the episode's state cannot be restored: {exc}") from exc
        run.mount()
        return merged_workdir(run, environment.workdir, caps)


def merged_workdir(run: OverlayRun, workdir: str, caps: Caps) -> Packed:
    """``workdir`` of ``run``'s mounted tree, packed canonically; only while nothing of the sandbox runs (each
    command's processes die with it). SnapshotError: as ``overlay_workdir``."""
    try:
        walked = run.merged
        for name in workdir.strip("/").split("/"):
            walked = walked / name
            found = os.lstat(walked)
            if not stat.S_ISDIR(found.st_mode):
                raise SnapshotError(f"{workdir} is not a directory: the agent replaced it")
    except FileNotFoundError:
        raise SnapshotError(f"{workdir} is gone: the agent deleted it") from None
    return pack(walked, caps)
