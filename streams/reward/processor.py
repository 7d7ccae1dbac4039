"""The reward processor's core, shared by both engines: decode, join, decide, emit.

Exactly once is the engine's job, behind ``StateStore`` and ``Outputs``: the Kafka engine (``kafka_engine``)
commits a reward and its ``emitted`` marker in one Kafka transaction; the Faust engine (``faust``) emits,
then marks, and de-duplicates after a crash (``faust.emit_then_mark``). The core is sequential: an engine that runs
it from concurrent tasks serialises the calls.

Deadlines run in event time: a partition's clock is the oldest of its inputs' newest processed timestamps,
and an input read to its end counts as "now", so a processor catching up on a backlog (after a restart)
never times out parts already waiting in the log, while a judge that never answers (its topic idle) still
lets the reward out at the deadline.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from schemas.caps import fit
from schemas.codec import DecodeError, decode_verbatim, encode
from schemas.events import DeadLetter, ExecutionResult, HiddenVerdict, JudgeScore, LogRecord
from schemas.ids import generation_ids
from schemas.signals import SIGNAL_TOPIC
from streams.reward.decided import DecidedReward
from streams.reward.join import (
    Emit,
    GiveUp,
    JoinState,
    PartEvent,
    Row,
    Wait,
    Withhold,
    absorb,
    decide,
    row_pending,
)
from streams.reward.pending import PendingIndex, load_state
from streams.reward.policy import Policy

COMPONENT = "rewards"
#: Exit code (EX_SOFTWARE) of a processor that stopped itself so that its supervisor restarts it from
#: committed state: crash-only recovery in both engines.
RESTART_EXIT_CODE = 70
#: Rows one expiry run reads at most (``RewardProcessor._expire``): ~0.25 s of a transaction.
EXPIRY_CHUNK = 50_000
#: The model each input role's messages are decoded and validated as.
INPUT_MODELS: dict[str, type[ExecutionResult] | type[HiddenVerdict] | type[JudgeScore]] = {
    "executions": ExecutionResult,
    "verdicts": HiddenVerdict,
    "judgements": JudgeScore,
}
log = logging.getLogger("rewardstream.rewards")


class StateStore(Protocol):
    """The table: generation_id -> JoinState (a ``Row``: serialized, or the state), written to a given changelog
    partition."""

    def get(self, key: str) -> Row | None: ...
    async def put(self, partition: int, key: str, value: Row) -> None:
        """Store and hand the changelog record (``row_bytes``) to the producer before returning (or, in a
        transaction, before it commits: its last value per key is all a read_committed restore could see)."""
        ...

    async def delete(self, partition: int, key: str) -> None: ...
    def items(self) -> Iterable[tuple[str, Row]]: ...


class Outputs(Protocol):
    """Where the processor's messages go."""

    async def send_reward(self, state: JoinState, reward: DecidedReward) -> None:
        """Send ``reward`` and store ``state`` marked emitted (``join.emitted``), so it goes out exactly once."""
        ...

    async def send_dlq(self, key: bytes | None, value: bytes) -> None: ...
    async def send_log(self, key: bytes, value: bytes) -> None: ...

    async def caught_up(self, partitions: set[int], processed: Mapping[tuple[str, int], int]) -> InputEnds:
        """Where the input (topic, partition)s of ``partitions`` stand (``processed``: last offsets)."""
        ...


@dataclass(frozen=True, slots=True)
class InputEnds:
    """Where inputs stand against their ends on the broker."""

    #: Consumed to the end: nothing committed on them is left to process.
    read: frozenset[tuple[str, int]]
    #: Of ``read``, those whose writer is not still coming (``liveness``): their silence may count as "now".
    settled: frozenset[tuple[str, int]]
    #: The end (high watermark) of each input asked about.
    ends: Mapping[tuple[str, int], int]


@dataclass(frozen=True, slots=True)
class TickPlan:
    """What a tick will do, decided from reads only: expire finished states, decide the due generations."""

    wall: float
    partitions: frozenset[int]
    expire: bool
    #: (generation id, its partition's event time) of each generation past its deadline.
    due: tuple[tuple[str, float], ...]
    #: Partitions whose states the tick reads and writes.
    touched: frozenset[int]


@dataclass(frozen=True, slots=True)
class Topics:
    """Input topic name -> role (executions, verdicts, judgements)."""

    roles: Mapping[str, str]


class RewardProcessor:
    """Joins parts into rewards; every method that touches the table runs under one lock."""

    def __init__(
        self,
        policy: Policy,
        topics: Topics,
        store: StateStore,
        outputs: Outputs,
        *,
        clock: Callable[[], float] = time.time,
        retention_s: float = 7 * 86_400.0,
    ) -> None:
        self.policy = policy
        self.topics = topics
        self.store = store
        self.outputs = outputs
        self.clock = clock
        self.retention_s = retention_s
        self._next_expiry = 0.0
        #: Keys the expiry sweep in progress has yet to read (``_expire``).
        self._sweep: list[str] = []
        self._next_note = 0.0
        self._progress: dict[tuple[str, int], float] = {}
        self._progress_since = clock()
        self.worker = fit(LogRecord, "worker", f"{socket.gethostname()}:{os.getpid()}")
        self._topic_time: dict[tuple[str, int], float] = {}
        #: ``_event_time`` of each partition, dropped when one of its inputs' times moves (rarely, per message).
        self._event_times: dict[int, float] = {}
        self.processed: dict[tuple[str, int], int] = {}
        #: Late generation -> input -> the offset that input must be read to before the generation's missing part
        #: on it may be given up (``_drained``); kept only while the generation is a deadline candidate.
        self._drain_to: dict[str, dict[tuple[str, int], int]] = {}
        self.counts: dict[str, int] = {
            "rewards": 0,
            "dlq": 0,
            "gave_up": 0,
            "withheld": 0,
            "expired": 0,
        }
        #: Called with the reason (error class) of every dead letter: the engine's metrics.
        self.on_dead_letter: Callable[[str], None] = lambda _reason: None
        #: Called with every decided generation's outcome (complete, partial, gave_up) and the seconds from its
        #: publish to the decision (``first_seen``: its results carry the generation's Kafka timestamp): the
        #: engine's metrics (rewards past their deadline, publish-to-reward latency).
        self.on_outcome: Callable[[str, float], None] = lambda _outcome, _seconds: None
        #: The table's pending states, parsed, by due time: what a tick and a message read instead of the bytes.
        self.pending = PendingIndex(store, self._due_at)

    def restart_progress_clock(self) -> None:
        """Start the no-progress clock of every input afresh (after assignment or recovery); the table may have
        been restored or dropped too, so the pending index is rebuilt from it."""
        self._progress_since = self.clock()
        self._progress.clear()
        self.pending.invalidate()

    def last_progress(self, topic: str, partition: int) -> float:
        """When ``topic[partition]`` last brought a message (or when the progress clock last restarted)."""
        return self._progress.get((topic, partition), self._progress_since)

    async def handle(
        self, topic: str, partition: int, offset: int, *, timestamp: float, key: bytes | None, value: bytes | None
    ) -> None:
        """One input message (``timestamp``: its Kafka timestamp, s): decode (invalid -> DLQ), join, emit."""
        try:
            await self._handle(topic, partition, offset, timestamp=timestamp, key=key, value=value)
        finally:
            key_tp = (topic, partition)
            if offset > self.processed.get(key_tp, -1):
                self.processed[key_tp] = offset
            self._progress[key_tp] = self.clock()

    async def _handle(
        self, topic: str, partition: int, offset: int, *, timestamp: float, key: bytes | None, value: bytes | None
    ) -> None:
        key_tp = (topic, partition)
        if timestamp > self._topic_time.get(key_tp, 0.0):
            self._topic_time[key_tp] = timestamp
            self._event_times.pop(partition, None)
        decoded = self._decode(topic, value)
        if isinstance(decoded, DecodeError):
            await self.dead_letter(topic, partition, offset, key=key, value=value, error=decoded)
            return
        event, raw = decoded
        state = self.pending.state(event.generation_id)
        if state is not None and state.partition != partition:
            log.warning(
                "generation %s seen on partitions %d and %d: keys disagree",
                event.generation_id,
                state.partition,
                partition,
            )
        result = absorb(state, event, partition, timestamp, raw)
        if result.note:
            log.info("%s (at %s[%d]@%d)", result.note, topic, partition, offset)
            if result.state.status == "pending":
                # A re-read part after a crash: its state may be complete while the reward never went out
                # (killed between the table write and the send). Decide again instead of leaving it to the
                # deadline.
                await self._act(result.state, self._event_time(partition))
            return
        await self._act(result.state, self._event_time(partition), changed=True)

    async def tick(self, partitions: set[int]) -> None:
        """Apply deadlines to pending generations of the partitions this worker owns."""
        await self.apply_tick(await self.plan_tick(partitions))

    async def plan_tick(self, partitions: set[int]) -> TickPlan:
        """What a tick will do; only reads (the inputs' ends too, which takes a broker round trip)."""
        wall = self.clock()
        expire = wall >= self._next_expiry
        if expire:
            self._next_expiry = wall + 60.0
            self.pending.invalidate()  # a safety net: whatever changed the table unseen, it counts within 60 s
        candidates = self.pending.due({p: max(wall, self._event_time(p)) for p in partitions})
        due: list[JoinState] = []
        now: dict[int, float] = {}
        late = {s.generation_id for s in candidates}
        self._drain_to = {g: targets for g, targets in self._drain_to.items() if g in late}
        if candidates:
            ends = await self.outputs.caught_up({s.partition for s in candidates}, dict(self.processed))
            idle = set(ends.settled)
            now = {
                p: max(self._event_time(p), self._partition_time(p, wall, idle))
                for p in {s.partition for s in candidates}
            }
            due = [s for s in candidates if now[s.partition] >= self._due_at(s) and self._drained(s, ends)]
            if len(due) < len(candidates):
                lagging = sorted({tp for tp in self._inputs(candidates) if tp not in idle})
                self.note_waiting(f"{len(candidates) - len(due)} generations past the deadline wait for {lagging}")
        touched = frozenset(partitions) if expire else frozenset(s.partition for s in due)
        return TickPlan(
            wall, frozenset(partitions), expire, tuple((s.generation_id, now[s.partition]) for s in due), touched
        )

    async def apply_tick(self, plan: TickPlan) -> None:
        """Carry out a plan: expire, then decide each due generation as the table has it now."""
        if plan.expire:
            await self._expire(set(plan.partitions), plan.wall)
        for generation_id, now in plan.due:
            state = self.pending.state(generation_id)  # re-read: a message may have decided it meanwhile
            if state is not None:
                await self._act_or_give_up(state, now)

    async def _act_or_give_up(self, state: JoinState, now: float) -> None:
        """A deadline decision; if deciding crashes (a bug), that generation ends without a reward, loudly,
        instead of crashing every tick (a restart loop for the whole processor)."""
        try:
            await self._act(state, now)
        except Exception as exc:
            log.exception("deciding the reward of %s failed", state.generation_id)
            self.counts["gave_up"] += 1
            self.on_outcome("gave_up", self.clock() - state.first_seen)
            await self._store(state.replace(status="gave_up"))
            await self._log(state, "error", f"no reward: deciding it crashed ({type(exc).__name__}: {exc})")

    def note_waiting(self, why: str) -> None:
        """Log why deadlines are not applied, at most every 10 s (a silent stall is the worst failure)."""
        wall = self.clock()
        if wall >= self._next_note:
            self._next_note = wall + 10.0
            log.info("deadlines on hold: %s", why)

    def _inputs(self, states: list[JoinState]) -> set[tuple[str, int]]:
        return {(topic, s.partition) for s in states for topic in self.topics.roles}

    def _inputs_of_missing(self, state: JoinState) -> set[tuple[str, int]]:
        """The inputs that would carry the parts ``state`` still awaits."""
        roles = {SIGNAL_TOPIC[part] for part in state.missing(self.policy)}
        return {(topic, state.partition) for topic, role in self.topics.roles.items() if role in roles}

    def _drained(self, state: JoinState, ends: InputEnds) -> bool:
        """Whether every input that would carry a part ``state`` misses is read as far as it reached when the
        state was first found late. Event time says the part is late, yet it may be committed on the input,
        unread (one transaction's first verdict moved the clock; the rest wait behind it). A fixed target, not
        "read to the end now": a busy input is rarely at its end at the moment a tick asks."""
        targets = self._drain_to.setdefault(state.generation_id, {})
        for tp in self._inputs_of_missing(state):
            if tp not in ends.read and self.processed.get(tp, -1) + 1 < targets.setdefault(tp, ends.ends.get(tp, 0)):
                return False
        return True

    def _due_at(self, state: JoinState) -> float:
        """When the state next needs a decision: the deadline, or (held back by a sandbox_error) the retry limit."""
        join = self.policy.join
        return state.first_seen + (join.sandbox_retry_s if state.withheld_reported else join.deadline_s)

    async def _expire(self, partitions: set[int], wall: float) -> None:
        """Forget finished generations after the retention (a part arriving later than that starts anew).

        A sweep over the table's keys as they were when it began, at most ``EXPIRY_CHUNK`` rows a run: the table
        holds a week of decided generations (millions at a few per second), ~5 us each to read, and a run over
        all of them would outlast the transaction it runs in (a fenced processor, a restart loop). A row is
        forgotten at most one sweep (rows / ``EXPIRY_CHUNK`` runs, a minute apart) after its retention ends."""
        if not self._sweep:
            self._sweep = [key for key, _row in self.store.items()]
        chunk = self._sweep[-EXPIRY_CHUNK:]
        del self._sweep[-EXPIRY_CHUNK:]
        cutoff = wall - self.retention_s
        for key in chunk:
            raw = self.store.get(key)
            if raw is None or row_pending(raw):
                continue
            state = load_state(key, raw)
            if state is None:
                continue
            if state.partition in partitions and state.first_seen < cutoff:
                await self.store.delete(state.partition, key)
                self.counts["expired"] += 1

    def _event_time(self, partition: int) -> float:
        """``_partition_time`` with no input idle: the slowest input's newest timestamp (per message: cached)."""
        known = self._event_times.get(partition)
        if known is None:
            times = self._topic_time
            known = min([times.get((topic, partition), 0.0) for topic in self.topics.roles], default=0.0)
            self._event_times[partition] = known
        return known

    def _partition_time(self, partition: int, wall: float, idle: set[tuple[str, int]]) -> float:
        """Event time of a partition: the slowest input's newest timestamp (results carry their generation's
        timestamp); an input that is consumed to its end AND has brought nothing new for the policy deadline
        (its producer is gone, e.g. the judge stopped) is at ``wall``.

        The minimum, because the inputs are read independently: one topic's newer events must not time out
        parts still waiting, unread, on another. The quiet period, because a role that lags (a busy verifier)
        often has nothing committed for a moment while it works: that is not a dead role.
        """
        quiet_since = wall - self.policy.join.deadline_s
        times = [
            wall
            if (topic, partition) in idle
            and self._progress.get((topic, partition), self._progress_since) <= quiet_since
            else self._topic_time.get((topic, partition), 0.0)
            for topic in self.topics.roles
        ]
        return min(times, default=0.0)

    def _decode(self, topic: str, value: bytes | None) -> tuple[PartEvent, bytes | None] | DecodeError:
        """The part, and its bytes if they are its faithful encoding (kept to be stored as it); or why the
        message is to be dead-lettered."""
        role = self.topics.roles.get(topic)
        try:
            if role is None:
                raise DecodeError("message", [("", f"topic {topic} is not an input of the reward processor")])
            if value is None:
                raise DecodeError(INPUT_MODELS[role].__name__, [("", "empty message (tombstone)")])
            event, verbatim = decode_verbatim(value, INPUT_MODELS[role])
            return event, value if verbatim else None
        except DecodeError as exc:
            return exc

    async def dead_letter(
        self,
        topic: str,
        partition: int,
        offset: int,
        *,
        key: bytes | None,
        value: bytes | None,
        error: BaseException,
        crash: BaseException | None = None,
    ) -> None:
        """Send one input message to the DLQ with ``error``; a handler ``crash`` is also logged with its traceback
        (here and in OpenSearch)."""
        letter = DeadLetter.capture(
            source_topic=topic,
            source_partition=partition,
            source_offset=offset,
            component=COMPONENT,
            error=error,
            key=key,
            value=value or b"",
        )
        await self.outputs.send_dlq(key, encode(letter))
        self.counts["dlq"] += 1
        self.on_dead_letter(type(error).__name__)
        if crash is None:
            log.warning("dead-lettered %s[%d]@%d: %s", topic, partition, offset, error)
            return
        log.error("dead-lettered %s[%d]@%d: %s", topic, partition, offset, error, exc_info=crash)
        record = LogRecord(
            level="error",
            component=COMPONENT,
            worker=self.worker,
            logger=log.name,
            message=fit(LogRecord, "message", f"dead-lettered ({type(error).__name__}): {error}"),
            topic=fit(LogRecord, "topic", topic),
            partition=partition,
            offset=offset,
            exc_text=fit(LogRecord, "exc_text", "".join(traceback.format_exception(crash)), keep="tail"),
        )
        await self.outputs.send_log(record.key(), encode(record))

    async def _act(self, state: JoinState, now: float, *, changed: bool = False) -> None:
        """Decide and do it; ``changed``: the state differs from the table's and must be stored unless superseded.

        A state that is emitted at once is never stored complete: its last part's input offset is committed
        only after the ``emitted`` marker, so a crash before that re-reads the part and decides again (the
        Faust engine's ``faust.emit_then_mark`` catches a reward that did go out).
        """
        decision = decide(state, now, self.policy)
        if isinstance(decision, Emit):
            await self.outputs.send_reward(state, decision.reward)
            self.pending.forget(state.generation_id)
            self.counts["rewards"] += 1
            self.on_outcome("partial" if decision.reward.missing else "complete", self.clock() - state.first_seen)
        elif isinstance(decision, Wait):
            if changed:  # _store, inline: most messages end here
                await self.store.put(state.partition, state.generation_id, state)
                self.pending.stored(state, state)
        elif isinstance(decision, Withhold):
            self.counts["withheld"] += 1
            await self._store(state.replace(withheld_reported=True))
            await self._log(state, "warning", "reward withheld: " + "; ".join(decision.reasons))
        elif isinstance(decision, GiveUp):
            self.counts["gave_up"] += 1
            self.on_outcome("gave_up", self.clock() - state.first_seen)
            await self.outputs.send_reward(state, decision.reward)  # valid false: the trainer's, not training data
            self.pending.forget(state.generation_id)
            await self._log(state, "error", "invalid reward: " + "; ".join(decision.reasons))

    async def _store(self, state: JoinState) -> None:
        """Write ``state`` to the table (as itself: a store serialises it when it writes it out), and to the
        pending index."""
        await self.store.put(state.partition, state.generation_id, state)
        self.pending.stored(state, state)

    async def _log(self, state: JoinState, level: str, message: str) -> None:
        record = LogRecord(
            level=level,  # type: ignore[arg-type]
            component=COMPONENT,
            worker=self.worker,
            logger=log.name,
            message=fit(LogRecord, "message", message),
            **generation_ids(state),
        )
        log.log(logging.ERROR if level == "error" else logging.WARNING, "%s: %s", state.generation_id, message)
        await self.outputs.send_log(record.key(), encode(record))
