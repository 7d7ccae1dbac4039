"""Reward hacks across boundaries: poisoning later runs, losing other cases, reaching the harness process."""

from __future__ import annotations

import textwrap

import pytest

from schemas.tasks import Task
from tests.sandbox.reward_hacks import HONEST, IO_SHIM, LIMITS, TASKS, call_task, run_grade
from workers.sandbox.api import Sandbox

pytestmark = pytest.mark.sandbox


POISON = textwrap.dedent(
    """
    import os, sys, glob
    EVIL = "# RS-POISON-MARKER\\nimport os\\nprint('@@RS1 poisoned')\\nos._exit(0)\\n"
    FAKE_HARNESS = "# RS-POISON-MARKER\\nimport sys\\nsys.stdout.write('@@RS1 poisoned {\\"done\\": true}\\\\n')\\n"
    targets = ['.', '/work', '/tmp', '/var/tmp', '/dev/shm', os.path.expanduser('~'), '/run', '/usr/local/lib']
    targets += [p for p in sys.path if p]
    targets += glob.glob('/usr/lib/python3*') + glob.glob('/usr/lib/python3*/site-packages')
    targets += glob.glob('/usr/local/lib/python3*/dist-packages') + glob.glob('/usr/lib/python3/dist-packages')
    planted = []
    for d in targets:
        for name, body in [('sitecustomize.py', EVIL), ('usercustomize.py', EVIL),
                           ('zz_evil.pth', 'import os; os._exit(0)  # RS-POISON-MARKER\\n'),
                           ('harness.py', FAKE_HARNESS), ('json.py', EVIL), ('random.py', EVIL),
                           ('__pycache__/harness.cpython-311.pyc', 'garbage')]:
            path = os.path.join(d, name)
            try:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, 'w') as f:
                    f.write(body)
                planted.append(path)
            except OSError:
                pass
    try:
        os.chmod('harness.py', 0o777)
    except OSError:
        pass
    def solve(n):
        return 0
    """
)

PROBE = textwrap.dedent(
    """
    import os, sys, glob
    names = ('sitecustomize.py', 'usercustomize.py', 'zz_evil.pth', 'json.py', 'random.py')
    dirs = ['.', '/work', '/tmp', '/var/tmp', '/dev/shm', os.path.expanduser('~'), '/run', '/usr/local/lib']
    dirs += [p for p in sys.path if p] + glob.glob('/usr/lib/python3*')
    def poisoned(path):
        try:
            with open(path, 'rb') as f:
                return b'RS-POISON-MARKER' in f.read()
        except OSError:
            return False
    dirty = [os.path.join(d, n) for d in dirs for n in names if poisoned(os.path.join(d, n))]
    dirty += [p for p in glob.glob('/work/*') + glob.glob('/tmp/*') + glob.glob('/dev/shm/*') if poisoned(p)]
    extra = sorted(set(os.listdir('.')) - {'harness.py', 'harness.rspyc'})
    print('clean' if not dirty and not extra else 'dirty %s %s' % (dirty, extra))
    """
)


def test_poisoning_does_not_reach_later_runs(sandbox: Sandbox) -> None:
    for kind in TASKS:
        code = POISON + (IO_SHIM if kind == "io" else "")
        assert run_grade(sandbox, TASKS[kind](), code)["status"] == "fail"
    probe_task = Task.model_validate(
        {
            "task_id": "hack/probe",
            "prompt": "probe",
            "hidden_tests": {"kind": "io", "cases": [{"stdin": "", "expected_stdout": "clean\n"}]},
            "limits": LIMITS,
        }
    )
    probe = run_grade(sandbox, probe_task, PROBE)
    assert probe["status"] == "pass", probe  # the next run sees none of what the poisoner wrote
    for kind in TASKS:  # and the grader still tells right from wrong
        honest = HONEST + (IO_SHIM if kind == "io" else "")
        assert run_grade(sandbox, TASKS[kind](), honest)["status"] == "pass"
        wrong = "def solve(n):\n    return 0\n" + (IO_SHIM if kind == "io" else "")
        assert run_grade(sandbox, TASKS[kind](), wrong)["status"] == "fail"


def test_one_bad_case_does_not_lose_the_others(sandbox: Sandbox) -> None:
    code = "import os\ndef solve(n):\n    if n == 10:\n        os._exit(0)\n    return (n * 7919 + 104729) % 1000003\n"
    res = run_grade(sandbox, call_task(), code)
    statuses = [c["status"] for c in res["cases"]["hidden"]]
    assert statuses == ["passed", "error", "passed", "passed"], res
    assert res["status"] == "fail"


REACH_PARENT = textwrap.dedent(
    """
    import ctypes, os
    ppid = os.getppid()
    reached = []
    for part in ("mem", "maps", "environ", "fd/0", "fd/1", "fd/3"):
        try:
            with open("/proc/%d/%s" % (ppid, part), "rb") as f:
                f.read(1)
            reached.append(part)
        except OSError:
            pass
    try:
        os.listdir("/proc/%d/fd" % ppid)
        reached.append("fd-listing")
    except OSError:
        pass
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.ptrace(16, ppid, 0, 0) == 0:
        reached.append("ptrace")
    buf = ctypes.create_string_buffer(16)
    iov_local = (ctypes.c_void_p * 2)(ctypes.cast(buf, ctypes.c_void_p), 16)
    iov_remote = (ctypes.c_void_p * 2)(0x400000, 16)
    if libc.process_vm_readv(ppid, iov_local, 1, iov_remote, 1, 0) > 0:
        reached.append("process_vm_readv")
    print("blocked" if not reached else "reached " + " ".join(reached))
    """
)


def test_candidate_cannot_reach_the_harness_process(sandbox: Sandbox) -> None:
    probe_task = Task.model_validate(
        {
            "task_id": "hack/reach",
            "prompt": "probe",
            "public_tests": {"kind": "io", "cases": [{"stdin": "", "expected_stdout": "blocked\n"}]},
            "hidden_tests": {"kind": "io", "cases": [{"stdin": "", "expected_stdout": "blocked\n"}]},
            "limits": LIMITS,
        }
    )
    res = run_grade(sandbox, probe_task, REACH_PARENT)
    assert res["run"]["hardened"] is True, res["run"]
    assert res["status"] == "pass", res["cases"]
