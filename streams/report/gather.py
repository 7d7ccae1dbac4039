"""One run's numbers for the report, from the raw records of its topics (pure: no Kafka, no plotting).

Why raw JSON and not the event models: a report must read every reward a run ever got, including ones written by
a newer producer (a reward 1.1 carries ``valid``, ``canary`` and ``invalid_reason``) or an older one; it reads the
fields it plots and tolerates the rest. The rewards topic is the source of truth: a generation with no reward is
not in the distributions; the generations give each reward its policy checkpoint and its publish time (latency),
the executions and verdicts the hidden run's status and the infrastructure's failures.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from schemas.errors import RewardstreamError

#: The reward flag that marks the overfitting gap (``streams.reward.policy.PUBLIC_PASSED_HIDDEN_FAILED``).
GAP_FLAG = "public_passed_hidden_failed"
#: The prefix of non-gating findings on a reward (``streams.reward.policy.WARN_FLAG_PREFIX``).
WARN_PREFIX = "warn:"
#: Time bins of the latency-over-time plot (at most; fewer when the run is short).
LATENCY_BINS = 24
#: Tasks the slowest-tasks table lists.
SLOWEST_TASKS = 15
#: Policy label of a reward whose generation was not found (the generations topic's retention ended before).
UNKNOWN = "(unknown)"


@dataclass(frozen=True, slots=True)
class Raw:
    """One message as read: its Kafka timestamp and its value."""

    timestamp_ms: int
    value: bytes


@dataclass(frozen=True, slots=True)
class RunRecords:
    """Every message of the run's topics that may be about the run (the gatherer filters by ``run_id``)."""

    rewards: Sequence[Raw]
    generations: Sequence[Raw] = ()
    executions: Sequence[Raw] = ()
    verdicts: Sequence[Raw] = ()
    scanned: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Row:
    """One reward of the run, with what the other topics add to it."""

    generation_id: str
    task_id: str
    checkpoint: str
    reward: float
    at: datetime
    latency_s: float | None
    hacks: tuple[str, ...]
    warnings: tuple[str, ...]
    gap: bool
    missing: tuple[str, ...]
    valid: bool | None
    canary: bool
    invalid_reason: str | None


@dataclass(frozen=True, slots=True)
class LatencyBin:
    """Publish-to-reward latency percentiles of the rewards emitted in one time bin."""

    start: datetime
    count: int
    p50: float
    p90: float
    p99: float


@dataclass(frozen=True, slots=True)
class SlowTask:
    """A task's publish-to-reward latency over the run."""

    task_id: str
    count: int
    p50: float
    p90: float
    worst: float


@dataclass(frozen=True, slots=True)
class RunReport:
    """Everything the page shows about one run."""

    run_id: str
    rows: tuple[Row, ...]
    reward_policies: tuple[str, ...]
    latency: tuple[LatencyBin, ...]
    outcomes: dict[str, int]
    hidden_statuses: dict[str, int]
    hack_flags: dict[str, int]
    warn_flags: dict[str, int]
    canary_rewards: int
    canary_hits: int
    invalid: dict[str, int]
    gap_by_task: dict[str, tuple[int, int]]
    infra_errors: dict[str, int]
    slowest: tuple[SlowTask, ...]
    scanned: dict[str, int]
    duplicates: int

    def by(self, key: str) -> dict[str, list[float]]:
        """Rewards grouped by ``task_id`` or ``checkpoint``, groups in natural order (step-200 before step-1000)."""
        groups: dict[str, list[float]] = defaultdict(list)
        for row in self.rows:
            groups[getattr(row, key)].append(row.reward)
        return {name: groups[name] for name in sorted(groups, key=natural_key)}


def natural_key(name: str) -> list[str | int]:
    """Sort key that orders the numbers in a name by value: ``HumanEval/9`` before ``HumanEval/10``."""
    return [int(part) if index % 2 else part for index, part in enumerate(re.split(r"(\d+)", name))]


class NoRewardsError(RewardstreamError):
    """The run has no reward events where the report looked."""


def _load(raw: Raw, run_id: str) -> dict[str, Any] | None:
    """The message as a JSON object when it is about ``run_id`` (anything undecodable is not)."""
    try:
        data = orjson.loads(raw.value)
    except orjson.JSONDecodeError:
        return None
    return data if isinstance(data, dict) and data.get("run_id") == run_id else None


def _time(text: object, fallback_ms: int) -> datetime:
    if isinstance(text, str):
        try:
            moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
            return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
        except ValueError:
            pass
    return datetime.fromtimestamp(fallback_ms / 1000, UTC)


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` (0..100) percentile of ``values`` by linear interpolation (``numpy.percentile``'s default)."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def _row(reward: dict[str, Any], raw: Raw, generation: dict[str, Any] | None, gen_raw: Raw | None) -> Row:
    at = _time(reward.get("created_at"), raw.timestamp_ms)
    latency = None
    if generation is not None and gen_raw is not None:
        latency = max(0.0, (at - _time(generation.get("created_at"), gen_raw.timestamp_ms)).total_seconds())
    flags = [str(f) for f in reward.get("flags") or ()]
    valid = reward.get("valid")
    reason = reward.get("invalid_reason")
    return Row(
        generation_id=str(reward.get("generation_id")),
        task_id=str(reward.get("task_id")),
        checkpoint=str(generation.get("policy_version")) if generation is not None else UNKNOWN,
        reward=float(reward.get("reward") or 0.0),
        at=at,
        latency_s=latency,
        hacks=tuple(f for f in flags if f != GAP_FLAG and not f.startswith(WARN_PREFIX)),
        warnings=tuple(f.removeprefix(WARN_PREFIX) for f in flags if f.startswith(WARN_PREFIX)),
        gap=GAP_FLAG in flags,
        missing=tuple(str(m) for m in reward.get("missing") or ()),
        valid=valid if isinstance(valid, bool) else None,
        canary=reward.get("canary") is True,
        invalid_reason=str(reason) if reason is not None else None,
    )


def outcome(row: Row) -> str:
    """The one class a reward falls in, first match wins: what a reader asks first about it."""
    if row.canary:
        return "canary hit" if row.reward > 0 else "canary held"
    if row.valid is False:
        return f"invalid: {row.invalid_reason or '?'}"
    if row.hacks:
        return "hack gated"
    if row.missing:
        return "signal missing"
    if row.reward >= 1.0:
        return "full reward"
    return "partial reward" if row.reward > 0 else "zero reward"


def _latency_bins(rows: Sequence[Row]) -> tuple[LatencyBin, ...]:
    timed = sorted((r.at, r.latency_s) for r in rows if r.latency_s is not None)
    if not timed:
        return ()
    first, last = timed[0][0], timed[-1][0]
    span = max((last - first).total_seconds(), 1.0)
    width = max(span / LATENCY_BINS, 1.0)
    bins: dict[int, list[float]] = defaultdict(list)
    for at, latency in timed:
        bins[min(int((at - first).total_seconds() / width), LATENCY_BINS - 1)].append(latency)
    return tuple(
        LatencyBin(
            first + timedelta(seconds=i * width), len(v), percentile(v, 50), percentile(v, 90), percentile(v, 99)
        )
        for i, v in sorted(bins.items())
    )


def _slowest(rows: Sequence[Row]) -> tuple[SlowTask, ...]:
    by_task: dict[str, list[float]] = defaultdict(list)
    for row in rows:
        if row.latency_s is not None:
            by_task[row.task_id].append(row.latency_s)
    tasks = [SlowTask(t, len(v), percentile(v, 50), percentile(v, 90), max(v)) for t, v in by_task.items()]
    return tuple(sorted(tasks, key=lambda s: (-s.p90, s.task_id))[:SLOWEST_TASKS])


def _first_by_generation(records: Iterable[Raw], run_id: str) -> dict[str, tuple[dict[str, Any], Raw]]:
    out: dict[str, tuple[dict[str, Any], Raw]] = {}
    for raw in records:
        data = _load(raw, run_id)
        if data is not None and isinstance(data.get("generation_id"), str):
            out.setdefault(data["generation_id"], (data, raw))
    return out


def _run_statuses(records: Iterable[Raw], run_id: str) -> list[str]:
    statuses = []
    for raw in records:
        data = _load(raw, run_id)
        run = data.get("run") if data is not None else None
        if isinstance(run, dict):
            statuses.append(str(run.get("status")))
    return statuses


def _infra(records: RunRecords, run_id: str, rows: Sequence[Row]) -> Counter[str]:
    """Infrastructure failures: sandbox errors in each role's runs (every attempt, retried ones too), rewards
    with a signal missing at the policy deadline, and rewards invalid for another of the infrastructure's doings
    (a sandbox error no retry replaced in time)."""
    errors: Counter[str] = Counter()
    for role, topic in (("executor", records.executions), ("verifier", records.verdicts)):
        errors.update(f"{role} runs: sandbox_error" for s in _run_statuses(topic, run_id) if s == "sandbox_error")
    for row in rows:
        errors.update(f"rewards: {m} missing at deadline" for m in row.missing)
        # missing_signals is counted by signal above; a canary is no infrastructure failure
        if row.valid is False and row.invalid_reason not in (None, "canary", "missing_signals"):
            errors[f"rewards invalid: {row.invalid_reason}"] += 1
    return errors


def gather(run_id: str, records: RunRecords) -> RunReport:
    """The report of ``run_id`` from its topics' records; a run without a reward is a ``NoRewardsError``."""
    rewards: dict[str, tuple[dict[str, Any], Raw]] = {}
    duplicates = 0
    for raw in records.rewards:
        data = _load(raw, run_id)
        if data is None or not isinstance(data.get("generation_id"), str):
            continue
        if data["generation_id"] in rewards:
            duplicates += 1  # a replayed or re-emitted reward: the first one is the trainer's
            continue
        rewards[data["generation_id"]] = (data, raw)
    if not rewards:
        scanned = records.scanned.get("rewards", len(records.rewards))
        raise NoRewardsError(f"run {run_id}: no reward events found ({scanned} reward messages read)")
    generations = _first_by_generation(records.generations, run_id)
    rows = tuple(_row(data, raw, *generations.get(gid, (None, None))) for gid, (data, raw) in rewards.items())
    rows = tuple(sorted(rows, key=lambda r: (r.at, r.generation_id)))
    gap: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for row in rows:
        gap[row.task_id][0] += row.gap
        gap[row.task_id][1] += 1
    canaries = [r for r in rows if r.canary]
    return RunReport(
        run_id=run_id,
        rows=rows,
        reward_policies=tuple(
            sorted({f"{d.get('policy_name')} v{d.get('policy_version')}" for d, _raw in rewards.values()})
        ),
        latency=_latency_bins(rows),
        outcomes=dict(Counter(outcome(r) for r in rows).most_common()),
        hidden_statuses=dict(Counter(_run_statuses(records.verdicts, run_id)).most_common()),
        hack_flags=dict(Counter(f for r in rows for f in r.hacks).most_common()),
        warn_flags=dict(Counter(f for r in rows for f in r.warnings).most_common()),
        canary_rewards=len(canaries),
        canary_hits=sum(r.reward > 0 for r in canaries),
        invalid=dict(Counter(r.invalid_reason or "?" for r in rows if r.valid is False).most_common()),
        gap_by_task={t: (n, total) for t, (n, total) in sorted(gap.items()) if n},
        infra_errors=dict(_infra(records, run_id, rows).most_common()),
        slowest=_slowest(rows),
        scanned=dict(records.scanned),
        duplicates=duplicates,
    )
