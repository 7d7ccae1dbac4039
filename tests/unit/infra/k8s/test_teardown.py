"""containerd's shims leave its process group; ``down`` finds ours by the private socket they name, and only ours."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from infra.k8s.teardown import shim_pids

COMMAND_WITH_A_CHILD = """
import subprocess, sys
from infra.k8s.teardown import exit_on_sigterm
exit_on_sigterm()
print("ready", flush=True)
subprocess.run(["sleep", "300"], check=False)
"""


def _fake_shim(socket: Path) -> subprocess.Popen[bytes]:
    """A process whose command line reads like a shim's: ``containerd-shim-runc-v2 ... -address <socket>``."""
    argv = ["/usr/bin/containerd-shim-runc-v2", "-c", "import time; time.sleep(60)", "-address", str(socket)]
    return subprocess.Popen(argv, executable=sys.executable)


def test_shims_of_our_socket_are_found_and_no_others(tmp_path: Path) -> None:
    ours, theirs = tmp_path / "ours.sock", tmp_path / "theirs.sock"
    shim, other = _fake_shim(ours), _fake_shim(theirs)
    try:
        deadline = time.monotonic() + 10  # a process reads like a shim once it has exec'd, not at fork
        while not (shim_pids(ours) and shim_pids(theirs)) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert shim_pids(ours) == [shim.pid]
        assert shim_pids(theirs) == [other.pid]
    finally:
        for proc in (shim, other):
            proc.kill()
            proc.wait()
    assert shim_pids(ours) == []


def _children(pid: int) -> list[int]:
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def _waiting_on_a_child(pid: int) -> bool:
    """``subprocess.run`` is in its wait (not between fork and exec, where a signal would orphan the child)."""
    return Path(f"/proc/{pid}/wchan").read_text() == "do_wait"


def test_sigterm_ends_a_command_without_orphaning_the_child_it_waits_on() -> None:
    """A terminated ``make k8s-e2e`` left its 40-minute ``go build`` running: SIGTERM now unwinds, killing it."""
    command = subprocess.Popen([sys.executable, "-c", COMMAND_WITH_A_CHILD], stdout=subprocess.PIPE, text=True)
    try:
        assert command.stdout is not None
        assert command.stdout.readline() == "ready\n"
        deadline = time.monotonic() + 10
        while not _waiting_on_a_child(command.pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        children = _children(command.pid)
        assert len(children) == 1
        command.send_signal(signal.SIGTERM)
        assert command.wait(timeout=10) == 128 + signal.SIGTERM
        deadline = time.monotonic() + 10
        while Path(f"/proc/{children[0]}").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not Path(f"/proc/{children[0]}").exists()
    finally:
        left = _children(command.pid) if command.poll() is None else []
        command.kill()
        command.wait()
        if command.stdout is not None:
            command.stdout.close()
        for child in left:
            os.kill(child, signal.SIGKILL)
