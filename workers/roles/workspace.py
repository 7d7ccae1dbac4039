"""An episode's submit as the three roles see it: the final workspace fetched, checked and made gradable.

Why one place for all three roles: each must grade the same workspace (the snapshot ``workspace_ref`` names,
its bytes matching ``workspace_sha256``, every protected path reset to the task's original by
``protect.graded_workspace``) and treat the same things as whose fault:

* an S3 outage is the infrastructure's: ``ArtifactError(outage=True)`` raises through and the runtime
  retries the event (never a 0);
* a snapshot that cannot be read, is not stored under its sha256's content address in our bucket (the
  store then checks the bytes against it: a ``workspace_ref`` can never make a role read any other object),
  or is not a snapshot (``SnapshotError``) is the agent's: ``Unusable`` with the reason, which each role
  publishes as its failing result;
* a generation that names a workspace for a one-shot task, or a task whose own workspace is broken, is an
  invalid event (DLQ, with why).

An image task's submit names the agent's final WORKDIR as the same kind of snapshot: ``workdir`` fetches it by the
same rules and checks it (restored and packed again under the task's caps) with no protected path reset: an
image task has none, its verifier runs in a fresh container whatever the WORKDIR holds.
"""

from __future__ import annotations

from dataclasses import dataclass

from schemas.events import GenerationEvent
from schemas.tasks import PublicTask, Task
from workers.artifacts import ArtifactError
from workers.containers.workdir import unusable_reason
from workers.episodes.originals import BrokenOriginalError, caps_of, task_original
from workers.episodes.protect import graded_workspace
from workers.episodes.snapshot import Packed, SnapshotError
from workers.episodes.step import canonical, host_failure
from workers.grading.suites import WorkspaceJob
from workers.handler import InvalidEventError
from workers.roles.common import CodeUnavailableError, Lru, RoleContext

#: Characters of why a snapshot is unusable (an exception's text, which can quote a whole entry).
_REASON_CHARS = 2000


class WorkspaceEventError(InvalidEventError):
    """A workspace generation the roles cannot grade: its task has no workspace, or the task's is broken."""


class HostScratchError(OSError):
    """Our own scratch space failed while making the graded workspace (no space, memory, fds): retried."""


@dataclass(frozen=True, slots=True)
class Graded:
    """The workspace every role grades (protected paths reset) and the task's original it was made from."""

    workspace: Packed
    original: bytes

    def job(self) -> WorkspaceJob:
        """The grading run's form of it: the tar, which the harness unpacks in the sandbox."""
        return WorkspaceJob(self.workspace.data, self.workspace.bytes, self.workspace.files)


@dataclass(frozen=True, slots=True)
class Unusable:
    """The agent's snapshot cannot be graded; ``reason`` says why (it names no hidden case)."""

    reason: str


class EpisodeWorkspaces:
    """Graded workspaces of episode generations for one role; thread-safe (originals cached by task version)."""

    def __init__(self, context: RoleContext) -> None:
        self.context = context
        self._originals: Lru[tuple[str, str], bytes] = Lru(size=64)

    def graded(self, event: GenerationEvent, task: PublicTask | Task, version: str | None) -> Graded | Unusable:
        """``event``'s final workspace with ``task``'s protected paths reset, or why it cannot be graded.
        ``version`` is the task's (its original is cached by it; None: made again)."""
        if task.workspace is None:
            raise WorkspaceEventError(f"task {task.task_id} is not a workspace task, but the generation names one")
        final = self._final(event)
        if isinstance(final, Unusable):
            return final
        if version is None:
            original = self._original(task)
        else:
            original = self._originals.get((task.task_id, version), lambda: self._original(task))
        try:
            packed = graded_workspace(final, original, task.protected, caps_of(task.episode_limits))
        except SnapshotError as exc:
            return _unusable(exc, "making the graded workspace")
        return Graded(packed, original)

    def workdir(self, event: GenerationEvent, task: PublicTask | Task) -> Packed | Unusable:
        """An image task's submitted WORKDIR as a checked canonical snapshot, or why it cannot be verified."""
        if task.environment is None:
            raise WorkspaceEventError(f"task {task.task_id} is not an image task")
        final = self._final(event)
        if isinstance(final, Unusable):
            return final
        if (why := unusable_reason(final)) is not None:  # the episode worker could not snapshot it, and said why
            return Unusable(why[:_REASON_CHARS])
        try:
            return canonical(final, caps_of(task.episode_limits))
        except SnapshotError as exc:
            return _unusable(exc, "checking the submitted WORKDIR")

    def _final(self, event: GenerationEvent) -> bytes | Unusable:
        store, url, sha = self.context.artifacts, event.workspace_ref, event.workspace_sha256
        if store is None or url is None or sha is None:
            raise CodeUnavailableError("workspace_ref is set but this worker has no artifact store")
        if url != store.url_for(sha):  # only our content-addressed snapshots: never any object a URL names
            return Unusable(f"the workspace snapshot {url} does not match workspace_sha256 (not its content address)")
        try:
            return store.get(url)  # a content address: the store checks the bytes against sha
        except ArtifactError as exc:
            if exc.outage:
                raise  # an outage: retried by the runtime, never a verdict
            return Unusable(f"the workspace snapshot cannot be read: {exc}"[:_REASON_CHARS])

    def _original(self, task: PublicTask | Task) -> bytes:
        try:
            return task_original(task, self.context.artifacts).data
        except BrokenOriginalError as exc:
            raise WorkspaceEventError(str(exc)) from exc


def _unusable(exc: SnapshotError, doing: str) -> Unusable:
    """The agent's snapshot is unusable; unless this host's scratch space failed (HostScratchError: retried)."""
    if host_failure(exc):
        raise HostScratchError(f"{doing} failed on this host: {exc}") from exc
    return Unusable(f"the workspace snapshot is unusable: {exc}"[:_REASON_CHARS])
