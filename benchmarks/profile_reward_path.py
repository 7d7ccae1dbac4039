"""CPU per reward of the reward processor's own path, in process, without a broker: decode, absorb, decide,
build and encode the reward, the table's changelog records, batch by batch as the Kafka engine runs them.

Why: ``bench_capacity`` times the whole ``rewardstream reward run`` process against Kafka, whose wall clock moves
with whatever else shares the machine; this times the processor's code on the same events (the benchmark's:
each generation's execution, verdict and judgement, made by the real handlers with the no-op grader), through
the engine's own table, savepoint and outputs, into a transaction that only collects what it is given. Its
figure leaves out librdkafka (its produce calls and threads), the consumer and the commits: a floor of the real one.

    python -m benchmarks.profile_reward_path [--rewards 20000] [--batch 2000] [--profile]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import pstats
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.capacity_ceilings import results_of
from benchmarks.capacity_kafka import call_task
from bus.metrics import WorkerMetrics
from schemas.settings import Settings
from streams.reward.integrity import IntegrityMetrics
from streams.reward.kafka_engine import EngineOptions, _Outputs, _Savepoint, _Table, tune_gc
from streams.reward.liveness import WriterLiveness
from streams.reward.policy import load_policy
from streams.reward.processor import RewardProcessor, Topics
from workers.tasks.registry import TaskRegistry

ROLES = ("executions", "verdicts", "judgements")


class _Collecting:
    """A Transaction that keeps what is produced (the engine's ``_Savepoint`` and ``_Table`` write into it): a copy,
    as librdkafka keeps one, so the processor's own bytes live only as long as they do in the engine."""

    def __init__(self) -> None:
        self.produced: list[tuple[str, bytes | None, bytes | None, int]] = []

    def produce(self, topic: str, key: bytes | None, value: bytes | None, *, partition: int = -1) -> None:
        self.produced.append((topic, key, None if value is None else memoryview(value).tobytes(), partition))


def messages(n: int, partitions: int) -> list[tuple[str, int, bytes, bytes]]:
    """(topic, partition, key, value) of ``n`` generations' three results, each generation's together."""
    with tempfile.TemporaryDirectory() as tmp:
        registry = TaskRegistry(Path(tmp))
        registry.store([call_task()])
        inputs = results_of(call_task(), registry, n, partitions)
    out = []
    for i in range(n):
        for role in ROLES:
            key, value = inputs[role][i]
            out.append((role, i % partitions, key, value))
    return out


def run(msgs: list[tuple[str, int, bytes, bytes]], batch: int) -> tuple[float, _Collecting]:
    """Handle ``msgs`` in batches of ``batch`` as the engine does; the process CPU seconds it took."""
    txn = _Collecting()
    stage = _Savepoint(txn)  # type: ignore[arg-type]
    table = _Table(stage, txn, "changelog")  # type: ignore[arg-type]
    names = {"rewards": "rewards", "dlq": "dlq", "logs": "logs"}
    outputs = _Outputs(Settings(), EngineOptions(), stage, table, names, liveness=WriterLiveness.for_settings(
        Settings(), 30.0))  # fmt: skip
    processor = RewardProcessor(load_policy(), Topics({r: r for r in ROLES}), table, outputs)
    metrics = WorkerMetrics("rewards")  # counted as the engine counts
    integrity = IntegrityMetrics(metrics.registry)
    processor.on_dead_letter = metrics.dead_letter
    processor.on_outcome = metrics.reward
    loop = asyncio.new_event_loop()

    async def one_batch(part: list[tuple[str, int, bytes, bytes]], offset: int) -> None:
        for j, (topic, partition, key, value) in enumerate(part):
            await processor.handle(topic, partition, offset + j, timestamp=1_700_000_000.0, key=key, value=value)
            stage.release()

    started = time.process_time()
    for start in range(0, len(msgs), batch):
        loop.run_until_complete(one_batch(msgs[start : start + batch], start))
        stage.release()
        table.flush()
        for reward in stage.released:  # committed
            integrity.observe(reward)
        stage.released.clear()
    spent = time.process_time() - started
    loop.close()
    if processor.counts["rewards"] != len(msgs) // len(ROLES):
        raise RuntimeError(f"expected {len(msgs) // len(ROLES)} rewards, got {processor.counts}")
    return spent, txn


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--rewards", type=int, default=20_000)
    p.add_argument("--batch", type=int, default=2000, help="messages a transaction takes (EngineOptions.batch_max)")
    p.add_argument("--rounds", type=int, default=3, help="runs; the median is printed")
    p.add_argument("--profile", action="store_true", help="one more run under cProfile, its top functions to stderr")
    args = p.parse_args(argv)
    msgs = messages(args.rewards, 8)
    tune_gc()  # as run_engine does
    spent = sorted(run(msgs, args.batch)[0] for _ in range(args.rounds))
    median = spent[len(spent) // 2]
    result: dict[str, Any] = {"rewards": args.rewards, "cpu_us_per_reward": round(median / args.rewards * 1e6, 1),
                              "runs_us": [round(s / args.rewards * 1e6, 1) for s in spent]}  # fmt: skip
    print(json.dumps(result))
    if args.profile:
        prof = cProfile.Profile()
        prof.runcall(run, msgs, args.batch)
        pstats.Stats(prof, stream=sys.stderr).sort_stats("tottime").print_stats(35)
    return 0


if __name__ == "__main__":
    sys.exit(main())
