"""What the trainer is told: a step's outcome as an ``ObservationEvent``, an episode's end as a generation.

Why here and not in the handler: these are the contract's shapes (``schemas.episodes``, ``schemas.events``),
pure functions of values, tested alone; the handler only decides which one to send.
"""

from __future__ import annotations

from schemas.episodes import ActionEvent, EndReason, ObservationEvent
from schemas.events import GenerationEvent
from schemas.status import SandboxStatus
from workers.episodes.step import StepOutcome
from workers.episodes.turns import EpisodeState

#: What a generation says when the episode's open named no policy version or run (the fields are required).
UNKNOWN = "unknown"


def step_observation(
    event: ActionEvent, outcome: StepOutcome, workspace_ref: str, ended: EndReason | None = None
) -> ObservationEvent:
    """The answer to a step the sandbox ran (never a ``sandbox_error``: those are retried, not shown)."""
    kind = event.action.action
    status = outcome.status
    return ObservationEvent.build(
        episode_id=event.episode_id,
        turn=event.turn,
        action=kind,
        status=status,
        exit_code=outcome.exit_code if kind == "exec" else None,
        stdout=outcome.stdout,
        stderr=outcome.stderr,
        stdout_truncated=outcome.stdout_truncated,
        stderr_truncated=outcome.stderr_truncated,
        content=outcome.content if kind == "read" else None,
        content_truncated=outcome.content_truncated,
        wall_ms=outcome.wall_ms,
        workspace_ref=workspace_ref,
        reason=outcome.reason or ("rejected" if status == "rejected" else None),
        ended=ended,
        image_id=outcome.image_id,
    )


def end_observation(event: ActionEvent, why: EndReason, workspace_ref: str) -> ObservationEvent:
    """The answer to an action that ended the episode without running: a ``submit``, or any action that came
    after ``episode_timeout_s`` (not carried out; the workspace is submitted as it is)."""
    if why == "submitted":
        return ObservationEvent.build(episode_id=event.episode_id, turn=event.turn, action="submit",
                                      status=SandboxStatus.OK, workspace_ref=workspace_ref, ended=why)  # fmt: skip
    return ObservationEvent.build(
        episode_id=event.episode_id, turn=event.turn, action=event.action.action, status=SandboxStatus.TIMEOUT,
        workspace_ref=workspace_ref, reason=f"the episode ended ({why}); the workspace is submitted as it is",
        ended=why,
    )  # fmt: skip


def submitted(
    state: EpisodeState, workspace_ref: str, transcript_ref: str | None = None, *, workspace_sha256: str | None = None
) -> GenerationEvent:
    """The generation an ended episode hands to the verifier/judge/reward path: its final workspace (and its
    stored transcript, for the judge), one per episode (``generation_id`` = ``episode_id``). ``workspace_sha256``:
    what ``workspace_ref`` holds when it is not the state's snapshot (an image task's final WORKDIR)."""
    return GenerationEvent(
        generation_id=state.episode_id,
        episode_id=state.episode_id,
        run_id=state.run_id or UNKNOWN,
        task_id=state.task_id,
        task_version=state.task_version,
        policy_version=state.policy_version or UNKNOWN,
        turn=state.turn,
        workspace_ref=workspace_ref,
        workspace_sha256=workspace_sha256 or state.snapshot,
        transcript_ref=transcript_ref,
    )
