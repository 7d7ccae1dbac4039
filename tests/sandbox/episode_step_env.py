"""What the agent-step sandbox tests share: caps, limits, snapshots made on the host and one step run."""

from __future__ import annotations

import io
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from schemas.status import SandboxStatus
from workers.episodes.snapshot import Caps, pack
from workers.episodes.step import StepAction, StepLimits, StepOutcome, run_step
from workers.sandbox.api import Sandbox

CAPS = Caps(max_bytes=4 << 20, max_entries=200)
LIMITS = StepLimits(memory_mb=256, pids_limit=64, output_cap_bytes=64 << 10, read_cap_bytes=64 << 10, grace_s=20)


def snapshot(files: dict[str, bytes] | None = None, links: dict[str, str] | None = None) -> bytes:
    """A canonical snapshot of a directory holding ``files`` and ``links`` (made on the host, no program run)."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for name, data in (files or {}).items():
            path = root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        for name, target in (links or {}).items():
            path = root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.symlink_to(target)
        return pack(root, CAPS).data


def members(data: bytes) -> dict[str, tuple[str, Any, int]]:
    """name -> ('f', content, mode) / ('d', None, mode) / ('l', target, mode) of a snapshot."""
    out: dict[str, tuple[str, Any, int]] = {}
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for m in tar.getmembers():
            if m.isfile():
                f = tar.extractfile(m)
                assert f is not None
                out[m.name] = ("f", f.read(), m.mode)
            elif m.isdir():
                out[m.name] = ("d", None, m.mode)
            else:
                assert m.issym(), m.name
                out[m.name] = ("l", m.linkname, m.mode)
    return out


def step(sandbox: Sandbox, snap: bytes, action: StepAction, limits: StepLimits = LIMITS) -> StepOutcome:
    outcome = run_step(sandbox, snap, action, CAPS, limits)
    assert outcome.status != SandboxStatus.SANDBOX_ERROR, outcome.reason
    return outcome


def sh(sandbox: Sandbox, snap: bytes, command: str, timeout_s: float = 10.0, **kw: Any) -> StepOutcome:
    return step(sandbox, snap, StepAction.exec(command, timeout_s), **kw)
