"""Containment of crashes and signals, and of what one run could leave for a later or concurrent run."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tests.sandbox.containment_env import S, json_out
from workers.sandbox.api import Sandbox, SandboxResult

from .conftest import run_py

pytestmark = pytest.mark.sandbox


# --- crashes and signals ------------------------------------------------------------------------------


def test_ctypes_segfault(sandbox: Sandbox) -> None:
    r = run_py(sandbox, "import ctypes; ctypes.string_at(0)")
    assert (r.status, r.signal, r.exit_code) == (S.CRASHED, 11, None)


def test_abort(sandbox: Sandbox) -> None:
    r = run_py(sandbox, "import os; os.abort()")
    assert (r.status, r.signal) == (S.CRASHED, 6)


def test_self_kill_is_killed(sandbox: Sandbox) -> None:
    r = run_py(sandbox, "import os, signal; os.kill(os.getpid(), signal.SIGTERM)")
    assert (r.status, r.signal) == (S.KILLED, 15)


def test_kill_everything_it_can(sandbox: Sandbox) -> None:
    code = """
import os, signal
results = {}
for name, target in (('pid1', 1), ('parent', os.getppid()), ('all', -1)):
    if name == 'parent' and target <= 1:
        results[name] = 'no-parent'
        continue
    try:
        os.kill(target, signal.SIGKILL); results[name] = 'sent'
    except OSError as e:
        results[name] = e.errno
import json; print(json.dumps(results))
"""
    r = run_py(sandbox, code)
    # Whatever it signalled, it stayed inside: it survives and the worker (this test) is alive.
    assert r.status is S.OK, r
    assert json_out(r)["all"] in ("sent", 1, 3)


def test_daemon_does_not_survive_the_run(sandbox: Sandbox, tmp_path: Path) -> None:
    code = """
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        for fd in (0, 1, 2): os.close(fd)
        while True:
            time.sleep(0.01)
    os._exit(0)
print('parent done')
"""
    r = run_py(sandbox, code)
    assert (r.status, r.stdout) == (S.OK, b"parent done\n")
    # The fixture audit proves the grandchild daemon is gone.


def test_runs_are_pristine(sandbox: Sandbox) -> None:
    poison = """
import os
for path in ('/work/poison', '/tmp/poison', '/dev/shm/poison', os.path.expanduser('~/poison')):
    try:
        open(path, 'w').write('x')
    except OSError:
        pass
for site in ('/usr/lib/python3/dist-packages/sitecustomize.py', '/usr/lib/python3.11/sitecustomize.py'):
    try:
        open(site, 'w').write('print(1)')
    except OSError:
        pass
print('poisoned')
"""
    assert run_py(sandbox, poison).stdout == b"poisoned\n"
    check = """
import os, glob
found = [p for p in ('/work/poison', '/tmp/poison', '/dev/shm/poison') if os.path.exists(p)]
found += [p for p in glob.glob('/usr/lib/python3*/**/sitecustomize.py', recursive=True)
          if 'print(1)' in open(p).read()]
print(found, sorted(os.listdir('/work')), sorted(os.listdir('/tmp')))
"""
    r = run_py(sandbox, check)
    assert r.stdout == b"[] ['main.py'] []\n", r.stdout


# --- concurrency --------------------------------------------------------------------------------------


def test_concurrent_runs_are_isolated(sandbox: Sandbox) -> None:
    results: dict[int, SandboxResult] = {}

    def work(i: int) -> None:
        code = f"import os, time\nopen('mine', 'w').write('{i}')\ntime.sleep(0.2)\nprint(open('mine').read())"
        results[i] = run_py(sandbox, code)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert sorted(results) == list(range(8))
    for i, r in results.items():
        assert r.status is S.OK, r
        assert r.stdout == f"{i}\n".encode()


def test_sysv_ipc_and_mqueue_do_not_reach_the_next_run(sandbox: Sandbox) -> None:
    """SysV shared memory / POSIX message queues left by one run are invisible to every later run."""
    leave = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
shm = libc.shmget(0x5253, 4096, 0o1000 | 0o666)  # IPC_CREAT
sem = libc.semget(0x5254, 1, 0o1000 | 0o666)
msg = libc.msgget(0x5255, 0o1000 | 0o666)
made = []
try:
    fd = os.open('/dev/mqueue/rs-left', os.O_CREAT | os.O_WRONLY, 0o666)
    os.close(fd)
    made.append('mq')
except OSError:
    pass
print(shm >= 0, sem >= 0, msg >= 0, made)
"""
    first = run_py(sandbox, leave)
    assert first.status is S.OK, first.stderr
    check = """
import os
def rows(p):
    try:
        return len(open(p).read().splitlines()) - 1
    except OSError:
        return 0
mq = sorted(os.listdir('/dev/mqueue')) if os.path.isdir('/dev/mqueue') else []
print(rows('/proc/sysvipc/shm'), rows('/proc/sysvipc/sem'), rows('/proc/sysvipc/msg'), mq)
"""
    for _ in range(3):  # whichever pooled container (or fresh sandbox) the next runs get
        r = run_py(sandbox, check)
        assert r.status is S.OK, r.stderr
        assert r.stdout == b"0 0 0 []\n", (first.stdout, r.stdout)
