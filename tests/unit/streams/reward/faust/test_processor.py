"""The processor core with an in-memory table and outputs: DLQ, deadlines in event time, and (through the
Faust engine's emit-then-mark layer) crash de-duplication."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence

import pytest

from schemas.codec import decode, encode
from schemas.events import DeadLetter, LogRecord, RewardEvent
from streams.reward.decided import DecidedReward
from streams.reward.faust.emit_then_mark import EmitThenMark, watermark_key
from streams.reward.faust.join import FaustJoin
from streams.reward.join import JoinState, PartEvent, Row, emitted, row_bytes
from streams.reward.policy import Policy, load_policy
from streams.reward.processor import InputEnds, RewardProcessor, Topics
from tests.unit.reward_events import execution, judgement, verdict

INPUTS = {"x.executions": "executions", "x.verdicts": "verdicts", "x.judgements": "judgements"}
TOPIC = {"executions": "x.executions", "verdicts": "x.verdicts", "judgements": "x.judgements"}


class SimulatedKillError(Exception):
    """Stands in for SIGKILL at a chosen point."""


class Store:
    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.changelog: list[tuple[int, str]] = []

    def get(self, key: str) -> bytes | None:
        return self.data.get(key)

    async def put(self, partition: int, key: str, value: Row) -> None:
        self.data[key] = row_bytes(value)
        self.changelog.append((partition, key))

    async def delete(self, partition: int, key: str) -> None:
        self.data.pop(key, None)
        self.changelog.append((partition, key))

    def items(self) -> Iterable[tuple[str, bytes]]:
        return list(self.data.items())


class Outputs:
    """The Faust engine's acknowledged outputs (``emit_then_mark.AckedOutputs``)."""

    def __init__(self, rewards: dict[int, list[bytes]] | None = None) -> None:
        self.rewards: dict[int, list[bytes]] = rewards if rewards is not None else {}
        self.dlq: list[bytes] = []
        self.logs: list[bytes] = []
        self.crash_after_reward = False
        self.crash_before_reward = False
        #: Inputs read to the end whose writer is gone (``InputEnds.settled``).
        self.idle: set[tuple[str, int]] = set()
        #: Inputs with committed records not yet processed (every other input is read to its end).
        self.unread: set[tuple[str, int]] = set()
        #: How many records wait on each of ``unread`` beyond what was processed.
        self.waiting = 1

    async def send_reward(self, partition: int, key: bytes, value: bytes) -> int:
        if self.crash_before_reward:
            raise SimulatedKillError
        log = self.rewards.setdefault(partition, [])
        log.append(value)
        if self.crash_after_reward:
            raise SimulatedKillError
        return len(log) - 1

    async def send_dlq(self, key: bytes | None, value: bytes) -> None:
        self.dlq.append(value)

    async def send_log(self, key: bytes, value: bytes) -> None:
        self.logs.append(value)

    async def read_rewards(self, partition: int, start: int) -> tuple[list[tuple[int, bytes]], int]:
        log = self.rewards.get(partition, [])
        return [(i, v) for i, v in enumerate(log) if i >= start], len(log)

    async def caught_up(self, partitions: set[int], processed: Mapping[tuple[str, int], int]) -> InputEnds:
        read = frozenset((t, p) for t in INPUTS for p in partitions) - self.unread
        ends = {tp: processed.get(tp, -1) + 1 + self.waiting for tp in self.unread}
        return InputEnds(read=read, settled=read & self.idle, ends=ends)


class TransactionalOutputs:
    """The transactional engine's contract: a reward and its marker are written together, no tail to scan."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.rewards: dict[int, list[bytes]] = {}

    async def send_reward(self, state: JoinState, reward: DecidedReward) -> None:
        self.rewards.setdefault(state.partition, []).append(reward.encode())
        await self.store.put(state.partition, state.generation_id, emitted(state, reward.event_id, None).dumps())

    async def send_dlq(self, key: bytes | None, value: bytes) -> None:
        raise AssertionError("no dead letter expected")

    async def send_log(self, key: bytes, value: bytes) -> None:
        raise AssertionError("no log record expected")

    async def caught_up(self, partitions: set[int], processed: Mapping[tuple[str, int], int]) -> InputEnds:
        return InputEnds(read=frozenset(), settled=frozenset(), ends={})


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


T0 = 1_700_000_000.0


@pytest.fixture
def policy() -> Policy:
    return load_policy()


def make(
    policy: Policy,
    store: Store,
    outputs: Outputs,
    clock: Clock | None = None,
    *,
    watermark_every: int = 1,
    retention_s: float = 7 * 86_400.0,
) -> FaustJoin:
    """The processor as the Faust engine builds and drives it: over the emit-then-mark layer."""
    clock = clock or Clock(T0)
    marks = EmitThenMark(store, outputs, clock=clock, watermark_every=watermark_every)
    return FaustJoin(RewardProcessor(policy, Topics(INPUTS), marks, marks, clock=clock, retention_s=retention_s), marks)


def marks_of(proc: FaustJoin) -> EmitThenMark:
    return proc.marks


def feed(
    proc: RewardProcessor | FaustJoin, events: Sequence[PartEvent], partition: int = 0, ts: float = T0, start: int = 0
) -> None:
    async def go() -> None:
        for i, event in enumerate(events):
            role = {"ExecutionResult": "executions", "HiddenVerdict": "verdicts", "JudgeScore": "judgements"}
            topic = TOPIC[role[type(event).__name__]]
            await proc.handle(topic, partition, start + i, timestamp=ts, key=b"k", value=encode(event))

    asyncio.run(go())


def rewards(outputs: Outputs | TransactionalOutputs) -> list[RewardEvent]:
    return [decode(v, RewardEvent) for log in outputs.rewards.values() for v in log]


def test_complete_generation_emits_once_and_marks_it(policy: Policy) -> None:
    store, outputs = Store(), Outputs()
    proc = make(policy, store, outputs)
    feed(proc, [execution("g"), verdict("g"), judgement("g"), judgement("g")])
    assert [r.generation_id for r in rewards(outputs)] == ["g"]
    assert store.data[watermark_key(0)] == b"1"
    assert b'"status":"emitted"' in store.data["g"]


def test_each_acknowledged_reward_reaches_the_metrics_hook_once(policy: Policy) -> None:
    store, outputs = Store(), Outputs()
    proc = make(policy, store, outputs)
    seen: list[DecidedReward] = []
    marks_of(proc).on_reward = seen.append
    feed(proc, [execution("g"), verdict("g", canary=True), judgement("g"), judgement("g")])
    assert [(r.generation_id, r.canary, r.valid) for r in seen] == [("g", True, False)]


def test_with_transactional_outputs_the_core_emits_once_and_stores_only_the_generation(policy: Policy) -> None:
    store = Store()
    outputs = TransactionalOutputs(store)
    proc = RewardProcessor(policy, Topics(INPUTS), store, outputs, clock=Clock(T0))
    feed(proc, [execution("g"), verdict("g"), judgement("g"), judgement("g")])
    assert [r.generation_id for r in rewards(outputs)] == ["g"]
    assert b'"status":"emitted"' in store.data["g"]
    assert list(store.data) == ["g"]


def test_invalid_messages_go_to_the_dlq_with_the_reason(policy: Policy) -> None:
    store, outputs = Store(), Outputs()
    proc = make(policy, store, outputs)

    async def go() -> None:
        await proc.handle("x.verdicts", 1, 5, timestamp=T0, key=b"key", value=b'{"generation_id": 3}')
        await proc.handle("x.judgements", 1, 6, timestamp=T0, key=b"key", value=None)
        await proc.handle("x.other", 1, 7, timestamp=T0, key=None, value=b"{}")

    asyncio.run(go())
    letters = [decode(v, DeadLetter) for v in outputs.dlq]
    assert [(x.source_topic, x.source_offset) for x in letters] == [
        ("x.verdicts", 5),
        ("x.judgements", 6),
        ("x.other", 7),
    ]
    assert "generation_id" in letters[0].error
    assert "tombstone" in letters[1].error
    assert "not an input" in letters[2].error
    assert letters[0].original_key() == b"key"
    assert proc.processor.processed[("x.verdicts", 1)] == 5


def test_crash_between_reward_and_marker_is_deduplicated_on_restart(policy: Policy) -> None:
    store, outputs = Store(), Outputs()
    first = make(policy, store, outputs)
    feed(first, [execution("a"), verdict("a"), judgement("a")])
    outputs.crash_after_reward = True
    with pytest.raises(SimulatedKillError):
        feed(first, [execution("b"), verdict("b"), judgement("b")])
    assert b'"status":"pending"' in store.data["b"]  # the marker was lost with the crash
    outputs.crash_after_reward = False
    second = make(policy, store, outputs)  # restart: same table (changelog), same rewards topic
    feed(second, [judgement("b")])  # the uncommitted input is delivered again
    assert sorted(r.generation_id for r in rewards(outputs)) == ["a", "b"]
    assert marks_of(second).recovered == 1
    assert store.data[watermark_key(0)] == b"2"


def test_crash_between_table_write_and_reward_emits_when_the_input_is_read_again(policy: Policy) -> None:
    """The complete state reached the changelog but the reward never went out: the re-read part (a duplicate
    for the join) must still trigger the decision, not leave the generation to the deadline."""
    store, outputs = Store(), Outputs()
    first = make(policy, store, outputs)
    outputs.crash_before_reward = True
    with pytest.raises(SimulatedKillError):
        feed(first, [execution("b"), verdict("b"), judgement("b")])
    assert b'"status":"pending"' in store.data["b"]
    assert rewards(outputs) == []
    outputs.crash_before_reward = False
    second = make(policy, store, outputs)
    feed(second, [judgement("b")], start=2)  # the uncommitted input again: nothing new for the join
    assert [r.generation_id for r in rewards(outputs)] == ["b"]
    assert b'"status":"emitted"' in store.data["b"]


def test_sparse_watermarks_still_deduplicate_and_a_complete_state_is_never_stored(policy: Policy) -> None:
    """Watermarks every N rewards only lengthen the tail scan; an emitted-at-once state skips the table."""
    store, outputs = Store(), Outputs()
    first = make(policy, store, outputs, watermark_every=3)
    feed(first, [e for g in "abcd" for e in (execution(g), verdict(g), judgement(g))])
    assert store.data[watermark_key(0)] == b"3"  # after the third reward, not after the fourth
    writes = [k for _, k in store.changelog if k == "a"]
    assert writes == ["a", "a", "a"]  # execution, verdict, then the emitted marker: never the complete state
    outputs.crash_after_reward = True
    with pytest.raises(SimulatedKillError):
        feed(first, [execution("e"), verdict("e"), judgement("e")], start=12)
    outputs.crash_after_reward = False
    second = make(policy, store, outputs, watermark_every=3)
    feed(second, [judgement("e")], start=14)
    assert sorted(r.generation_id for r in rewards(outputs)) == ["a", "b", "c", "d", "e"]
    assert marks_of(second).recovered == 1  # d and e above the watermark were scanned; e's marker rebuilt


def test_deadline_in_event_time_not_while_inputs_are_unread(policy: Policy) -> None:
    store, outputs, clock = Store(), Outputs(), Clock(T0)
    proc = make(policy, store, outputs, clock)
    feed(proc, [execution("g"), verdict("g")], ts=T0)
    clock.now = T0 + 3600  # much later, but the judgements input is not known to be read to its end
    asyncio.run(proc.tick({0}))
    assert rewards(outputs) == []
    outputs.idle = {(t, 0) for t in INPUTS}  # every input consumed: the wall clock counts
    asyncio.run(proc.tick({0}))
    [reward] = rewards(outputs)
    assert reward.missing == ["judgement"]


def test_deadline_fires_in_stream_when_every_input_moved_past_it(policy: Policy) -> None:
    store, outputs = Store(), Outputs()
    proc = make(policy, store, outputs)
    feed(proc, [execution("g"), verdict("g")], ts=T0)
    later = T0 + policy.join.deadline_s + 1
    feed(proc, [execution("h"), verdict("h"), judgement("h")], ts=later, start=10)
    asyncio.run(proc.tick({0}))
    by_gen = {r.generation_id: r for r in rewards(outputs)}
    assert by_gen["g"].missing == ["judgement"]
    assert by_gen["h"].missing == []


def test_a_missing_part_committed_but_not_yet_read_is_not_given_up(policy: Policy) -> None:
    """A writer's transaction holds verdicts stamped after the deadline; its first one moved the verdicts
    clock past it while the rest still wait on the input (the Faust agent handles one message at a time,
    and can stall after a restart): the generations they complete are not rewarded without them."""
    store, outputs = Store(), Outputs()
    proc = make(policy, store, outputs)
    feed(proc, [execution("g"), judgement("g")], ts=T0)
    later = T0 + policy.join.deadline_s + 1
    feed(proc, [execution("h"), judgement("h"), verdict("h")], ts=later, start=10)  # every clock past g's deadline
    outputs.unread = {("x.verdicts", 0)}  # g's verdict is committed behind h's, not yet delivered
    asyncio.run(proc.tick({0}))
    assert [r.generation_id for r in rewards(outputs)] == ["h"]
    feed(proc, [verdict("g")], ts=later, start=13)
    outputs.unread = set()
    by_gen = {r.generation_id: r for r in rewards(outputs)}
    assert (by_gen["g"].missing, by_gen["g"].reward) == ([], 1.0)


def test_a_late_part_on_a_busy_input_is_given_up_once_read_as_far_as_it_reached(policy: Policy) -> None:
    """The wait for unread records is for those committed when the part was found late, not for the input's
    end: a busy verifier's topic always has a record more waiting, and a verdict that never comes (its
    generation dead-lettered) must still end in a reward at the deadline."""
    store, outputs = Store(), Outputs()
    proc = make(policy, store, outputs)
    feed(proc, [execution("g"), judgement("g")], ts=T0)
    later = T0 + policy.join.deadline_s + 1
    feed(proc, [execution("h"), judgement("h"), verdict("h")], ts=later, start=10)
    outputs.unread = {("x.verdicts", 0)}  # one record committed behind h's verdict (offset 13), and always one more
    asyncio.run(proc.tick({0}))
    assert [r.generation_id for r in rewards(outputs)] == ["h"]
    feed(proc, [verdict("other")], ts=later, start=13)  # what was waiting was someone else's verdict
    asyncio.run(proc.tick({0}))
    by_gen = {r.generation_id: r for r in rewards(outputs)}
    assert (by_gen["g"].missing, by_gen["g"].reward) == (["verdict"], 0.0)


def test_an_input_read_to_its_end_counts_as_now_only_after_a_quiet_deadline(policy: Policy) -> None:
    """A lagging role (the verifier busy on older generations) often has nothing new for a moment: that must
    not time out the generations it has not reached. Only an input quiet for the deadline is "now"."""
    store, outputs, clock = Store(), Outputs(), Clock(T0 + 3600)
    outputs.idle = {(t, 0) for t in INPUTS}
    proc = make(policy, store, outputs, clock)
    feed(proc, [execution("g"), judgement("g")], ts=T0)  # published an hour ago; its verdict is still coming
    clock.now += policy.join.deadline_s - 1
    asyncio.run(proc.tick({0}))
    assert rewards(outputs) == []
    clock.now += 1
    asyncio.run(proc.tick({0}))
    [reward] = rewards(outputs)
    assert reward.missing == ["verdict"]


def test_ticks_only_touch_owned_partitions(policy: Policy) -> None:
    store, outputs = Store(), Outputs()
    outputs.idle = {(t, p) for t in INPUTS for p in range(3)}
    clock = Clock(T0 + 3600)
    proc = make(policy, store, outputs, clock)
    feed(proc, [execution("g"), verdict("g")], partition=2)
    clock.now += policy.join.deadline_s  # the inputs have been quiet for the deadline: their producers are gone
    asyncio.run(proc.tick({0, 1}))
    assert rewards(outputs) == []
    asyncio.run(proc.tick({2}))
    assert len(rewards(outputs)) == 1


def test_sandbox_error_is_reported_not_rewarded(policy: Policy) -> None:
    store, outputs = Store(), Outputs()
    proc = make(policy, store, outputs)
    feed(proc, [execution("g"), verdict("g", status="sandbox_error"), judgement("g")])
    assert rewards(outputs) == []
    [record] = [decode(v, LogRecord) for v in outputs.logs]
    assert record.level == "warning"
    assert "sandbox_error" in record.message
    assert record.generation_id == "g"
    feed(proc, [verdict("g", attempt=2)], start=10)
    assert [r.reward for r in rewards(outputs)] == [1.0]


def test_withheld_generations_wait_for_the_retry_limit_not_the_deadline(policy: Policy) -> None:
    store, outputs, clock = Store(), Outputs(), Clock(T0)
    outputs.idle = {(t, 0) for t in INPUTS}
    proc = make(policy, store, outputs, clock)
    feed(proc, [execution("g"), verdict("g", status="sandbox_error")])
    clock.now = T0 + policy.join.deadline_s + 1
    asyncio.run(proc.tick({0}))
    assert len(outputs.logs) == 1  # reported once
    assert rewards(outputs) == []
    clock.now = T0 + policy.join.sandbox_retry_s + 1
    asyncio.run(proc.tick({0}))
    [given_up] = rewards(outputs)  # the trainer's one reward, marked: never training data
    assert (given_up.reward, given_up.valid, given_up.invalid_reason) == (0.0, False, "sandbox_error")
    assert proc.processor.counts["gave_up"] == 1
    assert decode(outputs.logs[-1], LogRecord).level == "error"
    assert b'"status":"emitted"' in store.data["g"]
    asyncio.run(proc.tick({0}))
    assert len(rewards(outputs)) == 1  # once


def test_finished_generations_expire_after_the_retention(policy: Policy) -> None:
    store, outputs, clock = Store(), Outputs(), Clock(T0)
    proc = make(policy, store, outputs, clock, retention_s=100.0)
    feed(proc, [execution("g"), verdict("g"), judgement("g"), execution("p")])
    clock.now = T0 + 101
    asyncio.run(proc.tick({0}))
    assert "g" not in store.data
    assert "p" in store.data  # still pending: never expired
    assert watermark_key(0) in store.data
    assert proc.processor.counts["expired"] == 1


def test_stalled_inputs_are_those_with_backlog_and_no_progress(policy: Policy) -> None:
    clock = Clock(T0)
    proc = make(policy, Store(), Outputs(), clock)
    feed(proc, [execution("g")], partition=1)
    clock.now = T0 + 30
    backlog = [("x.executions", 1), ("x.verdicts", 1)]
    assert proc.stalled(backlog, stall_s=60) == []
    assert proc.stalled(backlog, stall_s=20) == [("x.executions", 1), ("x.verdicts", 1)]
    feed(proc, [verdict("g")], partition=1)
    assert proc.stalled(backlog, stall_s=20) == [("x.executions", 1)]
    proc.processor.restart_progress_clock()  # a rebalance restarts every clock
    assert proc.stalled(backlog, stall_s=20) == []


def test_the_dead_letter_of_the_reward_engine_names_the_handler_crash() -> None:
    """(pure) the processor's dead letter for a crash: its error and a log record with the traceback."""
    sent: list[tuple[str, bytes]] = []

    class Outs:
        async def send_dlq(self, key: bytes | None, value: bytes) -> None:
            sent.append(("dlq", value))

        async def send_log(self, key: bytes, value: bytes) -> None:
            sent.append(("log", value))

    processor = RewardProcessor(load_policy(None), Topics({}), None, Outs())  # type: ignore[arg-type]
    try:
        raise ZeroDivisionError("boom")
    except ZeroDivisionError as crash:
        asyncio.run(processor.dead_letter("t", 1, 5, key=b"k", value=b"v", error=ValueError("handler crashed"),
                                          crash=crash))  # fmt: skip
    assert [kind for kind, _ in sent] == ["dlq", "log"]
    letter, record = decode(sent[0][1], DeadLetter), decode(sent[1][1], LogRecord)
    assert (letter.source_offset, letter.error) == (5, "handler crashed")
    assert record.exc_text is not None
    assert "ZeroDivisionError: boom" in record.exc_text


def test_every_decision_reports_its_outcome_and_how_long_it_took(policy: Policy) -> None:
    """What the metrics count: a complete reward, one emitted at the deadline with a part missing (late)."""
    store, outputs, clock = Store(), Outputs(), Clock(T0 + 2)
    proc = make(policy, store, outputs, clock)
    seen: list[tuple[str, float]] = []
    proc.processor.on_outcome = lambda outcome, seconds: seen.append((outcome, seconds))
    feed(proc, [execution("h"), verdict("h"), judgement("h")], ts=T0)
    feed(proc, [execution("g"), verdict("g")], ts=T0)
    clock.now = T0 + policy.join.deadline_s + 5
    outputs.idle = {(t, 0) for t in INPUTS}
    asyncio.run(proc.tick({0}))
    assert seen == [("complete", 2.0), ("partial", policy.join.deadline_s + 5)]
