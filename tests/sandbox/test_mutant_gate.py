"""The mutant gate in the real sandbox: a hidden suite that catches planted bugs passes the gate; one that cannot
see them is reported; the packaged HumanEval tasks' suites kill most mutants of their canonical solutions."""

from __future__ import annotations

from typing import Any

import pytest

from schemas.tasks import Task
from workers.sandbox.api import Sandbox
from workers.tasks.humaneval import SandboxReference, convert_all, load_problems
from workers.tasks.mutant_gate import check_tasks

pytestmark = [pytest.mark.sandbox]

REFERENCE = '''
def grade(score):
    """'pass' from 50 up, else 'fail'; None for a negative score."""
    if score < 0:
        return None
    return "pass" if score >= 50 else "fail"
'''


def task(cases: list[dict[str, Any]]) -> Task:
    return Task.model_validate({
        "task_id": "gate/grade",
        "prompt": "def grade(score):\n",
        "entry_point": "grade",
        "hidden_tests": {"kind": "call", "cases": cases},
    })  # fmt: skip


def test_a_suite_that_probes_the_boundaries_kills_the_mutants(process_sandbox: Sandbox) -> None:
    strong = task([
        {"id": "neg", "args": [-1], "expected": None}, {"id": "zero", "args": [0], "expected": "fail"},
        {"id": "49", "args": [49], "expected": "fail"}, {"id": "50", "args": [50], "expected": "pass"},
    ])  # fmt: skip
    (report,) = check_tasks([(strong, REFERENCE)], SandboxReference(process_sandbox).judge_hidden, 16)
    assert report.mutants >= 5, report
    assert report.host_errors == 0, report
    assert report.killed == report.mutants, report.survivors  # every planted bug changes one of these answers
    assert report.warning() is None


def test_a_suite_far_from_the_boundaries_lets_mutants_survive(process_sandbox: Sandbox) -> None:
    """One far-away case: only the mutant that returns None changes its answer; the survivors are named."""
    weak = task([{"id": "far", "args": [90], "expected": "pass"}])
    (report,) = check_tasks([(weak, REFERENCE)], SandboxReference(process_sandbox).judge_hidden, 16)
    assert (report.mutants, report.killed, report.host_errors) == (5, 1, 0), report
    assert sorted(s.split(": ", 1)[1] for s in report.survivors) == ["0 -> 1", "50 -> 51", "GtE -> Gt", "Lt -> LtE"]
    assert report.warning() is None  # one kill: not blind, only weak (its score says how weak)
    assert report.score == pytest.approx(0.2)


def test_a_suite_blind_to_every_bug_is_reported(process_sandbox: Sandbox) -> None:
    """The suite cannot see any planted bug: the gate's warning names the task and the survivors."""
    blind = Task.model_validate({
        "task_id": "gate/check",
        "prompt": "def check(score):\n",
        "entry_point": "check",
        "hidden_tests": {"kind": "call", "cases": [{"id": "far", "args": [90], "expected": None}]},
    })  # fmt: skip
    reference = 'def check(score):\n    if score < 0:\n        raise ValueError("negative")\n'
    (report,) = check_tasks([(blind, reference)], SandboxReference(process_sandbox).judge_hidden, 16)
    assert (report.mutants, report.killed, report.host_errors) == (2, 0, 0), report
    warning = report.warning()
    assert warning is not None
    assert warning.task_id == "gate/check"
    assert "passed all 2 mutants" in warning.problem
    assert "Lt -> LtE" in warning.problem


def test_humaneval_suites_kill_most_mutants(process_sandbox: Sandbox) -> None:
    """The first 20 packaged tasks, 4 mutants each: the converter's hidden suites catch most planted bugs."""
    problems = load_problems()[:20]
    reference = SandboxReference(process_sandbox)
    tasks, _ = convert_all(problems, reference, workers=2, verify=False)
    codes = {p.task_id: p.reference_code for p in problems}
    reports = check_tasks([(t, codes[t.task_id]) for t in tasks], reference.judge_hidden, 4, workers=2)
    made = sum(r.mutants for r in reports)
    killed = sum(r.killed for r in reports)
    assert made >= 60
    assert sum(r.host_errors for r in reports) == 0
    assert killed / made >= 0.7, [(r.task_id, r.survivors) for r in reports if r.survivors]
