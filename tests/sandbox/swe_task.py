"""A small SWE-style workspace task for grading tests: a buggy ``calc`` package with public tests and hidden
``call`` and ``io`` suites, and host-made snapshots of its workspace (the original, the fix, the hacks).

The bug: ``calc.ops.add`` subtracts. It works through ``fractions`` so that a module shadowing the standard
library in the workspace root could make it right without touching ``calc`` (a hack the grading must defeat).
The public tests are ``unittest`` cases (pytest runs them too; the sandbox image has no pytest).
"""

from __future__ import annotations

import io
import tarfile
import tempfile
from pathlib import Path

from schemas.tasks import Task
from workers.episodes.snapshot import Caps, pack

OPS_BUGGY = '''"""Arithmetic on integers."""
import fractions


def add(a, b):
    """The sum of a and b."""
    return int(fractions.Fraction(a) - fractions.Fraction(b))
'''
OPS_FIXED = OPS_BUGGY.replace("(a) - fractions", "(a) + fractions")
MAIN = '''"""python3 -m calc: one sum per line of "a b" on stdin."""
import sys

from calc.ops import add

for line in sys.stdin:
    a, b = line.split()
    print(add(int(a), int(b)))
'''
PUBLIC_TESTS = """import unittest

from calc.ops import add


class AddTest(unittest.TestCase):
    def test_small(self):
        self.assertEqual(add(2, 2), 4)
"""
FILES = {
    "calc/__init__.py": '"""A tiny calculator."""\n',
    "calc/ops.py": OPS_BUGGY,
    "calc/__main__.py": MAIN,
    "tests/__init__.py": "",
    "tests/test_ops.py": PUBLIC_TESTS,
    "README.md": "Fix calc.ops.add.\n",
}
PROTECTED = ["tests/**", "**/conftest.py", "pytest.ini", "setup.cfg", "tox.ini", "pyproject.toml", "**/*.pth",
             "**/sitecustomize.py", "**/usercustomize.py"]  # fmt: skip
#: Hidden inputs and expected values: none of them may appear in anything a trainer or agent sees.
HIDDEN_CALL = [{"id": "h-small", "args": [1, 2], "expected": 3}, {"id": "h-zero", "args": [-5, 5], "expected": 0},
               {"id": "h-big", "args": [10**20, 7], "expected": 10**20 + 7}]  # fmt: skip
HIDDEN_IO = [{"id": "io-two", "stdin": "1 2\n30 12\n", "expected_stdout": "3\n42\n"},
             {"id": "io-neg", "stdin": "-8 3\n", "expected_stdout": "-5\n"}]  # fmt: skip
#: Hidden case ids (on the verifier's verdict only) and hidden inputs/expected values (nowhere at all).
HIDDEN_IDS = ("h-small", "h-zero", "h-big", "io-two", "io-neg")
HIDDEN_VALUES = ("100000000000000000007", "100000000000000000000", "30 12", "-8 3")
CAPS = Caps(max_bytes=8 << 20, max_entries=500)


def task(kind: str = "call", task_id: str | None = None, timeout_s: float = 5) -> Task:
    """The task with a hidden ``call`` suite (``calc.ops:add``) or ``io`` suite (``python3 -m calc``), each case
    limited to ``timeout_s``."""
    hidden = ({"kind": "call", "cases": HIDDEN_CALL} if kind == "call"
              else {"kind": "io", "command": "python3 -m calc", "cases": HIDDEN_IO})  # fmt: skip
    return Task.model_validate({
        "task_id": task_id or f"swe/calc-{kind}", "prompt": "Fix calc.ops.add: it must return a + b.",
        "entry_point": "calc.ops:add", "workspace": {"files": FILES},
        "episode": {"max_turns": 30, "step_timeout_s": 10, "episode_timeout_s": 600, "idle_timeout_s": 300,
                    "workspace_max_mb": 8, "workspace_max_files": 500},
        "protected": PROTECTED,
        "public_tests": {"kind": "command", "command": "python3 -m unittest -q tests.test_ops"},
        "hidden_tests": hidden, "limits": {"timeout_s": timeout_s, "memory_mb": 256},
    })  # fmt: skip


def snapshot(files: dict[str, str | bytes], links: dict[str, str] | None = None, drop: tuple[str, ...] = ()) -> bytes:
    """A canonical snapshot of the task's workspace with ``files`` written over it, ``links`` made and the
    paths in ``drop`` deleted (made on the host; no program runs)."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for name, data in {**FILES, **files}.items():
            if name in drop:
                continue
            path = root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data.encode() if isinstance(data, str) else data)
        for name, target in (links or {}).items():
            path = root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.symlink_to(target)
        return pack(root, CAPS).data


def with_member(data: bytes, name: str, content: bytes, mode: int) -> bytes:
    """``data`` (a snapshot) with one more member written as a hostile tar would (any mode bits)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=io.BytesIO(data)) as src, tarfile.open(fileobj=out, mode="w") as dst:
        for member in src.getmembers():
            dst.addfile(member, src.extractfile(member) if member.isfile() else None)
        info = tarfile.TarInfo(name)
        info.size, info.mode = len(content), mode
        dst.addfile(info, io.BytesIO(content))
    return out.getvalue()
