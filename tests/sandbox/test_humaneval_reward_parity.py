"""HumanEval on the process sandbox: the pipeline's reward policy gives the rewards the grader's interim rule did.

Why: ``rewardstream grade`` used to compute its own reward (1.0 iff the run passed, had cases and raised no
gating hack flag); it now applies ``streams.reward.policy``. Every one of the 164 converted tasks (public and
hidden suites, ``call`` or ``assert``) is graded with its canonical solution, a wrong one (the body replaced by
``return None``) and a hacked one (the canonical solution plus ``import gc``, a hack-severity flag), and each
reward must equal the old rule's.
"""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

from rewardstream.cli.graded import Graded, PolicyGrader
from schemas.tasks import Task
from streams.reward.policy import load_policy
from tests.unit.interim_reward import interim_reward
from workers.grading import Grader
from workers.sandbox.api import Sandbox
from workers.tasks.humaneval import Problem, SandboxReference, convert_all, load_problems

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]

CONCURRENCY = 2  # light on a shared machine


def returns_none(problem: Problem) -> str:
    """The prompt with a body that returns None (the last function of the prompt is the entry point)."""
    return problem.prompt.rstrip() + "\n    return None\n"


def hacked(problem: Problem) -> str:
    """The canonical solution, passing every case, with a frame-introspection import (hack severity)."""
    return "import gc\n" + problem.reference_code


VARIANTS = {"canonical": lambda p: p.reference_code, "return_none": returns_none, "hacked": hacked}


def old_reward(task: Task, graded: Graded) -> tuple[float, tuple[str, ...]]:
    """What the interim rule decided for this grade."""
    suites = [s for s in (task.public_tests, task.hidden_tests) if s is not None]
    r = graded.result
    total = r.hidden.total + (r.public.total if r.public else 0)
    rules = [f.rule for f in r.static_flags]
    return interim_reward(r.status, total, rules, io_only=all(s.kind == "io" for s in suites))


def test_policy_rewards_equal_the_interim_rule_on_humaneval(process_sandbox: Sandbox) -> None:
    problems = load_problems()
    assert len(problems) == 164
    tasks, reports = convert_all(problems, SandboxReference(process_sandbox), workers=CONCURRENCY)
    assert len(tasks) == 164, reports
    grader = PolicyGrader(Grader(process_sandbox), load_policy())
    jobs = [(name, task, make(p)) for p, task in zip(problems, tasks, strict=True) for name, make in VARIANTS.items()]
    with ThreadPoolExecutor(max_workers=CONCURRENCY) as pool:
        graded = list(pool.map(lambda j: grader.grade(j[1], j[2], generation_id=j[1].task_id), jobs))
    counts: Counter[tuple[str, str, float]] = Counter()
    differ = []
    for (name, task, _), got in zip(jobs, graded, strict=True):
        counts[name, got.status, got.reward] += 1
        if (got.reward, got.flags) != old_reward(task, got):
            differ.append((name, task.task_id, got.status, got.reward, got.flags, old_reward(task, got)))
    assert not differ, differ
    assert counts == {
        ("canonical", "pass", 1.0): 164,
        ("return_none", "fail", 0.0): 164,
        ("hacked", "pass", 0.0): 164,
    }, counts
