"""Reading a run's records from its topics: every committed message up to the ends fixed when the read starts.

Why whole topics: a run's events are spread over every partition (keyed by episode) and nothing indexes them
by run, as for ``rewardstream replay --run-id``; a message is kept when its bytes name the run (the gatherer
decodes and checks the field), so only the run's messages are held in memory.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import orjson

from bus.scan import read_ranges, watermarks
from schemas.topics import Role, catalog, topic_for
from streams.report.gather import Raw, RunRecords

#: The topics a report reads, in order: the rewards first (the source of truth).
REPORT_ROLES: tuple[Role, ...] = ("rewards", "generations", "executions", "verdicts")


def read_topic(
    config: Mapping[str, str], topic: str, run_id: str, progress: Callable[[int], None] = lambda _n: None
) -> tuple[list[Raw], int]:
    """The messages of ``topic`` whose value names ``run_id``, and how many messages were read."""
    needle = orjson.dumps(run_id)
    ranges = {p: (low, high) for p, (low, high) in watermarks(config, topic).items()}
    kept: list[Raw] = []
    read = 0
    for record in read_ranges(config, topic, ranges, progress):
        read += 1
        if needle in record.value:
            kept.append(Raw(record.timestamp_ms, record.value))
    return kept, read


def read_run(config: Mapping[str, str], prefix: str, run_id: str) -> RunRecords:
    """The run's records from the rewards, generations, executions and verdicts topics under ``prefix``."""
    specs = catalog(prefix)
    found: dict[Role, list[Raw]] = {}
    scanned: dict[str, int] = {}
    for role in REPORT_ROLES:
        found[role], scanned[role] = read_topic(config, topic_for(role, specs).name, run_id)
        if role == "rewards" and not found[role]:
            return RunRecords([], scanned=scanned)  # nothing to report: the other topics need no reading
    return RunRecords(found["rewards"], found["generations"], found["executions"], found["verdicts"], scanned)
