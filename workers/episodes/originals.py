"""The original workspace of a workspace task as a snapshot: what protected paths are reset to before grading
and what the judge diffs the final workspace against.

Why canonical: the task's files (inline, or an archive in S3 pinned by its sha256) are written into a private
scratch directory and packed by ``snapshot.pack``, so the original is the same bytes wherever it is made and
compares with the agent's snapshots entry by entry. An archive is restored with ``snapshot.unpack`` (its
checks and caps) first: a task's archive is no more trusted than a snapshot.
"""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Callable
from pathlib import Path

from schemas.tasks import PublicTask, Task, Workspace
from workers.episodes.snapshot import Caps, SnapshotError, pack, unpack


def caps_of(task: PublicTask | Task) -> Caps:
    """The workspace caps of ``task`` (its episode limits, or their defaults)."""
    limits = task.episode_limits
    return Caps(max_bytes=limits.workspace_max_mb << 20, max_entries=limits.workspace_max_files)


def original_snapshot(workspace: Workspace, caps: Caps, fetch: Callable[[str], bytes]) -> bytes:
    """The canonical snapshot of ``workspace``; ``fetch`` reads an archive's ``s3://`` URL (its outages raise
    through). SnapshotError when the archive does not match its sha256 or is not a snapshot within ``caps``."""
    with tempfile.TemporaryDirectory(prefix="rs-original-") as scratch:
        root = Path(scratch, "workspace")
        root.mkdir(mode=0o700)
        if workspace.archive is not None:
            data = fetch(workspace.archive.url)
            if hashlib.sha256(data).hexdigest() != workspace.archive.sha256:
                raise SnapshotError(f"the task's archive {workspace.archive.url} does not match its sha256")
            unpack(data, root, caps)
        else:
            for name, text in (workspace.files or {}).items():  # paths checked by the task's schema
                path = root / name
                path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
                path.write_text(text, encoding="utf-8")
        return pack(root, caps).data
