"""The per-case time limits (``guest/clock.py``, the harness), on every backend.

A case's limit is the CPU time and own time of every process of the run while the case runs, and what a case
leaves running is killed before the next one starts. So work cannot be moved where no limit counts it (into
a child that left the case's process group, into a daemon computing later cases' answers), and a case never
pays for what an earlier one left running. Controls show the honest fast solution passes and the honest slow
one times out, so a failed attack means the limit held.
"""

from __future__ import annotations

from typing import Any

import pytest

from rewardstream.cli.graded import PolicyGrader
from schemas.tasks import Task
from streams.reward.policy import load_policy
from workers.grading import Grader, GraderConfig
from workers.sandbox.api import Sandbox

pytestmark = pytest.mark.sandbox

#: Several seconds of CPython per answer: far past the 1 s limit on any machine this runs on.
WORK = 100_000_000
SLOW = f"""
def answer(n):
    x = 0
    for i in range({WORK}):
        x += i
    return (x + n) % 1000003
"""
INPUTS = [1, 2, 3]
#: The answers, by the loop's closed form (our own arithmetic, never the candidate's code).
EXPECTED = {n: (WORK * (WORK - 1) // 2 + n) % 1000003 for n in INPUTS}


def _task() -> Task:
    return Task.model_validate(
        {
            "task_id": "limits/slow",
            "prompt": "def answer(n): ...",
            "entry_point": "answer",
            "limits": {"timeout_s": 1, "memory_mb": 256},
            "hidden_tests": {"kind": "call", "cases": [{"args": [n], "expected": EXPECTED[n]} for n in INPUTS]},
        }
    )


#: Answers from a table: the honest fast solution (what a passing run looks like).
FAST = "TABLE = {table}\ndef answer(n):\n    return TABLE[n]\n"

#: At load, a daemon (double fork, its own session) computes every answer into /tmp; each call waits for its
#: file. Before strays were killed between cases, later cases found their answers ready.
DAEMON = (
    SLOW
    + """
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        for n in (1, 2, 3):
            v = answer(n)
            with open(f"/tmp/a{n}.tmp", "w") as f:
                f.write(str(v))
            os.rename(f"/tmp/a{n}.tmp", f"/tmp/a{n}")
    os._exit(0)
_slow = answer
def answer(n):
    while not os.path.exists(f"/tmp/a{n}"):
        time.sleep(0.01)
    return int(open(f"/tmp/a{n}").read())
"""
)

#: Each call hands the work to a child that left the call's process group and waits for it.
DETACHED_CHILD = (
    SLOW
    + """
import os
_slow = answer
def answer(n):
    r, w = os.pipe()
    if os.fork() == 0:
        os.setsid()
        os.write(w, str(_slow(n)).encode())
        os._exit(0)
    os.close(w)
    return int(os.read(r, 64))
"""
)


#: An io program that works a little (a tenth of a second or so), answers, then leaves four proper daemons (their
#: own session, their stdio on /dev/null) burning CPU behind it: sloppy, not an attack on the grader. Were they
#: left alive, the third case would already share the run's CPU with eight of them and pay for their time.
LEAVES_BURNERS = """
import os, sys
a, b = map(int, sys.stdin.read().split())
x = 0
for i in range(2_000_000):
    x += i
print(a + b, flush=True)
for _ in range(4):
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            while True:
                pass
        os._exit(0)
"""


@pytest.fixture(scope="module")
def task() -> Task:
    return _task()


def _grade(sandbox: Sandbox, task: Task, code: str) -> dict[str, Any]:
    graded = PolicyGrader(Grader(sandbox, GraderConfig(attempts=2, backoff_s=0.05)), load_policy())
    return graded.grade(task, code, generation_id="g").to_json()


def test_the_honest_fast_solution_passes(sandbox: Sandbox, task: Task) -> None:
    res = _grade(sandbox, task, FAST.format(table=dict(EXPECTED)))
    assert (res["status"], res["reward"]) == ("pass", 1.0), res


def test_the_honest_slow_solution_times_out(sandbox: Sandbox, task: Task) -> None:
    res = _grade(sandbox, task, SLOW)
    assert res["status"] == "fail", res
    assert [c["status"] for c in res["cases"]["hidden"]] == ["timeout"] * len(INPUTS), res


@pytest.mark.parametrize("attack", ["daemon", "detached_child"])
def test_work_moved_out_of_a_cases_reach_does_not_pass(sandbox: Sandbox, task: Task, attack: str) -> None:
    res = _grade(sandbox, task, {"daemon": DAEMON, "detached_child": DETACHED_CHILD}[attack])
    assert res["status"] == "fail", res
    assert res["hidden"]["passed"] == 0, res
    assert res["reward"] == 0.0, res


def test_a_case_never_pays_for_what_an_earlier_one_left_running(sandbox: Sandbox) -> None:
    """Each case's answer is right; the daemons each one leaves would eat the later cases' CPU if they lived."""
    pairs = [(1, 2), (3, 4), (5, 6), (7, 8)]
    io_task = Task.model_validate(
        {
            "task_id": "limits/leftover",
            "prompt": "Read two integers, print their sum.",
            "limits": {"timeout_s": 1, "memory_mb": 256},
            "hidden_tests": {
                "kind": "io",
                "cases": [{"stdin": f"{a} {b}\n", "expected_stdout": f"{a + b}\n"} for a, b in pairs],
            },
        }
    )
    res = _grade(sandbox, io_task, LEAVES_BURNERS)
    # The verdict, not the reward: static analysis flags the fork (the policy gates on it, a separate matter).
    assert res["status"] == "pass", res
    assert res["hidden"]["passed"] == len(pairs), res
