"""``tasks validate``: a task is valid when its oracle earns 1.0 and the untouched workspace earns 0.0; it is
flagged when a planted reward writer in its WORKDIR moves its reward (``planted``).

Why both: an oracle below 1.0 means the task cannot be solved as written (a broken test, an image that lacks
what the tests need), and a no-op above 0.0 means the reward is free. Either would train the policy on noise.
What the host causes (the daemon, the build) is raised, never reported as an invalid task. Each run goes to the
backend the task's episodes and verification run on (overlays on the process backend, containers on docker), so
a task is shown solvable, and free of a free reward, where it will be graded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from schemas.caps import STDERR_TAIL_BYTES
from schemas.environments import Oracle, TaskEnvironment
from schemas.tasks import Task, VerifierSuite
from workers.containers.delta import pack_delta
from workers.containers.oracle import run_oracle
from workers.containers.planted import planted_workdir
from workers.containers.verification import Verification, verify
from workers.containers.workdir import image_workdir
from workers.episodes.snapshot import Caps, Packed, SnapshotError
from workers.overlays.overlay_oracle import run_oracle_on_overlay
from workers.overlays.overlay_step import overlay_workdir
from workers.overlays.overlay_verification import verify_on_overlay

if TYPE_CHECKING:
    from workers.overlays.host import OverlayHost


@dataclass(frozen=True, slots=True)
class TaskValidation:
    """One task's validation: its rewards, what makes it invalid (``problems``) and what it is flagged for
    (``flags``: valid, but an agent could game it); ``tasks validate --json`` prints both as ``reasons``, and the
    backend it ran on (``process``: overlays of the image's tree; ``docker``: containers)."""

    task_id: str
    oracle_reward: float | None
    noop_reward: float | None
    problems: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    backend: str = "docker"

    @property
    def valid(self) -> bool:
        """The oracle earns 1.0 and the no-op 0.0."""
        return self.oracle_reward == 1.0 and self.noop_reward == 0.0 and not self.problems

    def as_json(self) -> dict[str, Any]:
        """``{"task_id", "oracle_reward", "noop_reward", "valid", "reasons"}``: the issue's contract, exactly (the
        backend is said in the text form)."""
        return {"task_id": self.task_id, "oracle_reward": self.oracle_reward, "noop_reward": self.noop_reward,
                "valid": self.valid, "reasons": [*self.problems, *self.flags]}  # fmt: skip


@dataclass(frozen=True, slots=True)
class _Subject:
    """What every run of one validation shares: the daemon, the overlay host (None: containers), the image, the
    task's parts and its caps; each run goes to the backend the task's episodes and verdicts run on."""

    client: Any
    overlays: OverlayHost | None
    image: str
    environment: TaskEnvironment
    verifier: VerifierSuite
    caps: Caps

    @property
    def backend(self) -> str:
        return "docker" if self.overlays is None else "process"

    def reward(self, workdir_tar: bytes | None) -> Verification:
        if self.overlays is not None:
            return verify_on_overlay(self.overlays, self.image, self.environment, self.verifier, workdir_tar)
        return verify(self.client, self.image, self.environment, self.verifier, workdir_tar)

    def workdir(self) -> Packed:
        """The WORKDIR the image starts with, as a snapshot."""
        if self.overlays is not None:
            return overlay_workdir(self.overlays, self.image, self.environment, pack_delta([], []), self.caps)
        return image_workdir(self.client, self.image, self.environment, self.caps)

    def oracle(self, solution: Oracle, timeout_s: float) -> tuple[Packed | None, str]:
        """The WORKDIR ``solve.sh`` leaves (None: past ``timeout_s``) and its output's tail."""
        if self.overlays is not None:
            return run_oracle_on_overlay(self.overlays, self.image, self.environment, solution,
                                         timeout_s=timeout_s, caps=self.caps)  # fmt: skip
        return run_oracle(self.client, self.image, self.environment, solution, timeout_s=timeout_s, caps=self.caps)


def validate_task(client: Any, image: str, task: Task, overlays: OverlayHost | None = None) -> TaskValidation:
    """Run ``task``'s no-op, a planted reward writer and its oracle through its verifier, each in a fresh sandbox
    of ``image``: an overlay of its tree on ``overlays`` (the process backend), else a container."""
    environment, verifier = task.environment, task.hidden_tests
    if environment is None or not isinstance(verifier, VerifierSuite):
        return TaskValidation(task.task_id, None, None, [f"task {task.task_id} is not an image task"])
    limits = task.episode_limits
    subject = _Subject(client, overlays, image, environment, verifier, Caps(limits.workspace_max_mb << 20,
                                                                             limits.workspace_max_files))  # fmt: skip
    noop = subject.reward(None).reward.reward
    problems: list[str] = []
    if noop != 0.0:
        problems.append(f"the untouched workspace earns {noop} (a no-op must earn 0.0)")
    flags = _planted_flags(subject, noop)
    oracle, problem = _oracle_reward(subject, task.solution, limits.episode_timeout_s)
    if problem is not None:
        problems.append(problem)
    return TaskValidation(task.task_id, oracle, noop, problems, flags, subject.backend)


def _planted_flags(subject: _Subject, noop: float) -> list[str]:
    """A flag when the planted writer moves the reward above the no-op's."""
    try:
        planted = planted_workdir(subject.workdir().data, subject.caps)
    except SnapshotError as exc:
        return [f"flag: the planted writer could not be made: {exc}"]
    got = subject.reward(planted).reward.reward
    if got <= noop:
        return []
    return [
        f"flag: agent code the tests run as root wrote the reward (a planted writer in WORKDIR earned {got}, the "
        f"no-op {noop}): run the agent's code through rs-as-agent in test.sh"
    ]


def _oracle_reward(subject: _Subject, solution: Oracle | None, timeout_s: float) -> tuple[float | None, str | None]:
    """The oracle's reward, and why the task is invalid by it (None: it earns 1.0)."""
    if solution is None:
        return None, "no solution/solve.sh: nothing shows the task can be solved"
    try:
        packed, output = subject.oracle(solution, timeout_s)
    except SnapshotError as exc:
        return None, f"the oracle's workspace cannot be snapshotted: {exc}"
    if packed is None:
        return None, f"solve.sh ran past the agent's timeout ({timeout_s:g} s): {output[-STDERR_TAIL_BYTES:]}"
    solved = subject.reward(packed.data)
    if solved.reward.reward == 1.0:
        return 1.0, None
    why = solved.reward.reason or f"test.sh wrote {solved.reward.reward}"
    tail = solved.output[-STDERR_TAIL_BYTES:]
    return solved.reward.reward, f"the oracle earns {solved.reward.reward} (it must earn 1.0): {why}; {tail}"
