"""An agent episode's section of the explain story: what it was, how it ended, and its steps in order (pure).

Why a section of its own: an episode's generation has no code, only its final workspace snapshot; what the
agent did is on ``actions`` and ``observations``. Each step is one observation (in topic order, up to the one
that ended the episode) with the action it answers; text is cut to a head (``OUTPUT_HEAD_CHARS``) so a long
episode stays a readable document, and a read's content is counted, never copied. Hidden tests never reach
these topics. The ``episode`` section's shape (``--json``)::

    {"episode_id", "task_id", "run_id", "policy_version", "turns": int (the generation's turn count),
     "ended": "submitted" | "max_turns" | "episode_timeout" | null (no ending observation found),
     "forked_from": {"episode_id", "turn"} | null,
     "workspace": {"url", "sha256", "size_bytes": int | null, "size_error": str | null},
     "steps": [{"turn", "action": kind | null, "detail": {...} | null, "status", "exit_code", "wall_ms",
                "stdout_head", "stdout_chars", "stdout_truncated", "stderr_head", "stderr_chars",
                "stderr_truncated", "content_chars", "reason", "ended", "workspace_ref", "image_id",
                "location"}],
     "notes": [str]}

``detail`` is the action as sent, summarised: exec ``{"command", "timeout_s"}``, write ``{"path", "bytes"}``,
read ``{"path"}``, open ``{"task_id", "run_id", "policy_version"}``, fork ``{"from_episode", "turn"}``, submit
``{}``; null when the action was not found (or the worker ended the episode on its own). ``image_id``: the
task image an image task's step ran on (null for a workspace task's step, a rejection or an end).

Bounded in memory too: each record is cut to its step (``observed``) or its summary (``sent``) as it is read,
so neither a write's content nor a read's nor the full outputs are held, however long the episode.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from bus.scan import Record
from schemas.episodes import (
    ActionEvent,
    AnyAction,
    ExecAction,
    ForkAction,
    ObservationEvent,
    OpenAction,
    ReadAction,
    WriteAction,
    write_size,
)
from schemas.events import GenerationEvent
from streams.explain.locate import Scanned

#: Characters of stdout/stderr kept per step (their start: where a command's output begins).
OUTPUT_HEAD_CHARS = 500
#: Most missing turn numbers listed in a note.
MISSING_LISTED = 20


@dataclass(frozen=True, slots=True)
class SnapshotSize:
    """The final snapshot's size in S3, or why it is not known."""

    size_bytes: int | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Sent:
    """An action as explain keeps it: its turn, kind, when it was sent and its ``detail``."""

    turn: int
    kind: str
    timestamp_ms: int
    detail: dict[str, Any]
    #: a fork's origin (the episode it was forked from, and at which turn)
    fork: tuple[str, int] | None = None


@dataclass
class EpisodeRecords:
    """What was read of one episode, in offset order: its actions (``sent``), its observations (``observed``:
    steps without their ``detail``), how many of its records did not decode (by topic) and what was read."""

    episode_id: str
    actions: list[Sent] = field(default_factory=list)
    observations: list[dict[str, Any]] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)
    scanned: list[Scanned] = field(default_factory=list)

    def keep(self, record: Record, event: ActionEvent | ObservationEvent) -> None:
        """Keep ``event`` (read at ``record``) if it is of this episode, cut to what explain shows."""
        if event.episode_id != self.episode_id:
            return
        if isinstance(event, ActionEvent):
            self.actions.append(sent(record, event))
        else:
            self.observations.append(observed(record, event))

    def skip(self, topic: str) -> None:
        """Count a record of this episode on ``topic`` that did not decode."""
        self.skipped[topic] = self.skipped.get(topic, 0) + 1


def is_episode(event: object) -> bool:
    """Whether a generation came from an agent episode (it names a workspace snapshot instead of code)."""
    return isinstance(event, GenerationEvent) and event.workspace_ref is not None


def detail(action: AnyAction) -> dict[str, Any]:
    """What an action asked for, without a write's content."""
    if isinstance(action, ExecAction):
        return {"command": action.command, "timeout_s": action.timeout_s}
    if isinstance(action, WriteAction):
        return {"path": action.path, "bytes": write_size(action)}
    if isinstance(action, ReadAction):
        return {"path": action.path}
    if isinstance(action, OpenAction):
        return {"task_id": action.task_id, "run_id": action.run_id, "policy_version": action.policy_version}
    if isinstance(action, ForkAction):
        return {"from_episode": action.from_episode, "turn": action.turn}
    return {}


def sent(record: Record, event: ActionEvent) -> Sent:
    """An action record, cut to its summary."""
    action = event.action
    fork = (action.from_episode, action.turn) if isinstance(action, ForkAction) else None
    return Sent(event.turn, action.action, record.timestamp_ms, detail(action), fork)


def observed(record: Record, obs: ObservationEvent) -> dict[str, Any]:
    """An observation record as a step (``detail`` is filled in once the actions are read)."""
    return {
        "turn": obs.turn,
        "action": obs.action,
        "detail": None,
        "status": obs.status,
        "exit_code": obs.exit_code,
        "wall_ms": obs.wall_ms,
        "stdout_head": obs.stdout[:OUTPUT_HEAD_CHARS],
        "stdout_chars": len(obs.stdout),
        "stdout_truncated": obs.stdout_truncated,
        "stderr_head": obs.stderr[:OUTPUT_HEAD_CHARS],
        "stderr_chars": len(obs.stderr),
        "stderr_truncated": obs.stderr_truncated,
        "content_chars": None if obs.content is None else len(obs.content),
        "reason": obs.reason,
        "ended": obs.ended,
        "workspace_ref": obs.workspace_ref,
        "image_id": obs.image_id,
        "location": {"topic": record.topic, "partition": record.partition, "offset": record.offset,
                     "timestamp_ms": record.timestamp_ms},
    }  # fmt: skip


def _with_detail(steps: list[dict[str, Any]], actions: list[Sent]) -> list[dict[str, Any]]:
    """Each step with the detail of the action it answers: same turn and kind, the last one sent before the
    answer (a resent duplicate, or an out-of-order action of the same turn, is sent again)."""
    by_turn: defaultdict[tuple[int, str], list[Sent]] = defaultdict(list)
    for action in actions:
        by_turn[(action.turn, action.kind)].append(action)
    done = []
    for step in steps:
        same = by_turn.get((step["turn"], step["action"]), []) if step["action"] is not None else []
        before = [a for a in same if a.timestamp_ms <= step["location"]["timestamp_ms"]]
        chosen = before[-1] if before else (same[0] if same else None)
        done.append({**step, "detail": None if chosen is None else chosen.detail})
    return done


def _until_end(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The episode's steps up to the one that ended it (later actions were only rejected)."""
    for index, step in enumerate(steps):
        if step["ended"] is not None:
            return steps[: index + 1]
    return steps


def _notes(records: EpisodeRecords, steps: list[dict[str, Any]], turns: int) -> list[str]:
    notes = [
        f"{n} undecodable record(s) of the episode on {topic} skipped" for topic, n in sorted(records.skipped.items())
    ]
    if not steps:
        notes.append("no observation of the episode found in the scanned range (see scanned; try --scan-limit)")
        return notes
    seen = {s["turn"] for s in steps}
    missing = [t for t in range(turns + 1) if t not in seen]
    if missing:
        listed = ", ".join(str(t) for t in missing[:MISSING_LISTED])
        more = f" and {len(missing) - MISSING_LISTED} more" if len(missing) > MISSING_LISTED else ""
        notes.append(f"turn(s) {listed}{more} not found in the scanned range (see scanned; try --scan-limit)")
    if steps[-1]["ended"] is None:
        notes.append("no observation that ended the episode found")
    return notes


def episode_section(generation: GenerationEvent, records: EpisodeRecords, size: SnapshotSize) -> dict[str, Any]:
    """The ``episode`` section of the story of a generation that ``is_episode``."""
    steps = _with_detail(_until_end(records.observations), records.actions)
    fork = next((a.fork for a in records.actions if a.fork is not None), None)
    return {
        "episode_id": generation.episode_id,
        "task_id": generation.task_id,
        "run_id": generation.run_id,
        "policy_version": generation.policy_version,
        "turns": generation.turn,
        "ended": steps[-1]["ended"] if steps else None,
        "forked_from": None if fork is None else {"episode_id": fork[0], "turn": fork[1]},
        "workspace": {
            "url": generation.workspace_ref,
            "sha256": generation.workspace_sha256,
            "size_bytes": size.size_bytes,
            "size_error": size.error,
        },
        "steps": steps,
        "notes": _notes(records, steps, generation.turn),
    }
