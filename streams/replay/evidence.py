"""An image task's verification evidence for a replay: the verdicts its old and its new reward were made of.

Why: a replay re-verifies an image task's submit from the WORKDIR snapshot its generation names, in a fresh
container of the task's image on this host; the reward alone cannot say whether a changed number came from
another image (a rebuild is a new image id), another test output or another reward file. So the replay reads
the verdicts topics too, live and its own, but only when the selection holds an episode's submit (a one-shot
replay reads nothing more), and shows each side's ``verifier`` (``schemas.result_rules.VerifierOutcome``).
Only reads: nothing here writes to a live topic.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from bus.scan import offsets_for_time, read_ranges, watermarks
from schemas.codec import decode
from schemas.errors import RewardstreamError
from schemas.events import HiddenVerdict, RewardEvent
from streams.replay.source import REWARD_LOOKBACK_MS, Selected


def wants_evidence(generations: Iterable[Selected]) -> bool:
    """Whether any selected generation is an episode's submit (the only kind an image task has)."""
    return any(s.event.workspace_ref is not None for s in generations)


def read_verifier_verdicts(
    config: Mapping[str, str],
    topic: str,
    generation_ids: set[str],
    since_ms: int | None = None,
    progress: Callable[[int], None] = lambda _n: None,
) -> dict[str, list[HiddenVerdict]]:
    """Every image-task verdict (``suite_kind`` verifier) of ``generation_ids`` in ``topic``, in topic order per
    generation (from ``since_ms`` minus the rewards' margin, if given)."""
    marks = watermarks(config, topic)
    ends = {p: high for p, (_low, high) in marks.items()}
    starts = {p: low for p, (low, _high) in marks.items()}
    if since_ms is not None:
        starts = offsets_for_time(config, topic, max(0, since_ms - REWARD_LOOKBACK_MS), ends)
    found: dict[str, list[HiddenVerdict]] = {}
    for record in read_ranges(config, topic, {p: (starts[p], ends[p]) for p in ends}, progress):
        try:
            verdict = decode(record.value, HiddenVerdict)
        except RewardstreamError:
            continue
        if verdict.suite_kind == "verifier" and verdict.generation_id in generation_ids:
            found.setdefault(verdict.generation_id, []).append(verdict)
    return found


def used_verdicts(
    verdicts: Mapping[str, list[HiddenVerdict]], rewards: Mapping[str, RewardEvent]
) -> dict[str, HiddenVerdict]:
    """Per generation, the verdict its reward names as an input, else its latest one."""
    chosen: dict[str, HiddenVerdict] = {}
    for generation_id, found in verdicts.items():
        reward = rewards.get(generation_id)
        wanted = set() if reward is None else {i.event_id for i in reward.inputs if i.role == "verdict"}
        chosen[generation_id] = next((v for v in found if v.event_id in wanted), found[-1])
    return chosen


def verifier_side(verdict: HiddenVerdict | None) -> dict[str, Any] | None:
    """One side's evidence as JSON: the verifier's outcome (reward, source, reason, image_id, output_tail,
    reward_file, ...) and the run's status; None when there was no image-task verdict."""
    if verdict is None:
        return None
    outcome = None if verdict.verifier is None else verdict.verifier.model_dump(mode="json")
    return {"event_id": verdict.event_id, "status": verdict.run.status, "verifier": outcome}
