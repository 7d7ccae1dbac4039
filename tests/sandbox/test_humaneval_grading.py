"""HumanEval end to end: all 164 canonical solutions pass, empty-body solutions fail, on both backends.

Two task shapes are graded: the converter's tasks (literal calls become ``call`` suites with expected
values computed in the sandbox; the rest stay ``assert``) and every problem's original ``check`` as an
``assert`` suite (the fallback path, proxied so the check runs outside the candidate's process).
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import pytest

from rewardstream.cli.graded import Graded, PolicyGrader
from schemas.tasks import Task
from streams.reward.policy import load_policy
from workers.grading import Grader
from workers.sandbox.api import Sandbox
from workers.tasks.humaneval import Problem, SandboxReference, convert_all, load_problems

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]

CONCURRENCY = 4


def empty_body(problem: Problem) -> str:
    """The prompt with a body that does nothing (the last function of the prompt is the entry point)."""
    return problem.prompt.rstrip() + "\n    pass\n"


def assert_task(problem: Problem) -> Task:
    return Task.model_validate(
        {
            "task_id": problem.task_id,
            "prompt": problem.prompt,
            "entry_point": problem.entry_point,
            "hidden_tests": {"kind": "assert", "code": problem.test},
        }
    )


@pytest.fixture(scope="module")
def problems() -> list[Problem]:
    loaded = load_problems()
    assert len(loaded) == 164
    return loaded


@pytest.fixture(scope="module")
def converted(problems: list[Problem], process_sandbox: Sandbox) -> list[Task]:
    """The converter's tasks; expected values are computed by ``run_call_cases`` in the process sandbox."""
    tasks, reports = convert_all(problems, SandboxReference(process_sandbox), workers=CONCURRENCY)
    assert len(tasks) == 164, reports
    return tasks


def grade_all(sandbox: Sandbox, jobs: Sequence[tuple[Task, str]]) -> list[Graded]:
    grader = PolicyGrader(Grader(sandbox), load_policy())
    with ThreadPoolExecutor(max_workers=CONCURRENCY) as pool:
        return list(pool.map(lambda job: grader.grade(job[0], job[1], generation_id=job[0].task_id), jobs))


def summary(results: Sequence[Graded]) -> list[tuple[str, str, list[dict[str, object]]]]:
    return [
        (g.task_id, g.status, [c.to_json() for c in ((g.public.cases if g.public else ()) + g.hidden.cases)][:3])
        for g in (r.result for r in results)
    ]


def test_converted_tasks_use_call_suites_where_possible(converted: list[Task]) -> None:
    kinds = [t.hidden_tests.kind for t in converted]
    assert kinds.count("call") > 100, kinds
    for task in converted:
        if task.hidden_tests.kind == "call":
            assert task.hidden_tests.cases


def test_canonical_solutions_pass_converted_tasks(
    sandbox: Sandbox, problems: list[Problem], converted: list[Task]
) -> None:
    results = grade_all(sandbox, [(t, p.reference_code) for p, t in zip(problems, converted, strict=True)])
    bad = [r for r in results if r.status != "pass" or r.reward != 1.0]
    assert len(results) == 164
    assert not bad, summary(bad)


def test_empty_bodies_fail_converted_tasks(sandbox: Sandbox, problems: list[Problem], converted: list[Task]) -> None:
    results = grade_all(sandbox, [(t, empty_body(p)) for p, t in zip(problems, converted, strict=True)])
    wrong = [r for r in results if r.status != "fail" or r.reward != 0.0]
    assert not wrong, summary(wrong)


def test_canonical_solutions_pass_original_checks(sandbox: Sandbox, problems: list[Problem]) -> None:
    results = grade_all(sandbox, [(assert_task(p), p.reference_code) for p in problems])
    bad = [r for r in results if r.status != "pass" or r.reward != 1.0]
    assert not bad, summary(bad)


def test_empty_bodies_fail_original_checks(sandbox: Sandbox, problems: list[Problem]) -> None:
    results = grade_all(sandbox, [(assert_task(p), empty_body(p)) for p in problems])
    wrong = [r for r in results if r.status != "fail" or r.reward != 0.0]
    assert not wrong, summary(wrong)
