"""The verifier every shipped Python task shares: graded cases, each one the agent's code in its own process.

Why it looks like this (the pattern a task author should follow): ``test.sh`` runs as root, so the root process
never imports the agent's modules. It runs each case as ``timeout ... rs-as-agent python3 -I -c CODE``: as
``nobody`` (no write to ``/logs``, no read of ``/tests``), isolated (``-I``: neither the working directory,
``PYTHONPATH`` nor a user site is on ``sys.path``, so a planted ``sitecustomize.py`` or ``unittest.py`` in WORKDIR
never runs first, and ``conftest.py`` means nothing without pytest), bounded in time, its output to a file of
root's read up to a cap. Root compares what the case printed with the expected text and writes passed/total.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from workers.tasks.harbor.examples.spec import WORKDIR, ExampleTask, solution_script

#: What a case's process runs before the case's code: WORKDIR (the agent's project) importable, no bytecode.
PRELUDE = "import sys\nsys.dont_write_bytecode = True\nsys.path.insert(0, {app!r})\n"
#: Seconds one case may run (then it is killed and fails).
CASE_TIMEOUT_S = 10
TEST_SH = """#!/bin/bash
# Graded cases: each runs the agent's code as nobody (rs-as-agent) in an isolated interpreter (python3 -I);
# this root process only compares what each printed and writes passed/total to /logs/verifier/reward.txt.
exec python3 -I /tests/check.py
"""
CHECK_PY = f'''"""Run each case of cases.json as the agent, compare its output as root, write passed/total."""

import json
import subprocess
import tempfile

PRELUDE = {PRELUDE.format(app=WORKDIR)!r}
OUTPUT_CAP = 65536

cases = json.loads(open("/tests/cases.json", encoding="utf-8").read())
passed = 0
for case in cases:
    argv = ["timeout", "-k", "2", "{CASE_TIMEOUT_S}", "rs-as-agent", "python3", "-I", "-c", PRELUDE + case["code"]]
    with tempfile.TemporaryFile() as out:
        try:
            subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.DEVNULL,
                           cwd="{WORKDIR}", timeout={CASE_TIMEOUT_S} + 10, check=False)
        except subprocess.TimeoutExpired:
            pass
        out.seek(0)
        got = out.read(OUTPUT_CAP).decode("utf-8", "replace").strip()
    ok = got == case["expected"]
    passed += ok
    print(("PASS" if ok else "FAIL"), case["name"], "expected", repr(case["expected"]), "got", repr(got[:200]))
reward = passed / len(cases)
print(f"{{passed}}/{{len(cases)}} cases passed")
with open("/logs/verifier/reward.txt", "w", encoding="utf-8") as handle:
    handle.write(f"{{reward:.4f}}\\n")
'''


@dataclass(frozen=True)
class Case:
    """One graded case: ``code`` runs in the agent's project and prints; ``expected`` is what it must print."""

    name: str
    code: str
    expected: str


def python_task(
    *,
    name: str,
    instruction: str,
    base: dict[str, str],
    buggy: dict[str, str],
    fixed: dict[str, str],
    cases: list[Case],
    fix_branch: str,
    fix_tag: str,
    bug_message: str,
    fix_message: str,
) -> ExampleTask:
    """A Python task graded by ``cases`` through the shared verifier above."""
    rows = [{"name": case.name, "code": case.code, "expected": case.expected} for case in cases]
    return ExampleTask(
        name=name,
        language="python",
        instruction=instruction,
        base=base,
        buggy=buggy,
        fixed=fixed,
        test_sh=TEST_SH,
        test_files={"check.py": CHECK_PY, "cases.json": json.dumps(rows, indent=1) + "\n"},
        solve_sh=solution_script(fixed),
        fix_branch=fix_branch,
        fix_tag=fix_tag,
        fix_message=fix_message,
        bug_message=bug_message,
    )


def case_argv(python: str, code: str, app: str) -> list[str]:
    """How one case runs its code against the project at ``app`` (the unit tests run it on the host)."""
    return [python, "-I", "-c", PRELUDE.format(app=app) + code]
