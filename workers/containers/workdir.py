"""A container's WORKDIR as a canonical snapshot: read from the daemon, checked and re-packed by the host's own
snapshot code, so what a verifier receives passed the same rules as any episode's workspace."""

from __future__ import annotations

import posixpath
import tempfile
from pathlib import Path
from typing import Any

from schemas.environments import TaskEnvironment
from workers.containers.image_containers import ContainerInfraError, ContainerRun, container_run
from workers.episodes.snapshot import Caps, Packed, SnapshotError, pack, tar_limit, unpack


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
