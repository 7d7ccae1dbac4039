"""``tasks validate``: a task is valid when its oracle earns 1.0 and the untouched workspace earns 0.0.

Why both: an oracle below 1.0 means the task cannot be solved as written (a broken test, an image that lacks
what the tests need), and a no-op above 0.0 means the reward is free. Either would train the policy on noise.
What the host causes (the daemon, the build) is raised, never reported as an invalid task.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from schemas.caps import STDERR_TAIL_BYTES
from schemas.tasks import Task, VerifierSuite
from workers.containers.oracle import run_oracle
from workers.containers.verification import verify
from workers.episodes.snapshot import Caps, SnapshotError


@dataclass(frozen=True, slots=True)
class TaskValidation:
    """One task's validation, as ``tasks validate --json`` prints it."""

    task_id: str
    oracle_reward: float | None
    noop_reward: float | None
    reasons: list[str] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        """Oracle 1.0 and no-op 0.0 (and nothing else wrong)."""
        return self.oracle_reward == 1.0 and self.noop_reward == 0.0 and not self.reasons

    def as_json(self) -> dict[str, Any]:
        """``{"task_id", "oracle_reward", "noop_reward", "valid", "reasons"}``."""
        return {"task_id": self.task_id, "oracle_reward": self.oracle_reward, "noop_reward": self.noop_reward,
                "valid": self.valid, "reasons": list(self.reasons)}  # fmt: skip


def validate_task(client: Any, image: str, task: Task) -> TaskValidation:
    """Run ``task``'s no-op and oracle through its verifier, each in fresh containers of ``image``."""
    environment, verifier = task.environment, task.hidden_tests
    if environment is None or not isinstance(verifier, VerifierSuite):
        return TaskValidation(task.task_id, None, None, [f"task {task.task_id} is not an image task"])
    reasons: list[str] = []
    noop = verify(client, image, environment, verifier, None)
    if noop.reward.reward != 0.0:
        reasons.append(f"the untouched workspace earns {noop.reward.reward} (a no-op must earn 0.0)")
    if task.solution is None:
        reasons.append("no solution/solve.sh: nothing shows the task can be solved")
        return TaskValidation(task.task_id, None, noop.reward.reward, reasons)
    limits = task.episode_limits
    caps = Caps(limits.workspace_max_mb << 20, limits.workspace_max_files)
    try:
        packed, output = run_oracle(client, image, environment, task.solution, timeout_s=limits.episode_timeout_s,
                                    caps=caps)  # fmt: skip
    except SnapshotError as exc:
        reasons.append(f"the oracle's workspace cannot be snapshotted: {exc}")
        return TaskValidation(task.task_id, None, noop.reward.reward, reasons)
    if packed is None:
        tail = output[-STDERR_TAIL_BYTES:]
        reasons.append(f"solve.sh ran past the agent's timeout ({limits.episode_timeout_s:g} s): {tail}")
        return TaskValidation(task.task_id, None, noop.reward.reward, reasons)
    solved = verify(client, image, environment, verifier, packed.data)
    if solved.reward.reward != 1.0:
        why = solved.reward.reason or f"test.sh wrote {solved.reward.reward}"
        tail = solved.output[-STDERR_TAIL_BYTES:]
        reasons.append(f"the oracle earns {solved.reward.reward} (it must earn 1.0): {why}; {tail}")
    return TaskValidation(task.task_id, solved.reward.reward, noop.reward.reward, reasons)
