"""The Faust glue: one agent over the co-partitioned input topics, one table, a deadline timer.

Why so thin: faust is untyped and its exactly_once mode has open bugs, so everything that decides anything
lives in ``processor``/``join``/``policy`` (typed, unit-tested); this module only adapts Faust's table and
topics to the processor's ports. Nothing happens at import time; ``build_app`` makes a fresh app.

The app runs with at_least_once (input offsets are committed only after the producer flushed the table
changelog and the rewards) and a memory store recovered from the changelog topic on start.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import signal
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from schemas.settings import Settings
from schemas.topics import catalog, topic_for
from streams.reward.policy import Policy
from streams.reward.processor import RewardProcessor, Topics
from streams.reward.rewards_log import idle_partitions, read_partition

TABLE_NAME = "reward-join"
log = logging.getLogger("rewardstream.rewards")


@dataclass(frozen=True, slots=True)
class AppOptions:
    """Per-process knobs of the reward app (the rest comes from Settings)."""

    app_id: str = "rewardstream-rewards"
    data_dir: Path = Path("rewards-data")
    tick_s: float = 0.5
    session_timeout_s: float = 10.0
    commit_interval_s: float = 1.0
    #: Fault injection for crash tests: SIGKILL this process right after the Nth reward is acknowledged and
    #: before it is marked emitted, the worst moment for duplicates. None in production.
    kill_after_rewards: int | None = None


class _TableStore:
    """The processor's StateStore over a Faust table with raw bytes keys and values."""

    def __init__(self, table: Any) -> None:
        self._table = table

    def get(self, key: str) -> bytes | None:
        value = self._table.data.get(key.encode())
        return value if isinstance(value, bytes) else None

    def put(self, partition: int, key: str, value: bytes) -> None:
        raw = key.encode()
        self._table.data[raw] = value
        self._table.send_changelog(partition, raw, value)  # explicit partition: also valid outside an event

    def items(self) -> Iterable[tuple[str, bytes]]:
        for key, value in list(self._table.data.items()):
            if isinstance(key, bytes) and isinstance(value, bytes):
                yield key.decode(), value


class _FaustOutputs:
    """The processor's Outputs over Faust topics (and a plain consumer for the rewards tail)."""

    def __init__(
        self, settings: Settings, options: AppOptions, *, inputs: list[str], rewards: Any, dlq: Any, logs: Any
    ) -> None:
        self._kill_after = options.kill_after_rewards
        self._sent = 0
        self._client_config = settings.kafka_client_config()
        self._group_id = options.app_id
        self._inputs = inputs
        self._rewards = rewards
        self._dlq = dlq
        self._logs = logs

    async def send_reward(self, partition: int, key: bytes, value: bytes) -> int:
        pending = await self._rewards.send(key=key, value=value, partition=partition)
        metadata = await pending
        self._sent += 1
        if self._kill_after is not None and self._sent >= self._kill_after:
            log.warning("fault injection: SIGKILL after reward %d, before marking it", self._sent)
            os.kill(os.getpid(), signal.SIGKILL)
        return int(metadata.offset)

    async def send_dlq(self, key: bytes | None, value: bytes) -> None:
        await self._dlq.send(key=key, value=value)

    async def send_log(self, key: bytes, value: bytes) -> None:
        await self._logs.send(key=key, value=value)

    async def read_rewards(self, partition: int, start: int) -> tuple[list[tuple[int, bytes]], int]:
        return await asyncio.to_thread(
            read_partition, self._client_config, self._rewards.get_topic_name(), partition, start
        )

    async def caught_up(self, partitions: set[int], processed: Mapping[tuple[str, int], int]) -> set[tuple[str, int]]:
        return await asyncio.to_thread(
            idle_partitions, self._client_config, self._group_id, self._inputs, partitions, processed=processed
        )


def build_app(settings: Settings, policy: Policy, options: AppOptions) -> tuple[Any, RewardProcessor]:
    """A configured Faust app and the processor it drives (not started)."""
    faust: Any = importlib.import_module("faust")  # untyped glue: faust's own hints do not hold for our use
    specs = catalog(settings.topic_prefix, settings.topic_partitions, settings.topic_replication_factor)
    names = {role: topic_for(role, specs).name for role in ("executions", "verdicts", "judgements")}
    app = faust.App(
        options.app_id,
        broker=f"kafka://{settings.kafka_bootstrap}",
        store="memory://",
        datadir=str(options.data_dir),
        processing_guarantee="at_least_once",
        topic_partitions=settings.topic_partitions,
        topic_replication_factor=settings.topic_replication_factor,
        table_standby_replicas=0,
        topic_disable_leader=True,
        web_enabled=False,
        autodiscover=False,
        consumer_auto_offset_reset="earliest",
        broker_commit_interval=options.commit_interval_s,
        broker_session_timeout=options.session_timeout_s,
        broker_heartbeat_interval=1.0,
        producer_acks=-1,
    )
    raw = {"key_serializer": "raw", "value_serializer": "raw"}
    source = app.topic(*names.values(), **raw)
    rewards = app.topic(topic_for("rewards", specs).name, **raw)
    dlq = app.topic(topic_for("dlq", specs).name, **raw)
    logs = app.topic(topic_for("logs", specs).name, **raw)
    table = app.Table(TABLE_NAME, partitions=settings.topic_partitions, key_type=bytes, value_type=bytes)
    table.key_serializer = table.value_serializer = "raw"  # before the changelog topic is made (lazily)
    processor = RewardProcessor(
        policy,
        Topics({name: role for role, name in names.items()}),
        _TableStore(table),
        _FaustOutputs(settings, options, inputs=list(names.values()), rewards=rewards, dlq=dlq, logs=logs),
    )
    input_names = set(names.values())

    async def join_agent(stream: Any) -> None:
        async for event in stream.events():
            message = event.message
            timestamp = float(message.timestamp or time.time())
            await processor.handle(
                message.topic,
                message.partition,
                message.offset,
                timestamp=timestamp,
                key=message.key,
                value=message.value,
            )

    async def deadlines() -> None:
        if app.rebalancing or app.in_recovery or not app.tables.recovery.completed.is_set():
            return  # a half-recovered table could make an emitted generation look pending
        partitions = {tp.partition for tp in app.assignor.assigned_actives() if tp.topic in input_names}
        await processor.tick(partitions)

    async def on_rebalance(_sender: Any, *_args: Any, **_kwargs: Any) -> None:
        processor.forget_partitions()

    app.agent(source, name="reward-join")(join_agent)
    app.timer(options.tick_s)(deadlines)
    app.on_partitions_assigned.connect(on_rebalance)
    app.on_partitions_revoked.connect(on_rebalance)
    return app, processor


def run_worker(app: Any, loglevel: str = "info") -> None:
    """Run the app in this process until SIGTERM/SIGINT (Faust's worker owns the event loop)."""
    faust: Any = importlib.import_module("faust")
    faust.Worker(app, loglevel=loglevel, quiet=True).execute_from_commandline()
