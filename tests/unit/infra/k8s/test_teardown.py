"""containerd's shims leave its process group; ``down`` finds ours by the private socket they name, and only ours."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from infra.k8s.teardown import shim_pids


def _fake_shim(socket: Path) -> subprocess.Popen[bytes]:
    """A process whose command line reads like a shim's: ``containerd-shim-runc-v2 ... -address <socket>``."""
    argv = ["/usr/bin/containerd-shim-runc-v2", "-c", "import time; time.sleep(60)", "-address", str(socket)]
    return subprocess.Popen(argv, executable=sys.executable)


def test_shims_of_our_socket_are_found_and_no_others(tmp_path: Path) -> None:
    ours, theirs = tmp_path / "ours.sock", tmp_path / "theirs.sock"
    shim, other = _fake_shim(ours), _fake_shim(theirs)
    try:
        assert shim_pids(ours) == [shim.pid]
        assert shim_pids(theirs) == [other.pid]
    finally:
        for proc in (shim, other):
            proc.kill()
            proc.wait()
    assert shim_pids(ours) == []
