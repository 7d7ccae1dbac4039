"""The harness's sweep of a case's leftovers kills what the harness started, and nothing else, wherever it runs.

Why this is a test of its own: the sweep once killed every process it could signal. Inside a sandbox that is the
run; on a host (unit tests run the harness unsandboxed, as root in CI) it was the machine's every process.
The sweeper here runs as an unprivileged user when the suite runs as root, next to a process of that same user:
a sweep that reached beyond its own tree would kill the neighbour (and nothing more) and fail the test.
"""

from __future__ import annotations

import json
import os
import pwd
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from workers.grading.suites import harness_program
from workers.sandbox.guest.clock import ProcUsage, run_tree

#: Loads the shipped harness source from stdin, becomes a subreaper, leaves a daemon (double fork, own
#: session: reparented to the harness) and a child in its own group, then sweeps.
SWEEPER = """
import json, os, sys, time
ns = {"__name__": "harness_under_test"}
exec(compile(sys.stdin.buffer.read(), "harness.py", "exec"), ns)
subreaper = ns["become_subreaper"]()
r, w = os.pipe()
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.write(w, b"%d\\n" % os.getpid())
        time.sleep(120)  # ends by itself should the sweeper fail before it
        os._exit(0)
    os._exit(0)
os.wait()
if os.fork() == 0:
    os.setpgid(0, 0)
    os.write(w, b"%d\\n" % os.getpid())
    time.sleep(120)
    os._exit(0)
got = b""
while got.count(b"\\n") < 2:  # both pids may arrive in one read
    got += os.read(r, 64)
pids = [int(line) for line in got.split()]
ns["sweep_strays"]()
def gone(pid):
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] in (b"Z", b"X")
    except OSError:
        return True
deadline = time.monotonic() + 10
while not all(gone(p) for p in pids) and time.monotonic() < deadline:
    ns["sweep_strays"]()
    time.sleep(0.01)
print(json.dumps({"subreaper": subreaper, "left": [p for p in pids if not gone(p)]}))
"""


def _unprivileged() -> dict[str, Any]:
    """Popen's ``user``/``group`` for the sweeper and its neighbour: nobody when root, else nothing."""
    if os.getuid() != 0:
        return {}
    nobody = pwd.getpwnam("nobody")
    return {"user": nobody.pw_uid, "group": nobody.pw_gid, "extra_groups": []}


def _interpreter() -> str:
    """A Python the unprivileged user may run: the system's (the sandbox images' kind) when there is one."""
    system = "/usr/bin/python3"
    if os.getuid() == 0 and os.access(system, os.X_OK):
        return system
    return sys.executable


@pytest.fixture
def neighbour() -> Iterator[subprocess.Popen[bytes]]:
    """A process of the sweeper's user that the sweeper did not start."""
    proc = subprocess.Popen(["sleep", "120"], **_unprivileged())
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def test_the_sweep_kills_the_harness_tree_and_spares_a_neighbour(neighbour: subprocess.Popen[bytes]) -> None:
    done = subprocess.run(
        [_interpreter(), "-I", "-S", "-c", SWEEPER],
        input=harness_program().source,
        capture_output=True,
        timeout=60,
        check=False,
        cwd="/",
        **_unprivileged(),
    )
    assert done.returncode == 0, done.stderr.decode()
    report = json.loads(done.stdout)
    assert report == {"subreaper": True, "left": []}
    assert neighbour.poll() is None, "the sweep killed a process the harness did not start"


def _busy_child_of_a_sleeper() -> subprocess.Popen[bytes]:
    """A sleeping process whose child spins; its stdout says the child's pid."""
    code = "import os, time\npid = os.fork()\nif pid == 0:\n    while True: pass\nprint(pid, flush=True)\n"
    code += "time.sleep(120)\n"
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)


def test_a_run_is_its_tree_its_cpu_counts_and_a_neighbours_does_not() -> None:
    run = _busy_child_of_a_sleeper()
    neighbour = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    spinner = 0
    try:
        assert run.stdout is not None
        spinner = int(run.stdout.readline())
        tree = run_tree(run.pid)
        assert set(tree) == {run.pid, spinner}
        assert neighbour.pid not in tree
        started = time.monotonic()
        usage = ProcUsage(root=run.pid)
        cpu = 0.0
        while cpu < 0.3 and time.monotonic() < started + 20:
            cpu, _ = usage.sample()
            time.sleep(0.02)
        assert cpu >= 0.3, "the spinning child's CPU is the run's"
        # One spinner's CPU, not the neighbour's on top: the figure stays under one and a half times the wall.
        assert usage.sample()[0] <= 1.5 * (time.monotonic() - started) + 0.1
    finally:
        if run.stdout is not None:
            run.stdout.close()
        if spinner:
            os.kill(spinner, signal.SIGKILL)
        for proc in (run, neighbour):
            proc.kill()
            proc.wait()
