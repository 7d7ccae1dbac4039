"""What the reward processor keeps per generation, and its bound (docs/operations.md, "Memory that levels off"):
once a generation is decided, only its slim ``emitted`` row stays in the join table (so a late part is known
late), until the retention ends; every other per-generation structure is empty once its deadline passed.
Measured with tracemalloc in process, through the Kafka engine's own table, savepoint and outputs. The expiry
reads a chunk of the table a run, so a week's table never makes one run outlast its transaction."""

from __future__ import annotations

import asyncio
import gc
import tracemalloc
import uuid
from collections.abc import Callable
from typing import cast

import orjson
import pydantic_core
import pytest

from bus.transaction import Transaction
from schemas.events import ExecutionResult, HiddenVerdict, JudgeScore
from schemas.settings import Settings
from streams.reward import processor as processor_module
from streams.reward.join import row_pending
from streams.reward.kafka_engine import EngineOptions, _Outputs, _Savepoint, _Table
from streams.reward.liveness import WriterLiveness
from streams.reward.policy import load_policy
from streams.reward.processor import RewardProcessor, Topics
from tests.unit.reward_events import execution, judgement, verdict
from tests.unit.streams.reward.test_kafka_engine import Txn

T0 = 1_700_000_000.0
RETENTION_S = 7 * 86_400.0
ROLES: dict[str, Callable[[str], ExecutionResult | HiddenVerdict | JudgeScore]] = {
    "executions": execution, "verdicts": verdict, "judgements": judgement,
}  # fmt: skip
N = 1_000


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


class Rig:
    """A processor on the Kafka engine's table, savepoint and outputs; a transaction that only collects."""

    def __init__(self) -> None:
        self.clock = Clock()
        self.txn = Txn()
        self.stage = _Savepoint(cast(Transaction, self.txn))
        self.table = _Table(self.stage, cast(Transaction, self.txn), "changelog")
        names = {"rewards": "rewards", "dlq": "dlq", "logs": "logs"}
        outputs = _Outputs(Settings(), EngineOptions(), self.stage, self.table, names,
                           liveness=WriterLiveness.for_settings(Settings(), 30.0))  # fmt: skip
        self.policy = load_policy()
        self.processor = RewardProcessor(self.policy, Topics({r: r for r in ROLES}), self.table, outputs,
                                         clock=self.clock, retention_s=RETENTION_S)  # fmt: skip
        self.loop = asyncio.new_event_loop()
        self.t0 = T0

    def batch(self, part: list[tuple[str, int, bytes]], tick: bool) -> None:
        """One transaction's worth, as the engine runs it."""

        async def work() -> None:
            for offset, (topic, partition, value) in enumerate(part):
                await self.processor.handle(topic, partition, offset, timestamp=self.t0, key=None, value=value)
                self.stage.release()
            if tick:
                await self.processor.tick({0, 1, 2, 3})

        self.loop.run_until_complete(work())
        self.stage.release()
        self.table.flush()
        self.stage.released.clear()
        self.txn.produced.clear()  # sent: the producer's now, not the processor's

    def generations(self, first: int) -> None:
        """``N`` generations' three parts, published at the clock's time, then a tick past their deadline."""
        self.t0 = self.clock.now
        messages = [(role, i % 4, make(f"gen-{i:06}").model_dump_json().encode()) for i in range(first, first + N)
                    for role, make in ROLES.items()]  # fmt: skip
        for start in range(0, len(messages), 600):
            self.batch(messages[start : start + 600], tick=False)
        self.clock.now = self.t0 + self.policy.join.deadline_s + 1
        self.batch([], tick=True)

    def expire(self) -> None:
        """A tick once the retention of everything decided so far ended."""
        self.clock.now += RETENTION_S + 120
        self.batch([], tick=True)


def traced() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


def test_a_decided_generation_keeps_only_its_slim_row_until_the_retention() -> None:
    rig = Rig()
    processor, pending, stage = rig.processor, rig.processor.pending, rig.stage
    rig.generations(0)  # warm-up: imports, caches
    rig.expire()
    strings = orjson.dumps([uuid.uuid4().hex for _ in range(100_000)])
    tracemalloc.start()
    try:
        # pydantic-core keeps the short strings it decodes in a cache of 16,384 (bounded, ~1.2 MB): filled here
        # with strings traced from now on, so the ids the generations put in it replace traced ones
        pydantic_core.from_json(strings)
        before = traced()
        rig.generations(N)
        kept = traced() - before
        rows = dict(rig.table.items())
        assert processor.counts["rewards"] == 2 * N
        assert len(rows) == N
        assert not any(row_pending(r) for r in rows.values())
        assert all(isinstance(r, bytes) and len(r) < 400 for r in rows.values())
        assert (pending._parsed, pending._queued, processor._drain_to) == ({}, {}, {})
        assert all(not heap for heap in pending._heaps.values())
        assert (stage.records, stage.prior, stage.rewards) == ([], {}, [])
        del rows
        assert 300 < kept / N < 1000, f"{kept / N:.0f} bytes kept per decided generation"

        rig.expire()  # the retention ended: every finished row is deleted
        once = traced()
        assert rig.table.items() == []
        assert processor.counts["expired"] == 2 * N
        rig.generations(2 * N)
        rig.expire()
        twice = traced()
        # the second thousand left what the first did: nothing accumulates per generation
        assert (twice - once) / N < 16, f"{(twice - once) / N:.0f} bytes per generation left after the retention"
        print(f"kept {kept / N:.0f} B/generation; after expiry {(once - before) / N:.0f}, {(twice - before) / N:.0f}")
    finally:
        tracemalloc.stop()
        rig.loop.close()


def test_expiry_reads_a_chunk_of_the_table_a_run_and_the_sweep_gets_through_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(processor_module, "EXPIRY_CHUNK", 300)
    rig = Rig()
    rig.generations(0)
    rig.expire()  # the retention of all 1,000 ended: one run forgets at most a chunk of them
    expired = [rig.processor.counts["expired"]]
    while list(rig.table.items()) and len(expired) < 10:
        rig.clock.now += 61  # the next run
        rig.batch([], tick=True)
        expired.append(rig.processor.counts["expired"])
    # (the first sweep began at the deadline's tick: its first chunk then had nothing old enough)
    assert all(b - a <= 300 for a, b in zip([0, *expired], expired, strict=False))
    assert expired[-1] == 1000
    assert len(expired) <= 5
    rig.loop.close()
