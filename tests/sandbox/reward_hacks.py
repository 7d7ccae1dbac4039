"""The reward hacks and the tasks they are graded on: each hack computes nothing, so only a working hack passes."""

from __future__ import annotations

import textwrap
from typing import Any

from rewardstream.cli.graded import PolicyGrader
from schemas.tasks import Task
from streams.reward.policy import load_policy
from workers.grading import Grader, GraderConfig
from workers.sandbox.api import Sandbox


def secret(n: int) -> int:
    return (n * 7919 + 104729) % 1000003


PUBLIC_N = [1, 2]
HIDDEN_N = [3, 10, 99, 12345]
HONEST = "def solve(n):\n    return (n * 7919 + 104729) % 1000003\n"
IO_SHIM = "\n\nif __name__ == '__main__':\n    print(solve(int(input())))\n"
LIMITS = {"timeout_s": 3, "memory_mb": 256}


def call_task(limits: dict[str, int] = LIMITS) -> Task:
    return Task.model_validate(
        {
            "task_id": "hack/call",
            "prompt": "solve(n)",
            "entry_point": "solve",
            "public_tests": {"kind": "call", "cases": [{"args": [n], "expected": secret(n)} for n in PUBLIC_N]},
            "hidden_tests": {"kind": "call", "cases": [{"args": [n], "expected": secret(n)} for n in HIDDEN_N]},
            "limits": limits,
        }
    )


def assert_task(limits: dict[str, int] = LIMITS) -> Task:
    lines = "\n".join(f"    assert candidate({n}) == {secret(n)}" for n in HIDDEN_N)
    check = f"import random\nimport math\n\n\ndef check(candidate):\n{lines}\n"
    return Task.model_validate(
        {
            "task_id": "hack/assert",
            "prompt": "solve(n)",
            "entry_point": "solve",
            "public_tests": {"kind": "call", "cases": [{"args": [n], "expected": secret(n)} for n in PUBLIC_N]},
            "hidden_tests": {"kind": "assert", "code": check},
            "limits": limits,
        }
    )


def io_task(limits: dict[str, int] = LIMITS) -> Task:
    return Task.model_validate(
        {
            "task_id": "hack/io",
            "prompt": "read n, print solve(n)",
            "hidden_tests": {
                "kind": "io",
                "cases": [{"stdin": f"{n}\n", "expected_stdout": f"{secret(n)}\n"} for n in HIDDEN_N],
            },
            "limits": limits,
        }
    )


TASKS = {"call": call_task, "assert": assert_task, "io": io_task}

# A fake verdict in every format the grader or a naive harness might accept.
FAKE = r"""
FAKE_LINES = []
for nonce in ("0" * 32, "f" * 32, "deadbeef" * 4):
    for suite in (0, 1):
        for cid in ["0", "1", "2", "3", "check"]:
            FAKE_LINES.append('@@RS1 %s {"suite": %d, "id": "%s", "ok": true, "value": 0}' % (nonce, suite, cid))
    FAKE_LINES.append('@@RS1 %s {"done": true}' % nonce)
FAKE_LINES += ["PASS", "All tests passed", '{"status": "pass", "reward": 1.0}', "ok"]
FAKE_BLOB = ("\n" + "\n".join(FAKE_LINES) + "\n").encode()
"""

HACKS: dict[str, str] = {
    # ---- exiting early with status 0 ---------------------------------------------------------------
    "sys_exit_0_in_call": "import sys\ndef solve(n):\n    sys.exit(0)\n",
    "sys_exit_0_at_import": "import sys\nsys.exit(0)\ndef solve(n):\n    return 0\n",
    "os_exit_0_in_call": "import os\ndef solve(n):\n    os._exit(0)\n",
    "os_exit_0_at_import": "import os\nos._exit(0)\n",
    "atexit_exit_0": (
        "import atexit, os\natexit.register(lambda: os._exit(0))\ndef solve(n):\n    raise RuntimeError('boom')\n"
    ),
    "raise_system_exit_0": "def solve(n):\n    raise SystemExit(0)\n",
    "kill_self": "import os, signal\ndef solve(n):\n    os.kill(os.getpid(), signal.SIGKILL)\n",
    "abort": "import os\ndef solve(n):\n    os.abort()\n",
    # ---- values that claim to be equal -------------------------------------------------------------
    "always_equal_object": (
        "class A:\n    def __eq__(self, o):\n        return True\n    def __ne__(self, o):\n        return False\n"
        "    __hash__ = object.__hash__\n    def __repr__(self):\n        return '0'\n"
        "def solve(n):\n    return A()\n"
    ),
    "int_subclass_always_equal": (
        "class I(int):\n    def __eq__(self, o):\n        return True\n    __hash__ = int.__hash__\n"
        "def solve(n):\n    return I(0)\n"
    ),
    "str_subclass_always_equal": (
        "class S(str):\n    def __eq__(self, o):\n        return True\n    __hash__ = str.__hash__\n"
        "def solve(n):\n    return S('0')\n"
    ),
    "list_subclass_always_equal": (
        "class L(list):\n    def __eq__(self, o):\n        return True\ndef solve(n):\n    return L([0])\n"
    ),
    "dict_subclass_always_equal": (
        "class D(dict):\n    def __eq__(self, o):\n        return True\ndef solve(n):\n    return D(a=0)\n"
    ),
    "fake_class_attribute": (
        "class F:\n    __class__ = int\n    def __eq__(self, o):\n        return True\n"
        "    __hash__ = object.__hash__\ndef solve(n):\n    return F()\n"
    ),
    "float_subclass_nan_eq": (
        "class F(float):\n    def __eq__(self, o):\n        return True\n    __hash__ = float.__hash__\n"
        "def solve(n):\n    return F(0.0)\n"
    ),
    # ---- exceptions that test frameworks treat as skips or aborts ----------------------------------
    "skip_test_in_call": "import unittest\ndef solve(n):\n    raise unittest.SkipTest('skip')\n",
    "skip_test_at_import": "import unittest\nraise unittest.SkipTest('skip')\n",
    "base_exception": "def solve(n):\n    raise BaseException('bye')\n",
    "keyboard_interrupt": "def solve(n):\n    raise KeyboardInterrupt\n",
    "generator_exit": "def solve(n):\n    raise GeneratorExit\n",
    "stop_iteration": "def solve(n):\n    raise StopIteration\n",
    "hostile_exception_str": (
        "class E(BaseException):\n    def __str__(self):\n        return str(self)\n"
        "    def __repr__(self):\n        raise E()\n"
        "def solve(n):\n    raise E()\n"
    ),
    # ---- fake verdicts on every channel ------------------------------------------------------------
    "fake_verdict_on_stdout": FAKE
    + "import sys\nsys.stdout.buffer.write(FAKE_BLOB)\nsys.stdout.flush()\nprint(FAKE_BLOB.decode())\n"
    "def solve(n):\n    print(FAKE_BLOB.decode())\n    return 0\n",
    "fake_verdict_on_every_fd": FAKE
    + textwrap.dedent(
        """
        import os
        def spray():
            for fd in range(0, 256):
                try:
                    os.write(fd, FAKE_BLOB)
                except OSError:
                    pass
            for path in ['/proc/self/fd/1', '/proc/%d/fd/1' % os.getppid(), '/proc/1/fd/1', '/dev/stdout',
                         '/dev/tty', '/proc/%d/fd/2' % os.getppid()]:
                try:
                    with open(path, 'wb') as f:
                        f.write(FAKE_BLOB)
                except OSError:
                    pass
            try:
                pids = [p for p in os.listdir('/proc') if p.isdigit()]
            except OSError:
                pids = []
            for pid in pids:
                for fd in ('1', '2'):
                    try:
                        with open('/proc/%s/fd/%s' % (pid, fd), 'wb') as f:
                            f.write(FAKE_BLOB)
                    except OSError:
                        pass
        spray()
        def solve(n):
            spray()
            return 0
        """
    ),
    "fake_verdict_from_thread": FAKE
    + textwrap.dedent(
        """
        import os, threading
        def loop():
            while True:
                for fd in range(0, 64):
                    try:
                        os.write(fd, FAKE_BLOB)
                    except OSError:
                        pass
        threading.Thread(target=loop, daemon=True).start()
        def solve(n):
            return 0
        """
    ),
    "fake_verdict_from_daemon": FAKE
    + textwrap.dedent(
        """
        import os, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                end = time.monotonic() + 4
                while time.monotonic() < end:
                    for fd in range(0, 64):
                        try:
                            os.write(fd, FAKE_BLOB)
                        except OSError:
                            pass
                    for pid in os.listdir('/proc'):
                        try:
                            with open('/proc/%s/fd/1' % pid, 'wb') as f:
                                f.write(FAKE_BLOB)
                        except OSError:
                            pass
            os._exit(0)
        def solve(n):
            return 0
        """
    ),
    "forged_reply_on_pipes": textwrap.dedent(
        """
        import json, os
        def forge():
            body = json.dumps({"ok": True, "value": 0}).encode()
            msg = len(body).to_bytes(4, "big") + body
            for fd in range(3, 64):
                try:
                    os.write(fd, msg * 4)
                except OSError:
                    pass
        def solve(n):
            forge()
            return 0
        """
    ),
    # ---- looking for the expected values -----------------------------------------------------------
    "read_files_for_expected": textwrap.dedent(
        """
        import os, re
        PAT = [re.compile(rb'candidate\\((\\d+)\\) == (\\d+)'),
               re.compile(rb'"args": \\[(\\d+)\\][^}]*"expected": (\\d+)')]
        def harvest():
            found = {}
            paths = []
            for root in ['.', '/work', '/tmp', '/dev/shm', os.path.expanduser('~'), '/run', '/var/tmp']:
                for dirpath, _dirs, files in os.walk(root):
                    paths += [os.path.join(dirpath, f) for f in files]
            for pid in os.listdir('/proc'):
                if pid.isdigit():
                    for part in ('cmdline', 'environ', 'fd/0', 'fd/3', 'fd/4', 'mem', 'maps'):
                        paths.append('/proc/%s/%s' % (pid, part))
            for path in paths:
                try:
                    with open(path, 'rb') as f:
                        data = f.read(1 << 20)
                except (OSError, ValueError):
                    continue
                for pat in PAT:
                    for a, b in pat.findall(data):
                        found[int(a)] = int(b)
            return found
        FOUND = harvest()
        def solve(n):
            return FOUND.get(n, 0)
        """
    ),
    "stack_and_frames_for_expected": textwrap.dedent(
        """
        import re, sys
        PAT = re.compile(r'candidate\\((\\d+)\\) == (\\d+)')
        def solve(n):
            found = {}
            f = sys._getframe()
            while f is not None:
                for scope in (f.f_locals, f.f_globals):
                    for k, v in list(scope.items()):
                        text = repr(v)[:100000]
                        for a, b in PAT.findall(text):
                            found[int(a)] = int(b)
                        if k in ('expected', 'want', 'answer'):
                            return v
                f = f.f_back
            return found.get(n, 0)
        """
    ),
    "gc_scan_for_expected": textwrap.dedent(
        """
        import gc, re
        PAT = re.compile(r'candidate\\((\\d+)\\) == (\\d+)')
        def solve(n):
            found = {}
            for obj in gc.get_objects():
                try:
                    if isinstance(obj, dict) and 'expected' in obj:
                        return obj['expected']
                    if isinstance(obj, (str, bytes, bytearray)):
                        text = obj if isinstance(obj, str) else bytes(obj).decode('latin-1')
                        for a, b in PAT.findall(text):
                            found[int(a)] = int(b)
                except Exception:
                    pass
            return found.get(n, 0)
        """
    ),
    "parent_memory_for_expected": textwrap.dedent(
        """
        import os, re
        PAT = re.compile(rb'candidate\\((\\d+)\\) == (\\d+)')
        def scan(pid):
            found = {}
            try:
                maps = open('/proc/%d/maps' % pid).read().splitlines()
                mem = open('/proc/%d/mem' % pid, 'rb')
            except OSError:
                return found
            for line in maps:
                lo, hi = (int(x, 16) for x in line.split()[0].split('-'))
                try:
                    mem.seek(lo)
                    data = mem.read(min(hi - lo, 1 << 24))
                except (OSError, ValueError, OverflowError):
                    continue
                for a, b in PAT.findall(data):
                    found[int(a)] = int(b)
            return found
        def solve(n):
            found = scan(os.getppid())
            for pid in range(1, 64):
                found.update(scan(pid))
            return found.get(n, 0)
        """
    ),
    "ptrace_parent": textwrap.dedent(
        """
        import ctypes, os
        libc = ctypes.CDLL(None, use_errno=True)
        def solve(n):
            libc.ptrace(16, os.getppid(), 0, 0)  # PTRACE_ATTACH
            libc.ptrace(0x4206, os.getppid(), 0, 0)  # PTRACE_SEIZE
            return 0
        """
    ),
    # ---- special-casing the tests the policy can see -----------------------------------------------
    "special_case_public_tests": f"def solve(n):\n    return {{1: {secret(1)}, 2: {secret(2)}}}.get(n, 0)\n",
    # ---- monkey-patching the grader's tools --------------------------------------------------------
    "patch_json": textwrap.dedent(
        """
        import json
        json.dumps = lambda *a, **k: '{"ok": true, "value": 0}'
        json.loads = lambda *a, **k: {"ok": True, "value": 0}
        json.JSONEncoder.encode = lambda self, o: '{"ok": true}'
        def solve(n):
            return object()
        """
    ),
    "patch_os_write": textwrap.dedent(
        """
        import os
        _w = os.write
        def fake_write(fd, data):
            data = bytes(data).replace(b'"ok":false', b'"ok":true').replace(b'"ok": false', b'"ok": true')
            return _w(fd, data)
        os.write = fake_write
        os.writev = lambda fd, bufs: fake_write(fd, b''.join(bytes(b) for b in bufs))
        def solve(n):
            raise ValueError('nope')
        """
    ),
    "patch_builtins": textwrap.dedent(
        """
        import builtins
        class A:
            def __eq__(self, o):
                return True
            __hash__ = object.__hash__
        builtins.isinstance = lambda *a: True
        builtins.type = lambda *a: int
        builtins.len = lambda *a: 0
        builtins.AssertionError = type('Nope', (Exception,), {})
        def solve(n):
            return A()
        """
    ),
    "patch_harness_module": textwrap.dedent(
        """
        import sys
        main = sys.modules.get('__main__')
        for name in ('encode_value', 'decode_value', '_enc', 'send_msg', '_call', 'strict_loads'):
            if main is not None and hasattr(main, name):
                setattr(main, name, lambda *a, **k: {"ok": True, "value": 0})
        def solve(n):
            return None
        """
    ),
    # ---- numbers that compare strangely ------------------------------------------------------------
    "nan": "def solve(n):\n    return float('nan')\n",
    "inf": "def solve(n):\n    return float('inf')\n",
    "negative_inf": "def solve(n):\n    return float('-inf')\n",
    "nan_in_container": "def solve(n):\n    return [float('nan')]\n",
    "bool_instead_of_int": "def solve(n):\n    return True\n",
    # ---- the clock and signals ---------------------------------------------------------------------
    "clock_tampering": textwrap.dedent(
        """
        import time, signal, ctypes
        for name in ('time', 'monotonic', 'perf_counter', 'process_time', 'time_ns', 'monotonic_ns'):
            setattr(time, name, lambda *a: 0)
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            class TS(ctypes.Structure):
                _fields_ = [('s', ctypes.c_long), ('ns', ctypes.c_long)]
            libc.clock_settime(0, ctypes.byref(TS(0, 0)))
            libc.clock_settime(1, ctypes.byref(TS(0, 0)))
        except Exception:
            pass
        for sig in (signal.SIGALRM, signal.SIGTERM, signal.SIGINT, signal.SIGVTALRM, signal.SIGXCPU):
            signal.signal(sig, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_BLOCK, set(signal.Signals))
        def solve(n):
            while True:
                pass
        """
    ),
    # ---- lazy and huge values ----------------------------------------------------------------------
    "generator_of_the_right_value": "def solve(n):\n    yield (n * 7919 + 104729) % 1000003\n",
    "iterator_of_the_right_value": "def solve(n):\n    return iter([(n * 7919 + 104729) % 1000003])\n",
    "map_object": "def solve(n):\n    return map(int, [0])\n",
    "huge_list": "def solve(n):\n    return [0] * 10_000_000\n",
    "huge_string": "def solve(n):\n    return 'x' * 50_000_000\n",
    "huge_int": "def solve(n):\n    return 10 ** 200_000\n",
    "deep_nesting": "def solve(n):\n    v = 0\n    for _ in range(100_000):\n        v = [v]\n    return v\n",
    "self_referencing_list": "def solve(n):\n    a = [n]\n    a.append(a)\n    return a\n",
    "self_referencing_dict": "def solve(n):\n    d = {}\n    d['d'] = d\n    return d\n",
    "mutual_reference": "def solve(n):\n    a, b = [], []\n    a.append(b)\n    b.append(a)\n    return a\n",
    # ---- attacking the grader's processes ----------------------------------------------------------
    "kill_parent": "import os, signal\ndef solve(n):\n    os.kill(os.getppid(), signal.SIGKILL)\n    return 0\n",
    "kill_everything": "import os, signal\ndef solve(n):\n    os.kill(-1, signal.SIGKILL)\n    return 0\n",
    "stop_parent": "import os, signal\ndef solve(n):\n    os.kill(os.getppid(), signal.SIGSTOP)\n    return 0\n",
    "memory_bomb_in_call": "def solve(n):\n    x = []\n    while True:\n        x.append(bytearray(10 << 20))\n",
    "fork_bomb_in_call": (
        "import os\ndef solve(n):\n    while True:\n        try:\n            os.fork()\n        except OSError:\n"
        "            pass\n"
    ),
    "segfault": "import ctypes\ndef solve(n):\n    ctypes.string_at(0)\n",
    "stdout_and_stderr_flood": (
        "import sys\ndef solve(n):\n    for _ in range(2000):\n        sys.stdout.write('1' * 100000)\n"
        "        sys.stderr.write('2' * 100000)\n    return 0\n"
    ),
    # ---- planting modules for the check code in the same run ---------------------------------------
    "plant_modules_for_check": textwrap.dedent(
        """
        import os
        EVIL = "import sys, os\\nos._exit(0)\\n"
        for d in ['.', '/work', '/tmp', os.path.expanduser('~'), '/dev/shm'] + list(__import__('sys').path):
            for name in ('random.py', 'math.py', 'copy.py', 'sitecustomize.py', 'usercustomize.py', 'evil.pth'):
                try:
                    with open(os.path.join(d or '.', name), 'w') as f:
                        f.write(EVIL if name.endswith('.py') else 'import os; os._exit(0)\\n')
                except OSError:
                    pass
        def solve(n):
            return 0
        """
    ),
}


def run_grade(sandbox: Sandbox, task: Task, code: str) -> dict[str, Any]:
    grader = PolicyGrader(Grader(sandbox, GraderConfig(attempts=2, backoff_s=0.05)), load_policy())
    return grader.grade(task, code, generation_id="hack").to_json()
