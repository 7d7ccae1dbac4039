"""One replay, start to end: select, read the old rewards, run the pipeline on the replay namespace, copy the
generations in (each graded against the task version its original was, ``source.pinned``), collect the new
rewards (and, when an episode's submit is among them, the image-task verdicts both sides used), diff. The
pipeline and its teardown are injected (the CLI wires the workers; ``streams`` never imports them).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from schemas.topics import catalog, topic_for
from streams.replay.diff import Replayed, Report, diff
from streams.replay.evidence import read_verifier_verdicts, used_verdicts, wants_evidence
from streams.replay.namespace import Feed, feed_and_collect
from streams.replay.ready import pipeline_groups, wait_groups_ready
from streams.replay.selection import Selection
from streams.replay.source import Found, pinned, read_rewards, select_generations


class ReplayPipeline(Protocol):
    """The pipeline processes on the replay namespace (they create its topics when they start)."""

    def start(self) -> None: ...

    def stop(self) -> object: ...


class Reporter(Protocol):
    """Where progress goes (a rich progress bar in the CLI)."""

    def phase(self, name: str, total: int | None) -> None: ...

    def update(self, completed: int) -> None: ...


@dataclass(frozen=True, slots=True)
class ReplayPlan:
    """What to replay, from where, into where."""

    kafka: Mapping[str, str]
    live_prefix: str
    replay_prefix: str
    partitions: int
    selection: Selection
    idle_timeout_s: float = 300.0
    window: int = 64


@dataclass(frozen=True, slots=True)
class ReplayResult:
    """The diff, and what the selection read."""

    report: Report
    found: Found


def run_replay(plan: ReplayPlan, pipeline: ReplayPipeline, reporter: Reporter) -> ReplayResult:
    """Replay the selected generations; the caller tears the namespace down (``pipeline.stop`` runs here)."""
    live = catalog(plan.live_prefix, plan.partitions)
    replay = catalog(plan.replay_prefix, plan.partitions)
    reporter.phase(f"selecting ({plan.selection.describe()})", None)
    found = select_generations(plan.kafka, topic_for("generations", live).name, plan.selection, reporter.update)
    ids = {s.event.generation_id for s in found.generations}
    earliest = min(s.record.timestamp_ms for s in found.generations)
    reporter.phase("reading old rewards", None)
    old = read_rewards(plan.kafka, topic_for("rewards", live).name, ids, since_ms=earliest, progress=reporter.update)
    reporter.phase("starting the replay pipeline", None)
    feed = Feed(
        topic_for("generations", replay).name,
        topic_for("rewards", replay).name,
        range(plan.partitions),
        window=plan.window,
        idle_timeout_s=plan.idle_timeout_s,
    )
    try:
        pipeline.start()
        reporter.phase("waiting for the replay pipeline's consumer groups", None)
        wait_groups_ready(plan.kafka, pipeline_groups(plan.replay_prefix))
        reporter.phase("replaying", len(ids))
        new = feed_and_collect(plan.kafka, feed, pinned(found.generations, old), reporter.update)
    finally:
        reporter.phase("stopping the replay pipeline", None)
        pipeline.stop()
    old_verdicts, new_verdicts = {}, {}
    if wants_evidence(found.generations):  # an image task's submit: its verifications' evidence, both sides
        reporter.phase("reading the image tasks' verdicts", None)
        verdicts = topic_for("verdicts", live).name
        old_verdicts = used_verdicts(read_verifier_verdicts(plan.kafka, verdicts, ids, earliest, reporter.update), old)
        verdicts = topic_for("verdicts", replay).name
        new_verdicts = used_verdicts(read_verifier_verdicts(plan.kafka, verdicts, ids, None, reporter.update), new)
    generations = [Replayed(s.event.generation_id, s.event.run_id, s.event.task_id) for s in found.generations]
    return ReplayResult(diff(generations, old, new, old_verdicts, new_verdicts), found)
