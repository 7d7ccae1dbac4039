"""The join state machine, pure: what one generation's parts are, and whether to emit, wait or give up.

Why pure: the emit decision (complete, deadline, sandbox_error retry) is where rewards are won or lost, so
it is unit-tested without Kafka; an engine only stores the state and sends what this module decides.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

from schemas.caps import cap, item_cap
from schemas.events import ExecutionResult, HiddenVerdict, JudgeScore, RewardEvent
from schemas.ids import result_ids
from schemas.result_rules import InvalidReason
from schemas.signals import SIGNALS, Signal
from streams.reward.decided import DecidedInput, DecidedReward
from streams.reward.policy import Policy, Scored, Withheld, evaluate
from streams.reward.state import (
    PENDING_PREFIX,
    JoinState,
    PartEvent,
    Row,
    Status,
    emitted,
    row_bytes,
    row_pending,
)

__all__ = [
    "PENDING_PREFIX",
    "JoinState",
    "PartEvent",
    "Row",
    "Status",
    "absorb",
    "decide",
    "emitted",
    "emitted_from_reward",
    "reward_event",
    "row_bytes",
    "row_pending",
]

_NAMESPACE = uuid.UUID("5b0b7f5e-9a53-4c1e-8d0e-3f1f2f6f0a01")
#: Its bytes (``UUID.bytes`` converts its int on every read).
_NAMESPACE_BYTES = _NAMESPACE.bytes
#: A UUID in hex: 32 digits; the 13th is the version, the 17th holds the variant's two bits.
_UUID_DIGITS = 32
_VERSION_DIGIT = 12
_VARIANT_DIGIT = 16
#: A hex digit with its two high bits set to the RFC 4122 variant (10).
_VARIANT = {digit: f"{int(digit, 16) & 0x3 | 0x8:x}" for digit in "0123456789abcdef"}
#: Reasons and flags a reward carries at most (the contract's caps, read once: ``reward_event`` cuts to them
#: inline, as ``fit_list``/``fit_item`` would, without their lookups on every reward: ~5 us of ~150 in process).
_REASONS = cap(RewardEvent, "reasons")
_FLAGS = cap(RewardEvent, "flags")
#: Characters a reason may have (a judge's error may be longer: its start is kept).
_REASON_CHARS = item_cap(RewardEvent, "reasons")


def part_of(event: PartEvent) -> Signal:
    """Which side of the join an event is."""
    if isinstance(event, ExecutionResult):
        return "execution"
    if isinstance(event, HiddenVerdict):
        return "verdict"
    return "judgement"


def _better(old: PartEvent | None, new: PartEvent) -> bool:
    """Whether ``new`` replaces ``old``: a retry after sandbox_error, or a later attempt; else first wins."""
    if old is None:
        return True
    if old.event_id == new.event_id:
        return False
    if isinstance(old, JudgeScore) or isinstance(new, JudgeScore):
        return old.status == "error" and new.status == "ok"  # type: ignore[union-attr]
    old_error = old.run.status == "sandbox_error"
    new_error = new.run.status == "sandbox_error"
    if old_error != new_error:
        return old_error
    return new.attempt > old.attempt


@dataclass(frozen=True, slots=True)
class Absorbed:
    """The state after an event, and a note when the event changed nothing (late, duplicate, older)."""

    state: JoinState
    note: str | None = None


def absorb(state: JoinState | None, event: PartEvent, partition: int, now: float, raw: bytes | None = None) -> Absorbed:
    """Add one part to a generation's state (a new state when the generation is new); ``raw``: the input bytes
    the part was decoded from as they are, if it was (``decode_verbatim``), kept to be stored as the part."""
    part = part_of(event)
    if state is None:
        raws = {part: raw} if raw is not None else None
        return Absorbed(JoinState(  # the ids spelled out: ``result_ids`` makes two dicts a generation
            generation_id=event.generation_id, episode_id=event.episode_id, run_id=event.run_id,
            task_id=event.task_id, turn=event.turn, partition=partition, first_seen=now, raw=raws,
            execution=event if isinstance(event, ExecutionResult) else None,
            verdict=event if isinstance(event, HiddenVerdict) else None,
            judgement=event if isinstance(event, JudgeScore) else None,
        ))  # fmt: skip
    if state.status != "pending":
        return Absorbed(state, f"{part} {event.event_id} arrived after the generation was {state.status}")
    old: PartEvent | None = getattr(state, part)
    if not _better(old, event):
        return Absorbed(state, f"{part} {event.event_id} ignored: already have {old.event_id if old else '?'}")
    return Absorbed(state.with_part(part, event, raw))


@dataclass(frozen=True, slots=True)
class Wait:
    """Nothing to do yet."""


@dataclass(frozen=True, slots=True)
class Emit:
    """Send this reward."""

    reward: DecidedReward


@dataclass(frozen=True, slots=True)
class Withhold:
    """A sandbox_error holds the reward back; report it once."""

    reasons: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class GiveUp:
    """No retry came in time: the generation ends with an invalid reward (``valid`` false, reason
    sandbox_error: the trainer's one reward, never training data), reported, never a silent 0."""

    reasons: tuple[str, ...]
    reward: DecidedReward


Decision = Wait | Emit | Withhold | GiveUp
#: The one ``Wait`` (decided on most messages; equal to any other).
_WAIT = Wait()


def decide(state: JoinState, now: float, policy: Policy) -> Decision:
    """Emit when every awaited part is in, or at the deadline; hold back on sandbox_error."""
    if state.status != "pending":
        return _WAIT
    missing = state.missing(policy)
    deadline_passed = now >= state.first_seen + policy.join.deadline_s
    if missing and not deadline_passed:
        return _WAIT
    outcome = evaluate(policy, state.signals(), missing)
    if isinstance(outcome, Withheld):
        if now >= state.first_seen + policy.join.sandbox_retry_s:
            why = (*outcome.reasons, f"no retry within {policy.join.sandbox_retry_s:g}s: an invalid reward")
            return GiveUp(why, reward_event(state, Scored(0.0, {}, why, ()), missing, policy, broken=True))
        return _WAIT if state.withheld_reported else Withhold(outcome.reasons)
    return Emit(reward_event(state, outcome, missing, policy))


def reward_id(generation_id: str, policy: Policy) -> str:
    """Deterministic reward event id: the same generation under the same policy always gets the same id."""
    return uuid5_hex(_NAMESPACE_BYTES, f"{generation_id}\x00{policy.name}\x00{policy.version}")


def uuid5_hex(namespace: uuid.UUID | bytes, name: str) -> str:
    """``uuid.uuid5(namespace, name).hex`` without the UUID object (its int arithmetic was 4% of the
    processor's CPU): the SHA-1's first 16 bytes with the version (5) and variant (RFC 4122) bits set.
    ``namespace``: the UUID or its bytes."""
    space = namespace.bytes if isinstance(namespace, uuid.UUID) else namespace
    digest = hashlib.sha1(space + name.encode(), usedforsecurity=False).hexdigest()
    version, variant = _VERSION_DIGIT, _VARIANT_DIGIT
    return (
        f"{digest[:version]}5{digest[version + 1 : variant]}{_VARIANT[digest[variant]]}"
        f"{digest[variant + 1 : _UUID_DIGITS]}"
    )


def task_versions(state: JoinState) -> tuple[str | None, str | None]:
    """(the task version a reward records, a reason to add when its parts were graded against different ones).

    Each role records the version it graded against. A generation pinned to a version is graded against that
    one by every role; an unpinned one against the latest when each role read it, so a ``tasks load`` between
    two roles' reads makes them differ. The reward then records the verdict's version (the hidden tests'
    evidence decides it; else the execution's, else the judgement's) and says which part had which. A part
    that names none (a role that cannot tell) disagrees with nobody."""
    named = [(p, ev.task_version) for p in SIGNALS if (ev := getattr(state, p)) is not None and ev.task_version]
    if not named:
        return None, None
    chosen = named[0][1]
    if all(v == chosen for _p, v in named):  # the usual case: one version
        return chosen, None
    chosen = next((v for p, v in named if p == "verdict"), chosen)
    parts = ", ".join(f"{p} {v[:12]}" for p, v in named)
    why = "an unpinned generation graded across a tasks load"
    return chosen, f"task versions differ: {parts} ({why}); the reward records {chosen[:12]}"


def invalid_reason(
    state: JoinState, missing: tuple[Signal, ...], policy: Policy, *, broken: bool = False
) -> InvalidReason | None:
    """Why the reward is not fit for training, or None. Only what the candidate cannot cause counts: the task
    being a canary (the verifier read it from the task), a sandbox_error no retry replaced (``broken``), a
    required part that never arrived. A part that is not required (the judge) missing leaves it valid."""
    if state.verdict is not None and state.verdict.canary:
        return "canary"
    if broken:
        return "sandbox_error"
    if any(part in policy.join.required for part in missing):
        return "missing_signals"
    return None


def reward_event(
    state: JoinState, scored: Scored, missing: tuple[Signal, ...], policy: Policy, *, broken: bool = False
) -> DecidedReward:
    """The reward for a scored state, carrying the policy version, the task version, the ids of the events used
    and whether it is valid for training (``broken``: given up after a sandbox_error). Each reason is cut to the
    contract's cap (a judge's error may be longer than a reason may be)."""
    execution, verdict, judgement = state.execution, state.verdict, state.judgement
    inputs: list[DecidedInput] = []
    if execution is not None:
        inputs.append(DecidedInput("execution", execution.event_id))
    if verdict is not None:
        inputs.append(DecidedInput("verdict", verdict.event_id))
    if judgement is not None:
        inputs.append(DecidedInput("judgement", judgement.event_id))
    version, differ = task_versions(state)
    reasons = [r if len(r) <= _REASON_CHARS else r[:_REASON_CHARS] for r in scored.reasons[:_REASONS]]
    if differ is not None:  # never cut: it says the parts do not describe one task
        reasons = [*reasons[: _REASONS - 1], differ]
    why = invalid_reason(state, missing, policy, broken=broken)
    return DecidedReward(
        event_id=reward_id(state.generation_id, policy), created_at=datetime.now(UTC),
        generation_id=state.generation_id, episode_id=state.episode_id, run_id=state.run_id,
        task_id=state.task_id, task_version=version, turn=state.turn, reward=scored.reward,
        policy_name=policy.name, policy_version=policy.version, components=scored.components, reasons=reasons,
        flags=list(scored.flags[:_FLAGS]), missing=list(missing), inputs=inputs, valid=why is None,
        canary=why == "canary", invalid_reason=why,
    )  # fmt: skip


def emitted_from_reward(reward: RewardEvent, partition: int, offset: int, now: float) -> JoinState:
    """The emitted state rebuilt from a reward found on the rewards topic (after a crash lost the marker)."""
    return JoinState(
        status="emitted",
        **result_ids(reward),
        partition=partition,
        first_seen=now,
        reward_event_id=reward.event_id,
        reward_offset=offset,
    )
