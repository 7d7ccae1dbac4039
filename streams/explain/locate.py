"""Find every event of one generation on the topics: the generation, executions, verdicts, judgements, rewards.

Bounded on purpose: the generation is read at the exact partition/offset a log record names when there is
one; otherwise the last ``scan_limit`` messages of each partition of the generations topic are scanned. The
other topics are scanned on the generation's partition only (every topic is keyed by ``episode_id``, so an
episode has the same partition number everywhere), from the generation's timestamp (minus a margin) and at
most ``scan_limit`` messages. What was scanned is reported, so "not found" says where it looked.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from bus.scan import Record, offsets_for_time, read_ranges, watermarks
from schemas.codec import Contract, decode
from schemas.errors import RewardstreamError
from schemas.events import Event, ExecutionResult, GenerationEvent, HiddenVerdict, JudgeScore, RewardEvent
from schemas.topics import Role, catalog, topic_for

#: Results are looked for from this long before the generation's timestamp (producer clock skew).
LOOKBACK_MS = 10 * 60 * 1000
DEFAULT_SCAN_LIMIT = 200_000
RESULT_ROLES: tuple[tuple[Role, type[Event]], ...] = (
    ("executions", ExecutionResult),
    ("verdicts", HiddenVerdict),
    ("judgements", JudgeScore),
    ("rewards", RewardEvent),
)


@dataclass(frozen=True, slots=True)
class Found:
    """One event and where it was."""

    record: Record
    event: Event

    def location(self) -> dict[str, Any]:
        return {
            "topic": self.record.topic,
            "partition": self.record.partition,
            "offset": self.record.offset,
            "timestamp_ms": self.record.timestamp_ms,
        }


@dataclass(frozen=True, slots=True)
class Scanned:
    """What one topic read covered."""

    topic: str
    ranges: dict[int, tuple[int, int]]
    messages: int

    def as_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "ranges": {str(p): [a, b] for p, (a, b) in sorted(self.ranges.items())},
            "messages": self.messages,
        }


@dataclass
class Located:
    """Every event of the generation found, by role, in topic order."""

    generation_id: str
    events: dict[Role, list[Found]] = field(default_factory=dict)
    scanned: list[Scanned] = field(default_factory=list)

    def generation(self) -> Found | None:
        found = self.events.get("generations", [])
        return found[0] if found else None

    def of(self, role: Role) -> list[Found]:
        return self.events.get(role, [])


@dataclass(frozen=True, slots=True)
class Hint:
    """Where a log record said the generation's message was (topic, partition, offset)."""

    topic: str
    partition: int
    offset: int


def locate(
    config: Mapping[str, str],
    prefix: str,
    generation_id: str,
    *,
    hints: list[Hint] | None = None,
    scan_limit: int = DEFAULT_SCAN_LIMIT,
) -> Located:
    """Find the generation (exact offset from a hint, else a bounded scan) and then its results."""
    specs = catalog(prefix)
    located = Located(generation_id)
    gen_topic = topic_for("generations", specs).name
    exact = [h for h in hints or [] if h.topic == gen_topic]
    if exact:
        _scan(
            config,
            located,
            "generations",
            GenerationEvent,
            topic=gen_topic,
            ranges={exact[0].partition: _one(exact[0].offset)},
        )
    if located.generation() is None:
        marks = watermarks(config, gen_topic)
        ranges = {p: (max(low, high - scan_limit), high) for p, (low, high) in marks.items()}
        _scan(config, located, "generations", GenerationEvent, topic=gen_topic, ranges=ranges)
    generation = located.generation()
    if generation is None:
        return located
    partition = generation.record.partition
    since = max(0, generation.record.timestamp_ms - LOOKBACK_MS)
    for role, model in RESULT_ROLES:
        topic = topic_for(role, specs).name
        _scan(config, located, role, model, topic=topic, ranges=_bounded(config, topic, partition, since, scan_limit))
    return located


def _one(offset: int) -> tuple[int, int]:
    return (offset, offset + 1)


def _bounded(
    config: Mapping[str, str], topic: str, partition: int, since_ms: int, scan_limit: int
) -> dict[int, tuple[int, int]]:
    low, high = watermarks(config, topic).get(partition, (0, 0))
    start = offsets_for_time(config, topic, since_ms, {partition: high}).get(partition, high)
    start = max(low, start)
    return {partition: (start, min(high, start + scan_limit))}


def _scan(
    config: Mapping[str, str],
    located: Located,
    role: Role,
    model: type[Event],
    *,
    topic: str,
    ranges: dict[int, tuple[int, int]],
) -> None:
    count = 0
    for record in read_ranges(config, topic, ranges):
        count += 1
        if located.generation_id.encode() not in record.value:
            continue  # cheap pre-filter: the id must appear in the bytes
        try:
            event: Contract = decode(record.value, model)
        except RewardstreamError:
            continue
        if isinstance(event, Event) and event.generation_id == located.generation_id:
            located.events.setdefault(role, []).append(Found(record, event))
    located.scanned.append(Scanned(topic, ranges, count))
