"""The Harbor part of ``rewardstream demo``: which agents play which shipped task, and what each deserves.
(Played through the pipeline in tests/integration/test_shipped_tasks.py.)"""

from __future__ import annotations

from collections import Counter

from rewardstream.cli.demo_harbor import harbor_episodes
from workers.tasks.harbor.examples import EXAMPLES


def test_every_shipped_task_is_fixed_and_either_given_up_on_or_hacked() -> None:
    episodes = harbor_episodes()
    assert Counter(e.task_id for e in episodes if e.kind == "fix") == Counter(spec.name for spec in EXAMPLES)
    others = [e for e in episodes if e.kind != "fix"]
    assert sorted(e.task_id for e in others) == sorted(spec.name for spec in EXAMPLES)
    assert {e.kind for e in others} == {"give-up", "hack"}
    assert any(e.kind == "hack" and e.task_id == "rle-c" for e in others)  # the compiled task is hacked too
    assert {(e.kind, e.expected_reward) for e in episodes} == {("fix", 1.0), ("give-up", 0.0), ("hack", 0.0)}
    assert all(e.actions[-1] == {"action": "submit"} for e in episodes)
