"""The episode worker's image tasks: an episode's state is a delta of its container against the task image
(``containers.delta``), each step a fresh container (``containers.image_step``), and its submit the agent's final
WORKDIR as a workspace snapshot, what the verifier grades (``roles.image_verifier``).

Whose fault is what: a task image that cannot be built is the task's (its ``open`` is refused, naming why); no
docker daemon on this worker refuses the ``open`` too, saying so (the trainer is told at once instead of an
episode that can never step); the daemon failing a step or a submit is the infrastructure's
(``sandbox_error``: the loop retries the action).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from schemas.errors import SandboxError
from schemas.tasks import PublicTask
from workers.containers.delta import EMPTY, Delta, DeltaCaps, DeltaError, read_delta
from workers.containers.image_containers import ContainerInfraError, container_run
from workers.containers.image_step import restore, run_image_step
from workers.containers.task_host import ImageTaskHost, NoImageTaskHost
from workers.containers.workdir import unusable_workdir, workdir_snapshot
from workers.episodes.originals import caps_of
from workers.episodes.snapshot import Packed, SnapshotError
from workers.episodes.step import CAPTURE_BYTES, StepAction, StepLimits, StepOutcome
from workers.images.task_images import TaskImageError
from workers.overlays.overlay_step import overlay_workdir, run_overlay_step

#: What of a step's output and of a read comes back (as for workspace tasks' steps).
IMAGE_STEP_LIMITS = StepLimits(output_cap_bytes=CAPTURE_BYTES, read_cap_bytes=CAPTURE_BYTES)


class ImageEpisodeError(SandboxError):
    """The host failed an image task's step or submit (the daemon, the image): retried, never the agent's."""


def delta_caps(task: PublicTask) -> DeltaCaps:
    """An image task's delta caps: its episode's workspace caps."""
    caps = caps_of(task.episode_limits)
    return DeltaCaps(max_bytes=caps.max_bytes, max_entries=caps.max_entries)


def empty_delta() -> Packed:
    """The state every image task episode opens with: the image as it is."""
    return Packed(EMPTY.data, EMPTY.sha256, 0, len(EMPTY.data))


@dataclass(eq=False)
class ImageEpisodes:
    """Steps and submits of image task episodes on this worker's docker daemon (thread-safe)."""

    host: ImageTaskHost | NoImageTaskHost
    #: (task_id, environment digest) -> the task's image tag on this host, once had
    _images: dict[tuple[str, str], str] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def refusal(self, task: PublicTask) -> str | None:
        """Why an episode of ``task`` cannot open here, or None (its image is then built, if it was not)."""
        if isinstance(self.host, NoImageTaskHost):
            return f"task {task.task_id} is an image task and this episode worker cannot run it: {self.host.reason}"
        try:
            self.image(task)
        except TaskImageError as exc:
            return f"task {task.task_id}'s image cannot be built: {exc}"
        return None

    def image(self, task: PublicTask) -> str:
        """The task's image tag here (built the first time). TaskImageError: the task's; else ImageEpisodeError."""
        host = self._host()
        environment = task.environment
        assert environment is not None  # noqa: S101 - only image tasks come here
        key = (task.task_id, environment.context.sha256 if environment.context else environment.docker_image or "")
        with self._lock:
            known = self._images.get(key)
        if known is not None:
            return known
        try:
            tag = host.image_of(task)
        except TaskImageError:
            raise
        except Exception as exc:  # the daemon or a base image: this host's
            raise ImageEpisodeError(f"the image of task {task.task_id} cannot be had on this host: {exc}") from exc
        with self._lock:
            self._images[key] = tag
        return tag

    def step(self, task: PublicTask, state: bytes, action: StepAction) -> StepOutcome:
        """One step on ``state`` (a delta's bytes); a sandbox_error outcome when the host failed it."""
        environment = task.environment
        assert environment is not None  # noqa: S101 - only image tasks come here
        caps = delta_caps(task)
        delta = self._delta(task, state, caps)
        host = self._host()
        if host.overlays is not None:
            return run_overlay_step(
                host.overlays, self.image(task), environment, delta, action, caps, IMAGE_STEP_LIMITS
            )
        return run_image_step(host.client, self.image(task), environment, delta, action, caps, IMAGE_STEP_LIMITS)

    def final_workdir(self, task: PublicTask, state: bytes) -> Packed:
        """The agent's final WORKDIR (``state`` restored in a fresh container) as a workspace snapshot, what the
        verifier grades; a WORKDIR no snapshot may hold (over the caps, a hard link, a device) is handed on as
        ``unusable_workdir(why)``, which the verifier scores 0 with that reason. ImageEpisodeError: the host's."""
        environment = task.environment
        assert environment is not None  # noqa: S101 - only image tasks come here
        host = self._host()
        delta = self._delta(task, state, delta_caps(task))
        try:
            if host.overlays is not None:
                return overlay_workdir(
                    host.overlays, self.image(task), environment, delta, caps_of(task.episode_limits)
                )
            with container_run(host.client, self.image(task), environment, purpose="submit") as run:
                restore(run, delta)
                run.kill()
                return workdir_snapshot(run, environment.workdir, caps_of(task.episode_limits))
        except (ContainerInfraError, SandboxError, OSError) as exc:
            raise ImageEpisodeError(f"reading the final WORKDIR of task {task.task_id}: {exc}") from exc
        except SnapshotError as exc:
            return unusable_workdir(f"the final WORKDIR cannot be graded: {exc}")

    def _host(self) -> ImageTaskHost:
        if isinstance(self.host, NoImageTaskHost):
            raise ImageEpisodeError(f"this episode worker cannot run image tasks: {self.host.reason}")
        return self.host

    @staticmethod
    def _delta(task: PublicTask, state: bytes, caps: DeltaCaps) -> Delta:
        try:
            return read_delta(state, caps)
        except DeltaError as exc:  # our own stored state, checked against its sha256 by the store
            raise ImageEpisodeError(f"the stored state of an episode of {task.task_id} is not a delta: {exc}") from exc
