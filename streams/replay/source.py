"""Reading the live topics for a replay: the selected generations, and the rewards they already got.

Only reads: nothing here writes to a live topic. ``pinned`` is what the replay copies: the generations byte for
byte, except that an unpinned one is pinned to the task version its original reward was graded against.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from bus.scan import Record, offsets_for_time, read_ranges, watermarks
from schemas.codec import decode, encode
from schemas.errors import RewardstreamError
from schemas.events import GenerationEvent, RewardEvent
from streams.replay.selection import ByRun, ByTime, Selection, SelectionError

#: Rewards are looked up from this long before the earliest selected generation (producer clock skew).
REWARD_LOOKBACK_MS = 10 * 60 * 1000


@dataclass(frozen=True, slots=True)
class Selected:
    """One generation to replay: its original message (copied byte for byte) and the decoded event."""

    record: Record
    event: GenerationEvent


@dataclass(frozen=True, slots=True)
class Found:
    """What a selection found, and how much it read to find it."""

    generations: list[Selected]
    scanned: int
    undecodable: int
    duplicates: int


def _ranges(config: Mapping[str, str], topic: str, selection: Selection) -> dict[int, tuple[int, int]]:
    marks = watermarks(config, topic)
    if isinstance(selection, ByRun):
        return {p: (low, high) for p, (low, high) in marks.items()}
    if isinstance(selection, ByTime):
        ends = {p: high for p, (_low, high) in marks.items()}
        starts = offsets_for_time(config, topic, selection.from_ms, ends)
        stops = offsets_for_time(config, topic, selection.to_ms, ends)
        return {p: (starts[p], stops[p]) for p in sorted(marks)}
    unknown = sorted(set(selection.ranges) - set(marks))
    if unknown:
        raise SelectionError(f"topic {topic} has partitions {sorted(marks)}, not {unknown}")
    return {p: (max(a, marks[p][0]), min(b, marks[p][1])) for p, (a, b) in selection.ranges.items()}


def _wanted(selection: Selection, record: Record, event: GenerationEvent) -> bool:
    if isinstance(selection, ByRun):
        return event.run_id == selection.run_id
    if isinstance(selection, ByTime):
        return selection.from_ms <= record.timestamp_ms < selection.to_ms
    return True


def select_generations(
    config: Mapping[str, str], topic: str, selection: Selection, progress: Callable[[int], None] = lambda _n: None
) -> Found:
    """The selected generations in topic order (first occurrence of each generation id); none is an error."""
    ranges = _ranges(config, topic, selection)
    found: list[Selected] = []
    seen: set[str] = set()
    scanned = undecodable = duplicates = 0
    for record in read_ranges(config, topic, ranges, progress):
        scanned += 1
        try:
            event = decode(record.value, GenerationEvent)
        except RewardstreamError:
            undecodable += 1  # the workers sent it to the dead-letter topic; it never had a reward
            continue
        if not _wanted(selection, record, event):
            continue
        if event.generation_id in seen:
            duplicates += 1
            continue
        seen.add(event.generation_id)
        found.append(Selected(record, event))
    if not found:
        raise SelectionError(f"no generations matched {selection.describe()} in {topic} ({scanned} messages read)")
    return Found(found, scanned, undecodable, duplicates)


def read_rewards(
    config: Mapping[str, str],
    topic: str,
    generation_ids: set[str],
    since_ms: int | None = None,
    progress: Callable[[int], None] = lambda _n: None,
) -> dict[str, RewardEvent]:
    """The first reward of each of ``generation_ids`` in ``topic`` (from ``since_ms`` minus a margin, if given)."""
    marks = watermarks(config, topic)
    ends = {p: high for p, (_low, high) in marks.items()}
    starts = {p: low for p, (low, _high) in marks.items()}
    if since_ms is not None:
        starts = offsets_for_time(config, topic, max(0, since_ms - REWARD_LOOKBACK_MS), ends)
    found: dict[str, RewardEvent] = {}
    for record in read_ranges(config, topic, {p: (starts[p], ends[p]) for p in ends}, progress):
        try:
            reward = decode(record.value, RewardEvent)
        except RewardstreamError:
            continue
        if reward.generation_id in generation_ids and reward.generation_id not in found:
            found[reward.generation_id] = reward
    return found


def pinned(generations: Sequence[Selected], rewards: Mapping[str, RewardEvent]) -> list[Selected]:
    """The generations as the replay copies them. A generation pinned to a task version is copied byte for
    byte, and so graded against that version again. An unpinned one was graded against the latest version of
    its task when the roles read it: it is pinned to the version its original reward records (re-encoded with
    that one field added), so the replay grades the same task even if a corrected one was loaded since. One
    whose reward names no version (or that has no reward) is copied as it is: graded against the latest."""
    out: list[Selected] = []
    for selected in generations:
        event = selected.event
        reward = rewards.get(event.generation_id)
        if event.task_version is not None or reward is None or reward.task_version is None:
            out.append(selected)
            continue
        event = event.model_copy(update={"task_version": reward.task_version})
        out.append(Selected(replace(selected.record, value=encode(event)), event))
    return out
