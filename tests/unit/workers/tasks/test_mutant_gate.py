"""The gate's arithmetic (a judge stands in for the sandbox: this is pure counting): host failures count neither
way, a blind suite is a warning, reports keep the input order."""

from __future__ import annotations

from schemas.tasks import Task
from workers.tasks.mutant_gate import Judgement, check_tasks

CODE = "def f(x):\n    if x < 0:\n        return 1\n    return 2\n"


def task(task_id: str) -> Task:
    return Task.model_validate({
        "task_id": task_id, "prompt": "def f(x):\n", "entry_point": "f",
        "hidden_tests": {"kind": "call", "cases": [{"args": [5], "expected": 2}]},
    })  # fmt: skip


def test_host_errors_are_left_out_of_the_score() -> None:
    answers: list[Judgement] = ["failed", "host_error", "passed", "host_error", "failed"]
    calls = iter(answers)
    (report,) = check_tasks([(task("t"), CODE)], lambda _t, _c: next(calls), 5, workers=1)
    assert (report.mutants, report.killed, report.host_errors, report.judged) == (5, 2, 2, 3)
    assert report.score == 2 / 3
    assert len(report.survivors) == 1
    assert report.warning() is None


def test_all_host_errors_is_no_verdict_and_no_warning() -> None:
    (report,) = check_tasks([(task("t"), CODE)], lambda _t, _c: "host_error", 5)
    assert report.judged == 0
    assert report.score is None
    assert report.warning() is None  # the host failing says nothing of the suite


def test_a_blind_suite_warns_and_order_is_kept() -> None:
    def judge(t: Task, _code: str) -> Judgement:
        return "passed" if t.task_id == "b" else "failed"

    reports = check_tasks([(task("a"), CODE), (task("b"), CODE)], judge, 5)
    assert [r.task_id for r in reports] == ["a", "b"]
    assert reports[0].warning() is None
    warning = reports[1].warning()
    assert warning is not None
    assert warning.task_id == "b"
    assert "passed all 5 mutants" in warning.problem


def test_no_entry_point_no_mutants() -> None:
    io_task = Task.model_validate({
        "task_id": "io", "prompt": "read stdin",
        "hidden_tests": {"kind": "io", "cases": [{"stdin": "1", "expected_stdout": "1"}]},
    })  # fmt: skip
    (report,) = check_tasks([(io_task, CODE)], lambda _t, _c: "passed", 5)
    assert report.mutants == 0
    assert report.warning() is None
