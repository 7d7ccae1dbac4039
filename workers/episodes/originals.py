"""A workspace task's original workspace as a snapshot: what every ``open`` of the task starts from, what
protected paths are reset to before grading and what the judge diffs the final workspace against.

Why through ``snapshot.pack`` even for inline files: the original is then canonical bytes like every later
snapshot (the same task gives the same sha256 on every worker, and compares with the agent's snapshots entry
by entry), and an archive from S3 is restored by ``snapshot.unpack`` with its checks (no links out, no
devices, inflated at most to the caps) before packing: a task's archive is no more trusted than a snapshot.
"""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from schemas.tasks import EpisodeLimits, PublicTask, Task, Workspace
from workers.artifacts import ArtifactError
from workers.episodes.snapshot import Caps, Packed, SnapshotError, pack, unpack
from workers.episodes.step import host_failure


def caps_of(limits: EpisodeLimits) -> Caps:
    """The workspace caps an episode's limits set."""
    return Caps(max_bytes=limits.workspace_max_mb << 20, max_entries=limits.workspace_max_files)


def original_snapshot(workspace: Workspace, caps: Caps, fetch: Callable[[str], bytes]) -> Packed:
    """The canonical snapshot of ``workspace``; ``fetch(url)`` reads an archive (its outages raise through).
    SnapshotError if the archive does not match its sha256, is no snapshot, or the workspace is over ``caps``."""
    with tempfile.TemporaryDirectory(prefix="rs-original-") as scratch:
        root = Path(scratch, "work")
        root.mkdir(mode=0o700)
        if workspace.archive is not None:
            data = fetch(workspace.archive.url)
            if hashlib.sha256(data).hexdigest() != workspace.archive.sha256:
                raise SnapshotError(f"the task's archive {workspace.archive.url} does not match its sha256")
            unpack(data, root, caps)
        for name, text in (workspace.files or {}).items():  # paths checked by the task's schema
            path = root.joinpath(*name.split("/"))
            path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        return pack(root, caps)


class ArchiveReader(Protocol):
    """Where task archives are read from (``ArtifactStore``)."""

    def get(self, url: str) -> bytes: ...


class BrokenOriginalError(SnapshotError):
    """The task's own workspace is unusable (its archive unreadable or not what its sha256 says, or over the
    caps): no episode of the task can start and no submit of it can be graded. The task's fault, never retried."""


def task_original(task: PublicTask | Task, store: ArchiveReader | None) -> Packed:
    """``task``'s original snapshot at its episode caps, its archive (if any) read from ``store``: the one way
    the episode worker and the grading roles make it. An S3 outage raises through (``ArtifactError``,
    retried), so does our own scratch space failing (``OSError``, retried); everything else wrong with the
    task's workspace is ``BrokenOriginalError``."""
    if task.workspace is None:
        raise BrokenOriginalError(f"task {task.task_id} has no workspace")

    def fetch(url: str) -> bytes:
        if store is None:
            raise BrokenOriginalError(f"task {task.task_id}'s workspace is an archive, but this worker has no store")
        try:
            return store.get(url)
        except ArtifactError as exc:
            if exc.outage:
                raise
            raise BrokenOriginalError(f"task {task.task_id}'s workspace archive cannot be read: {exc}") from exc

    try:
        return original_snapshot(task.workspace, caps_of(task.episode_limits), fetch)
    except BrokenOriginalError:
        raise
    except SnapshotError as exc:
        if host_failure(exc):
            raise OSError(f"making task {task.task_id}'s original workspace failed on this host: {exc}") from exc
        raise BrokenOriginalError(f"task {task.task_id}'s workspace is not usable: {exc}") from exc
