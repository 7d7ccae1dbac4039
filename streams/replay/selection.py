"""Which generations a replay takes: one run, a time window, or explicit partition:offset ranges (pure parsing).

Offset syntax: ``--from-offset 0:100,1:40 --to-offset 0:300,1:90`` selects partition 0 offsets 100..299 and
partition 1 offsets 40..89 (from inclusive, to exclusive, as Kafka ranges are); both options must name the
same partitions. Times are ISO 8601 (``2026-11-29T18:00:00Z``; no zone means UTC) or epoch milliseconds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

from schemas.errors import ConfigError


class SelectionError(ConfigError):
    """The replay selection options are missing, contradictory or malformed."""


_PART_OFFSET = re.compile(r"^(\d{1,6}):(\d{1,19})$")


@dataclass(frozen=True, slots=True)
class ByRun:
    """Every generation of one training run."""

    run_id: str

    def describe(self) -> str:
        return f"run {self.run_id}"


@dataclass(frozen=True, slots=True)
class ByTime:
    """Generations whose Kafka timestamp is in ``[from_ms, to_ms)``."""

    from_ms: int
    to_ms: int

    def describe(self) -> str:
        return f"time {_iso(self.from_ms)} .. {_iso(self.to_ms)}"


@dataclass(frozen=True, slots=True)
class ByOffsets:
    """Explicit ranges: partition -> (first offset, end offset exclusive)."""

    ranges: dict[int, tuple[int, int]]

    def describe(self) -> str:
        return "offsets " + ", ".join(f"{p}:{a}..{b}" for p, (a, b) in sorted(self.ranges.items()))


Selection = ByRun | ByTime | ByOffsets


def parse_offsets(text: str, option: str) -> dict[int, int]:
    """``"0:100,1:40"`` -> ``{0: 100, 1: 40}``; anything else is a one-line error naming the option."""
    out: dict[int, int] = {}
    for item in (part.strip() for part in text.split(",")):
        match = _PART_OFFSET.match(item)
        if match is None:
            raise SelectionError(f"{option} {text!r}: expected PARTITION:OFFSET[,PARTITION:OFFSET...], e.g. 0:100,1:40")
        partition, offset = int(match.group(1)), int(match.group(2))
        if partition in out:
            raise SelectionError(f"{option} {text!r}: partition {partition} given twice")
        out[partition] = offset
    return out


def parse_time(text: str, option: str) -> int:
    """ISO 8601 (naive = UTC) or epoch milliseconds -> epoch milliseconds."""
    value = text.strip()
    if value.isdigit():
        return int(value)
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise SelectionError(
            f"{option} {text!r}: expected an ISO 8601 time (e.g. 2026-11-29T18:00:00Z) or epoch milliseconds"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def build_selection(
    *,
    run_id: str | None = None,
    from_time: str | None = None,
    to_time: str | None = None,
    from_offset: str | None = None,
    to_offset: str | None = None,
) -> Selection:
    """Exactly one way of selecting, complete and consistent."""
    by_time = from_time is not None or to_time is not None
    by_offset = from_offset is not None or to_offset is not None
    if (run_id is not None) + by_time + by_offset != 1:
        raise SelectionError("choose exactly one of --run-id, --from-time/--to-time, --from-offset/--to-offset")
    if run_id is not None:
        if not run_id.strip():
            raise SelectionError("--run-id must not be empty")
        return ByRun(run_id)
    if by_time:
        if from_time is None or to_time is None:
            raise SelectionError("--from-time and --to-time go together")
        start, end = parse_time(from_time, "--from-time"), parse_time(to_time, "--to-time")
        if end <= start:
            raise SelectionError(f"--to-time {to_time!r} must be after --from-time {from_time!r}")
        return ByTime(start, end)
    if from_offset is None or to_offset is None:
        raise SelectionError("--from-offset and --to-offset go together")
    starts, ends = parse_offsets(from_offset, "--from-offset"), parse_offsets(to_offset, "--to-offset")
    if set(starts) != set(ends):
        raise SelectionError(
            f"--from-offset names partitions {sorted(starts)} but --to-offset names {sorted(ends)}: name the same ones"
        )
    for partition, start_offset in starts.items():
        if ends[partition] <= start_offset:
            raise SelectionError(
                f"partition {partition}: --to-offset {ends[partition]} must be above --from-offset {start_offset} "
                "(from inclusive, to exclusive)"
            )
    return ByOffsets({p: (starts[p], ends[p]) for p in sorted(starts)})


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat().replace("+00:00", "Z")
