"""A workspace task's original workspace as a snapshot: what every ``open`` of the task starts from.

Why through ``snapshot.pack`` even for inline files: the original is then canonical bytes like every later
snapshot (the same task gives the same sha256 on every worker), and an archive from S3 is restored by
``snapshot.unpack`` with its checks (no links out, no devices, inflated at most to the caps) before packing.
"""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Callable
from pathlib import Path

from schemas.tasks import Workspace
from workers.episodes.snapshot import Caps, Packed, SnapshotError, pack, unpack


def original_snapshot(workspace: Workspace, caps: Caps, fetch: Callable[[str], bytes]) -> Packed:
    """The canonical snapshot of ``workspace``; ``fetch(url)`` reads an archive. SnapshotError if the archive
    does not match its sha256, is no snapshot, or the workspace is over ``caps``."""
    with tempfile.TemporaryDirectory(prefix="rs-original-") as scratch:
        root = Path(scratch, "work")
        root.mkdir()
        if workspace.archive is not None:
            data = fetch(workspace.archive.url)
            if hashlib.sha256(data).hexdigest() != workspace.archive.sha256:
                raise SnapshotError(f"archive {workspace.archive.url} does not match its sha256")
            unpack(data, root, caps)
        for name, text in (workspace.files or {}).items():
            path = root.joinpath(*name.split("/"))
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        return pack(root, caps)
