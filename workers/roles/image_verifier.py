"""An image task's submit, verified: the agent's final WORKDIR (``roles.workspace``) through the task's verifier in
a fresh container of its image (``containers.verification``) -> what the verdict carries.

Whose fault is what, as for every role: an unusable snapshot is the agent's (reward 0 with the reason); a
verifier that ran is the verdict (its reward file, clamped; a test.sh past its timeout is a 0). What the host
causes is never a 0: the daemon failing a step (``ContainerInfraError``, retried with the sandbox's backoff), the
task's image that cannot be had here (its build failed), or a verifier with no docker daemon at all (the process
backend without one) end as a ``sandbox_error`` verdict, which the reward processor withholds and, when no
better verdict comes within ``join.sandbox_retry_s``, gives up on with this reason: the mechanism every
sandbox failure already has, which neither dead-letters the generation nor holds its partition.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from schemas.caps import fit
from schemas.environments import VerifierSuite
from schemas.errors import SandboxError
from schemas.events import GenerationEvent, SandboxRun
from schemas.result_rules import VerifierOutcome
from schemas.status import SandboxStatus
from schemas.tasks import Task
from workers.containers.task_host import ImageTaskHost, NoImageTaskHost
from workers.containers.verification import Verification, verify
from workers.overlays.overlay_verification import verify_on_overlay
from workers.retry import SANDBOX_RETRY, RetryPolicy
from workers.roles.runs import no_run, unusable_run
from workers.roles.workspace import EpisodeWorkspaces, Unusable, WorkspaceEventError

BACKEND = "docker"


@dataclass(frozen=True, slots=True)
class Verified:
    """One image task's verification as a verdict shows it: the run, what the verifier decided (None: a
    sandbox_error, no decision) and how many attempts it took."""

    run: SandboxRun
    outcome: VerifierOutcome | None
    attempts: int


def host_failed(error: str, attempts: int = 1) -> Verified:
    """The host could not verify: a sandbox_error, withheld by the reward processor, never a 0."""
    return Verified(no_run(BACKEND, SandboxStatus.SANDBOX_ERROR, error), None, attempts)


def verified_run(verification: Verification) -> Verified:
    """A verification that ran: its reward as the verifier wrote it (already clamped, or 0 with the reason),
    with its evidence for operators (the image it ran on, the end of test.sh's output, the reward file)."""
    reward, written = verification.reward, verification.reward_file
    outcome = VerifierOutcome(
        reward=reward.reward,
        source=reward.source,
        reason=None if reward.reason is None else fit(VerifierOutcome, "reason", reward.reason),
        timed_out=verification.timed_out,
        seconds=max(verification.seconds, 0.0),
        image_id=verification.image_id,
        output_tail=fit(VerifierOutcome, "output_tail", verification.output, keep="tail"),
        reward_file=None if written is None else fit(VerifierOutcome, "reward_file", written),
    )
    status = SandboxStatus.TIMEOUT if verification.timed_out else SandboxStatus.OK
    run = SandboxRun(status=status, wall_ms=verification.seconds * 1000.0, cpu_ms=0.0, max_rss_kb=0,
                     backend=verification.backend)  # fmt: skip
    return Verified(run, outcome, 1)


class ImageVerifier:
    """Verifies image tasks' submits on this host (thread-safe: each verification has its own container)."""

    def __init__(
        self,
        workspaces: EpisodeWorkspaces,
        host: ImageTaskHost | NoImageTaskHost,
        *,
        retry: RetryPolicy = SANDBOX_RETRY,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.workspaces = workspaces
        self.host = host
        self.retry = retry
        self.sleep = sleep

    def verify(self, event: GenerationEvent, task: Task) -> Verified:
        """``event``'s submitted WORKDIR through ``task``'s verifier."""
        host, verifier = self.host, task.hidden_tests
        if isinstance(host, NoImageTaskHost):
            return host_failed(f"this verifier cannot run image tasks: {host.reason}")
        workdir = self.workspaces.workdir(event, task)
        if isinstance(workdir, Unusable):
            outcome = VerifierOutcome(reward=0.0, source=None, reason=fit(VerifierOutcome, "reason", workdir.reason),
                                      seconds=0.0)  # fmt: skip
            return Verified(unusable_run(workdir, BACKEND), outcome, 1)
        environment = task.environment
        if environment is None or not isinstance(verifier, VerifierSuite):
            raise WorkspaceEventError(f"task {task.task_id} is not an image task with a verifier")
        try:
            image = host.image_of(task)
        except Exception as exc:  # a failed build, the daemon, a base image: this host's, never the agent's
            return host_failed(f"the image of task {task.task_id} cannot be had on this host: {exc}")
        error = ""
        for attempt in self.retry.numbers():
            try:
                if host.overlays is not None:
                    done = verify_on_overlay(host.overlays, image, environment, verifier, workdir.data)
                else:
                    done = verify(host.client, image, environment, verifier, workdir.data)
                got = verified_run(done)
            except (SandboxError, OSError) as exc:  # the daemon, a mount, bubblewrap: this host's
                error = f"the host failed the verification: {exc}"
                if self.retry.again(attempt):
                    self.sleep(self.retry.delay(attempt))
                continue
            return Verified(got.run, got.outcome, attempt)
        return host_failed(error, self.retry.attempts)
