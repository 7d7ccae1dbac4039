"""What the step unit tests share: the caps, trees made on the host and the runner's packer and restorer."""

from __future__ import annotations

import os
from pathlib import Path

from guest import workspace_snapshot
from workers.episodes.snapshot import Caps
from workers.episodes.step import (
    tar_budget,
)

CAPS = Caps(max_bytes=1 << 20, max_entries=100)


def make_tree(root: Path, files: dict[str, bytes], links: dict[str, bytes]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    for name, target in links.items():
        os.symlink(target, os.fsencode(root / name))
    return root


def runner_pack(root: Path, caps: Caps = CAPS) -> tuple[bytes, workspace_snapshot.Packer]:
    """The runner's tar of ``root`` (the packer walks its cwd), and the packer (what it counted, dropped)."""
    old = os.getcwd()
    os.chdir(root)
    try:
        packer = workspace_snapshot.Packer(caps.max_bytes, caps.max_entries, tar_budget(caps))
        return b"".join(packer.pack()), packer
    finally:
        os.chdir(old)
