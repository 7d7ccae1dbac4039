"""Find an agent episode's actions and observations on the topics, for explain (bounded, like ``locate``).

Both topics are keyed by ``episode_id``, as the generation is, so the episode is on the generation's partition
number. The episode ended where its generation was published (in one transaction with its last observation),
so each topic is read backwards from the generation's timestamp (plus a margin): the last ``scan_limit``
messages of that partition before it. Records with the episode's key that do not decode are counted, not
fatal: explain says how many it skipped.
"""

from __future__ import annotations

from collections.abc import Mapping

from bus.scan import Record, offsets_for_time, read_ranges, watermarks
from schemas.codec import decode
from schemas.episodes import ActionEvent, ObservationEvent
from schemas.errors import RewardstreamError
from schemas.topics import catalog, topic_for
from streams.explain.locate import Found, Scanned
from streams.explain.steps import EpisodeRecords

#: Records are read up to this long after the generation's timestamp (producer clock skew).
LOOKAHEAD_MS = 60 * 1000


def locate_episode(config: Mapping[str, str], prefix: str, generation: Found, *, scan_limit: int) -> EpisodeRecords:
    """The episode's records on the actions and observations topics, on the generation's partition."""
    specs = catalog(prefix)
    found = EpisodeRecords(generation.event.episode_id)
    until = generation.record.timestamp_ms + LOOKAHEAD_MS
    for role in ("actions", "observations"):
        topic = topic_for(role, specs).name
        ranges = _before(config, topic, generation.record.partition, until, scan_limit)
        count = 0
        for record in read_ranges(config, topic, ranges):
            count += 1
            _keep(found, record, ActionEvent if role == "actions" else ObservationEvent)
        found.scanned.append(Scanned(topic, ranges, count))
    return found


def _before(
    config: Mapping[str, str], topic: str, partition: int, until_ms: int, scan_limit: int
) -> dict[int, tuple[int, int]]:
    """The last ``scan_limit`` offsets of ``partition`` before ``until_ms``."""
    low, high = watermarks(config, topic).get(partition, (0, 0))
    end = min(high, offsets_for_time(config, topic, until_ms, {partition: high}).get(partition, high))
    return {partition: (max(low, end - scan_limit), end)}


def _keep(found: EpisodeRecords, record: Record, model: type[ActionEvent] | type[ObservationEvent]) -> None:
    if record.key != found.episode_id.encode():
        return
    try:
        event = decode(record.value, model)
    except RewardstreamError:
        found.skip(record.topic)
        return
    found.keep(record, event)
