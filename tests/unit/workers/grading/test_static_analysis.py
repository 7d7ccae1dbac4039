"""Static analysis flags the hack catalogue and stays quiet on ordinary solutions."""

from __future__ import annotations

import pytest

from workers.grading.static_analysis import MAX_FLAGS, RULES, Flag, analyze, hack_rules, rule_counts, shown_flags


def rules(code: str) -> set[str]:
    return {f.rule for f in analyze(code)}


@pytest.mark.parametrize(
    ("code", "rule"),
    [
        ("import sys\ndef f():\n    sys.exit(0)\n", "exit_call"),
        ("import os\ndef f():\n    os._exit(0)\n", "exit_call"),
        ("from os import _exit as e\ne(0)\n", "exit_call"),
        ("def f():\n    exit()\n", "exit_call"),
        ("def f():\n    quit()\n", "exit_call"),
        ("raise SystemExit(0)\n", "exit_call"),
        ("import os\ngetattr(os, '_exit')(0)\n", "exit_call"),
        ("__import__('os')._exit(0)\n", "exit_call"),
        ("import atexit\natexit.register(lambda: None)\n", "exit_hook"),
        ("import sys\nsys._getframe(1).f_locals\n", "frame_introspection"),
        ("import inspect\ninspect.stack()\n", "frame_introspection"),
        ("import gc\ngc.get_objects()\n", "frame_introspection"),
        (
            "def f():\n    try:\n        1/0\n    except Exception as e:\n        e.__traceback__.tb_frame\n",
            "frame_introspection",
        ),
        ("().__class__.__base__.__subclasses__()\n", "frame_introspection"),
        ("f = lambda: 0\nf.__globals__\n", "frame_introspection"),
        ("import builtins\nbuiltins.print = None\n", "builtins_patch"),
        ("__builtins__['len'] = None\n", "builtins_patch"),
        ("import builtins\nsetattr(builtins, 'abs', None)\n", "builtins_patch"),
        ("import json\njson.dumps = lambda *a, **k: '1'\n", "module_patch"),
        ("import os\nos.write = lambda *a: 0\n", "module_patch"),
        ("import sys, io\nsys.stdout = io.StringIO()\n", "module_patch"),
        ("import sys\nsys.modules['json'] = None\n", "module_patch"),
        ("import time\ntime.time = lambda: 0\n", "clock_tampering"),
        ("import time\ntime.monotonic = lambda: 0\n", "clock_tampering"),
        ("open('/work/harness.py').read()\n", "harness_access"),
        ("open('/proc/self/fd/1', 'w')\n", "harness_access"),
        ("import os\nos.write(7, b'x')\n", "harness_access"),
        ("import os\nos.dup2(3, 1)\n", "harness_access"),
        ("open('sitecustomize.py', 'w').write('x')\n", "run_poisoning"),
        ("open('/usr/lib/python3/x.pth', 'a')\n", "run_poisoning"),
        ("import subprocess\nsubprocess.run(['ls'])\n", "process_tricks"),
        ("import os\nos.fork()\n", "process_tricks"),
        ("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n", "process_tricks"),
        ("import os\nos.execv('/bin/sh', ['sh'])\n", "process_tricks"),
        ("import signal\nsignal.alarm(1)\n", "signal_tricks"),
        ("import ctypes\n", "native_code"),
        ("import mmap\n", "native_code"),
        ("class A:\n    def __eq__(self, o):\n        return True\n", "always_equal"),
        ("class A:\n    def __ne__(self, o):\n        return False\n", "always_equal"),
        ("import unittest\nraise unittest.SkipTest('x')\n", "skip_test"),
        ("raise BaseException('x')\n", "skip_test"),
        ("raise KeyboardInterrupt\n", "skip_test"),
        ("class E(BaseException):\n    pass\n", "skip_test"),
        ("print('@@RS1 abc {\"ok\": true}')\n", "fake_verdict"),
        ("print('All tests passed')\n", "fake_verdict"),
        ("import socket\n", "network"),
        ("import urllib.request\n", "network"),
    ],
)
def test_hack_patterns_are_flagged(code: str, rule: str) -> None:
    found = analyze(code)
    assert rule in {f.rule for f in found}, found
    assert RULES[rule][0] == "hack"
    assert rule in hack_rules(found)
    flag = next(f for f in found if f.rule == rule)
    assert flag.line is not None
    assert flag.message


@pytest.mark.parametrize(
    ("code", "rule"),
    [
        ("x = eval('1+1')\n", "dynamic_code"),
        ("import threading\nthreading.Thread(target=print).start()\n", "threads"),
        ("import os\nos.environ.get('HOME')\n", "environment_access"),
        ("class A:\n    def __eq__(self, o):\n        return self.x == o.x\n", "custom_equality"),
        ("def f(:\n", "syntax_error"),
        ("with open('data.txt') as f:\n    pass\n", "file_access"),
    ],
)
def test_warnings_do_not_gate(code: str, rule: str) -> None:
    found = analyze(code)
    assert rule in {f.rule for f in found}, found
    assert rule not in hack_rules(found)


@pytest.mark.parametrize(
    "code",
    [
        "def add(a, b):\n    return a + b\n",
        "import math\nfrom typing import List\n\ndef f(xs: List[int]) -> float:\n    return math.fsum(xs)\n",
        "import sys\nsys.setrecursionlimit(10000)\ndata = sys.stdin.read().split()\nprint(sum(map(int, data)))\n",
        "n = int(input())\nprint(n * 2)\n",
        "import sys\nprint(open(0).read().strip())\n",
        "import hashlib\ndef md5(s):\n    return hashlib.md5(s.encode()).hexdigest()\n",
        "from collections import Counter\nclass P:\n    def __init__(self):\n        self.x = 1\n",
        "def gen(n):\n    yield from range(n)\n",
    ],
)
def test_ordinary_code_has_no_hack_flags(code: str) -> None:
    assert hack_rules(analyze(code)) == []


def test_every_finding_is_kept_and_never_raises() -> None:
    code = "import os\n" + "os._exit(0)\n" * 500
    found = analyze(code)
    assert len(found) == 500  # gates see all of them; only what is shown is capped
    assert analyze("x = " + "(" * 5000 + ")" * 5000)  # deeply nested: a flag, not a crash
    assert {f.rule for f in analyze("x" * (600 * 1024))} == {"too_large"}


#: 70 harmless findings (warn: file_access) before one hack on the last line.
NOISE_THEN_HACK = "".join(f"open('f{i}')\n" for i in range(70)) + "import os\nos._exit(0)\n"


def test_many_harmless_findings_never_hide_a_hack() -> None:
    found = analyze(NOISE_THEN_HACK)
    assert "exit_call" in hack_rules(found)
    shown = shown_flags(found)
    assert len(shown) == MAX_FLAGS
    assert {f.rule for f in shown} == {f.rule for f in found}  # every rule raised is in the shown list
    assert [f.line for f in shown] == sorted(f.line or 0 for f in shown)  # in code order
    assert rule_counts(found) == {"exit_call": 1, "file_access": 70}


def test_shown_flags_keep_every_rule_and_prefer_hacks() -> None:
    flags = [Flag("file_access", "warn", "m", i) for i in range(1, 100)]
    flags += [Flag(rule, sev, "m", 100 + i) for i, (rule, (sev, _)) in enumerate(RULES.items())]
    shown = shown_flags(flags, cap=10)
    assert len(shown) == 10
    hacks = sorted(r for r, (sev, _) in RULES.items() if sev == "hack")
    assert len(hacks) > 10
    assert all(f.severity == "hack" for f in shown)  # more rules than room: hack rules first
    assert shown_flags(flags[:5]) == flags[:5]


def test_flag_messages_are_safe_to_store() -> None:
    import orjson

    escaped = r"""import os
print("@@RS1 \ud800 PASS")
open("/proc/\udfff")
with open("sitecustomize\ud800.py", "w") as f:
    pass
os._exit(0)
"""
    for code in (escaped, "os._exit(0)  # \ud800\nopen('\ud800')\n"):
        found = analyze(code)
        assert found
        for flag in found:
            orjson.dumps(flag.to_json())  # no lone surrogate from the candidate's text


def test_flag_json_matches_static_flag_contract() -> None:
    from schemas.events import StaticFlag

    for flag in analyze("import os\nos._exit(0)\nimport ctypes\n"):
        data = flag.to_json()
        StaticFlag.model_validate({k: v for k, v in data.items() if k != "severity"})
        assert data["severity"] in ("hack", "warn")
