"""A container's WORKDIR as a canonical snapshot: read from the daemon, checked and re-packed by the host's own
snapshot code, so what a verifier receives passed the same rules as any episode's workspace."""

from __future__ import annotations

import hashlib
import posixpath
import tempfile
from pathlib import Path
from typing import Any

from schemas.environments import TaskEnvironment
from workers.containers.image_containers import ContainerInfraError, ContainerRun, container_run
from workers.episodes.snapshot import Caps, Packed, SnapshotError, pack, tar_limit, unpack

#: How the object an unusable final WORKDIR is handed on as begins (what follows: why). Only the episode worker
#: stores it; a snapshot (a tar) never begins so unless the agent named a file so, which only costs it the reward.
UNUSABLE_MARKER = b"rewardstream-unusable-workdir:"


def unusable_workdir(reason: str) -> Packed:
    """What is submitted for a WORKDIR no snapshot may hold: not a snapshot, only the reason, content-addressed."""
    data = UNUSABLE_MARKER + reason.encode("utf-8", "replace")
    return Packed(data, hashlib.sha256(data).hexdigest(), 0, len(data))


def unusable_reason(data: bytes) -> str | None:
    """The reason ``unusable_workdir`` stored, if ``data`` is one."""
    return data[len(UNUSABLE_MARKER) :].decode("utf-8", "replace") if data.startswith(UNUSABLE_MARKER) else None


def workdir_snapshot(run: ContainerRun, workdir: str, caps: Caps) -> Packed:
    """The contents of ``workdir`` in ``run``'s container, packed canonically (SnapshotError: over ``caps``, or
    an entry no snapshot may hold, e.g. a device or a hard link)."""
    limit = tar_limit(caps)
    with run.get(workdir) as stream:
        data = stream.read(limit + 1)
    if len(data) > limit:
        raise SnapshotError(f"{workdir} is over {caps.max_bytes} bytes")
    with tempfile.TemporaryDirectory(prefix="rs-workdir-") as tmp:
        unpack(data, Path(tmp), Caps(caps.max_bytes, caps.max_entries + 1))
        top = Path(tmp) / posixpath.basename(workdir.rstrip("/"))
        if not top.is_dir():
            raise ContainerInfraError(f"the daemon's archive of {workdir} has no directory {top.name}")
        return pack(top, caps)


def image_workdir(client: Any, image: str, environment: TaskEnvironment, caps: Caps) -> Packed:
    """The WORKDIR ``image`` starts with (what an agent that does nothing submits), as a canonical snapshot."""
    with container_run(client, image, environment, purpose="workdir") as run:
        return workdir_snapshot(run, environment.workdir, caps)
