"""The e2e's workload: every item's expected reward is fixed by construction, ids are unique per run."""

from __future__ import annotations

from infra.k8s.e2e_workload import EPISODE_TASK, call_task, episode_task, episodes, solutions, tasks


def test_tasks_are_the_call_tasks_and_the_workspace_task() -> None:
    made = tasks(3)
    assert [t.task_id for t in made] == ["e2e/add-0", "e2e/add-1", "e2e/add-2", EPISODE_TASK]
    assert episode_task().workspace is not None


def test_a_call_tasks_hidden_cases_are_what_a_right_solution_returns() -> None:
    task = call_task(7)
    cases = task.hidden_tests.model_dump()["cases"]
    assert [(c["args"], c["expected"]) for c in cases] == [([1], 8), ([100], 107)]


def test_solutions_have_unique_ids_and_the_expected_reward_of_their_kind() -> None:
    made = solutions("run1", tasks_count=8, per_task=2, slow_s=0.5)
    ids = [s.generation_id for s in made]
    assert len(ids) == len(set(ids)) == 8 * 2 * 3 + 2 * 2  # right, wrong, slow; a hack every fourth task
    assert all(s.generation_id.startswith("run1-") for s in made)
    for solution in made:
        kind = solution.generation_id.split("-t", 1)[1]
        assert solution.expected == (1.0 if kind.endswith(("-right", "-slow")) else 0.0), solution
    slow = next(s for s in made if s.generation_id.endswith("-slow"))
    assert "time.sleep(0.5)" in slow.code
    assert set(slow.as_row()) == {"task_id", "generation_id", "code"}


def test_episodes_alternate_a_fixing_agent_and_one_giving_up() -> None:
    made = episodes(3)
    assert [(e.name, e.expected) for e in made] == [("fix-0", 1.0), ("give-up-1", 0.0), ("fix-2", 1.0)]
    assert all(e.actions[-1] == {"action": "submit"} for e in made)
