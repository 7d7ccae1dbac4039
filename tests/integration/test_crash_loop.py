"""The crash-loop guard against the real broker and the real supervisor: a message that kills its consumer
process every time it is handled is dead-lettered after ``RS_CRASH_ATTEMPTS`` deaths, and everything else
is handled exactly once. Also: a handler that raises on one message dead-letters it and the rest flows."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from bus.clients import make_consumer, make_producer
from bus.metrics import WorkerMetrics
from schemas.codec import decode, encode
from schemas.events import GenerationEvent, LogRecord
from schemas.settings import Settings
from schemas.topics import catalog, topic_for
from tests.integration.helpers import PARTITIONS
from tests.integration.reward_env import REPO, Reader, reward_env
from tests.unit.reward_events import execution, judgement, verdict
from workers.handler import Done, Outcome, Output, Source
from workers.logs.shipper import LogShipper
from workers.loop_config import WorkerConfig
from workers.transactional_loop import TransactionalWorker

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ATTEMPTS = 2


def generation(gid: str) -> GenerationEvent:
    return GenerationEvent(generation_id=gid, episode_id=gid, run_id="r", task_id="T/1", policy_version="p",
                           code="x = 1\n")  # fmt: skip


def produce(
    kafka_config: dict[str, str], topic: str, values: list[tuple[bytes, bytes]]
) -> dict[bytes, tuple[int, int]]:
    """Produce in order; (partition, offset) of each value by its key."""
    producer = Producer({**kafka_config, "enable.idempotence": True, "linger.ms": 5})
    where: dict[bytes, tuple[int, int]] = {}

    def delivered(err: Any, msg: Any) -> None:
        assert err is None, err
        where[msg.key()] = (msg.partition(), msg.offset())

    for key, value in values:
        producer.produce(topic, key=key, value=value, on_delivery=delivered)
    assert producer.flush(30) == 0
    return where


@contextmanager
def supervised(name: str, argv: list[str], env: dict[str, str], log: Path) -> Iterator[Callable[[], int]]:
    """``argv`` under ``python -m rewardstream.supervisor``; yields a function counting its restarts so far."""
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "rewardstream.supervisor", name, "--", *argv], cwd=REPO,
                                env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    try:
        yield lambda: log.read_text(errors="replace").count("exited with code")
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def read_until(readers: list[Reader], until: Callable[[], bool], timeout_s: float, why: Callable[[], str]) -> None:
    """Poll ``readers`` until ``until()`` holds; fail with ``why()`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        for reader in readers:
            reader.poll()
        if until():
            return
        assert time.monotonic() < deadline, why()


def child_env(prefix: str, tmp: Path) -> dict[str, str]:
    return {**os.environ, "RS_TOPIC_PREFIX": prefix, "RS_TOPIC_PARTITIONS": str(PARTITIONS),
            "RS_CRASH_ATTEMPTS": str(ATTEMPTS), "RS_CACHE_DIR": str(tmp), "PYTHONWARNINGS": "ignore"}  # fmt: skip


@pytest.mark.timeout(300)
def test_a_message_that_kills_the_worker_is_dead_lettered_and_the_rest_handled_once(
    kafka_config: dict[str, str], prefix: str, tmp_path: Path
) -> None:
    specs = catalog(prefix, PARTITIONS, 1)
    names = {role: topic_for(role, specs).name for role in ("generations", "executions", "dlq", "logs")}
    gids = [f"g{i}" for i in range(30)]
    poison = "g11"
    where = produce(kafka_config, names["generations"], [(g.encode(), encode(generation(g))) for g in gids])
    results, letters, logs = (Reader(kafka_config, names[r]) for r in ("executions", "dlq", "logs"))
    argv = [sys.executable, "-m", "tests.integration.crashing", "worker", "--poison", poison, "--group", f"{prefix}w"]
    log = tmp_path / "worker.log"
    try:
        with supervised("crashing-worker", argv, child_env(prefix, tmp_path), log) as restarts:
            read_until(
                [results, letters],
                lambda: len(results.values) >= len(gids) - 1 and bool(letters.values),
                240,
                lambda: f"results {len(results.values)}, letters {len(letters.values)}\n{log.read_text()[-6000:]}",
            )
            results.settle()
            deaths = restarts()
        got = Counter(v.decode() for v in results.values)
        assert got == Counter(g for g in gids if g != poison), "each other generation exactly once"
        [letter] = letters.letters()
        assert letter.error_type == "CrashLoopError"
        assert (letter.source_partition, letter.source_offset) == where[poison.encode()]
        assert f"died {ATTEMPTS} times while handling this message alone" in letter.error
        assert decode(letter.payload(), GenerationEvent).generation_id == poison
        # one death among others, then ATTEMPTS deaths with it alone; then no more
        assert 1 + ATTEMPTS <= deaths <= 2 + ATTEMPTS, log.read_text()[-4000:]
        read_until([logs], lambda: any(b"CrashLoopError" in v for v in logs.values), 30, lambda: "no log line")
        records = [decode(v, LogRecord) for v in logs.values if b"CrashLoopError" in v]
        assert records[0].level == "error"
        assert (records[0].partition, records[0].offset) == where[poison.encode()]
    finally:
        for reader in (results, letters, logs):
            reader.close()


@pytest.mark.timeout(300)
def test_a_message_that_kills_the_reward_engine_is_dead_lettered_and_the_rest_rewarded_once(
    kafka_config: dict[str, str], unique_name: str, tmp_path: Path
) -> None:
    with reward_env(kafka_config, unique_name, tmp_path) as env:
        gids = [f"r{i}" for i in range(12)]
        poison = "r-poison"
        parts = [part for g in gids for part in (execution(g), verdict(g), judgement(g))]
        env.produce(parts[:15])
        where = produce(kafka_config, env.name("executions"), [(poison.encode(), encode(execution(poison)))])
        env.produce(parts[15:])
        rewards, letters = Reader(kafka_config, env.name("rewards")), Reader(kafka_config, env.name("dlq"))
        argv = [sys.executable, "-m", "tests.integration.crashing", "rewards", "--poison", poison,
                "--group", env.app_id]  # fmt: skip
        log = tmp_path / "rewards.log"
        try:
            with supervised("crashing-rewards", argv, child_env(env.prefix, tmp_path), log) as restarts:
                read_until(
                    [rewards, letters],
                    lambda: len(rewards.values) >= len(gids) and bool(letters.values),
                    240,
                    lambda: f"rewards {len(rewards.values)}, letters {len(letters.values)}\n{log.read_text()[-6000:]}",
                )
                by_gen = rewards.exactly_one_each(gids)
                deaths = restarts()
            assert all(r.reward == 1.0 for r in by_gen.values())
            [letter] = letters.letters()
            assert (letter.component, letter.error_type) == ("rewards", "CrashLoopError")
            assert (letter.source_topic, letter.source_partition, letter.source_offset) == (
                env.name("executions"),
                *where[poison.encode()],
            )
            assert 1 + ATTEMPTS <= deaths <= 2 + ATTEMPTS, log.read_text()[-4000:]
        finally:
            rewards.close()
            letters.close()


@pytest.mark.timeout(300)
def test_a_record_that_kills_the_indexer_is_dead_lettered_and_the_rest_indexed(
    kafka_config: dict[str, str], prefix: str, tmp_path: Path, opensearch_client: Any, logs_index_prefix: str
) -> None:
    specs = catalog(prefix, PARTITIONS, 1)
    names = {role: topic_for(role, specs).name for role in ("logs", "dlq")}
    records = [LogRecord(level="info", component="t", worker="t:1", message=f"line {i}", run_id=prefix[:-1][-60:])
               for i in range(12)]  # fmt: skip
    poison = LogRecord(level="error", component="t", worker="t:1", message="kills-the-indexer")
    values = [(r.key() + str(i).encode(), encode(r)) for i, r in enumerate([*records[:5], poison, *records[5:]])]
    where = produce(kafka_config, names["logs"], values)
    letters = Reader(kafka_config, names["dlq"])
    argv = [sys.executable, "-m", "tests.integration.crashing", "indexer", "--poison", "kills-the-indexer",
            "--group", f"{prefix}indexer"]  # fmt: skip
    env = {
        **child_env(prefix, tmp_path),
        "RS_OPENSEARCH_INDEX_PREFIX": logs_index_prefix,
        "RS_OPENSEARCH_REPLICAS": "0",
    }
    log = tmp_path / "indexer.log"

    def indexed() -> int:
        opensearch_client.indices.refresh(index=f"{logs_index_prefix}-*", ignore_unavailable=True)
        found = opensearch_client.count(index=f"{logs_index_prefix}-*", ignore_unavailable=True)
        return int(found["count"])

    try:
        with supervised("crashing-indexer", argv, env, log) as restarts:
            read_until(
                [letters],
                lambda: bool(letters.values) and indexed() >= len(records),
                240,
                lambda: f"letters {len(letters.values)}, indexed {indexed()}\n{log.read_text()[-6000:]}",
            )
            deaths = restarts()
        [letter] = letters.letters()
        assert (letter.component, letter.error_type) == ("indexer", "CrashLoopError")
        assert (letter.source_partition, letter.source_offset) == where[values[5][0]]
        assert indexed() == len(records)
        assert 1 + ATTEMPTS <= deaths <= 2 + ATTEMPTS, log.read_text()[-4000:]
    finally:
        letters.close()


class RaisesOn:
    """A handler with a bug that shows on one generation only."""

    def __init__(self, bad: str, out_topic: str) -> None:
        self.bad = bad
        self.out_topic = out_topic

    def handle(self, event: GenerationEvent, source: Source) -> Outcome:
        if event.generation_id == self.bad:
            raise KeyError("a bug that only this generation triggers")
        return Done((Output(self.out_topic, event.key(), event.generation_id.encode()),))


@pytest.mark.timeout(120)
def test_a_handler_that_raises_on_one_message_dead_letters_it_and_the_rest_flows(
    kafka_config: dict[str, str], prefix: str
) -> None:
    specs = catalog(prefix, PARTITIONS, 1)
    names = {role: topic_for(role, specs).name for role in ("generations", "executions", "dlq", "logs")}
    gids = [f"h{i}" for i in range(20)]
    where = produce(kafka_config, names["generations"], [(g.encode(), encode(generation(g))) for g in gids])
    config = WorkerConfig(role="executor", source_topic=names["generations"], dlq_topic=names["dlq"],
                          group_id=f"{prefix}w", transactional_id=f"{prefix}w-tx", concurrency=2,
                          handler_attempts=2, handler_backoff_s=0.05)  # fmt: skip
    producer = make_producer(kafka_config, **{"transactional.id": config.transactional_id})
    stop = threading.Event()
    metrics = WorkerMetrics("executor")
    worker = TransactionalWorker(config, RaisesOn("h7", names["executions"]), consumer=make_consumer(kafka_config,
                                 config.group_id), producer=producer, metrics=metrics, stop=stop,
                                 shipper=LogShipper(producer, names["logs"], "executor"))  # fmt: skip
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    results, letters = Reader(kafka_config, names["executions"]), Reader(kafka_config, names["dlq"])
    try:
        read_until([results, letters], lambda: len(results.values) >= 19 and bool(letters.values), 90,
                   lambda: f"results {len(results.values)}, letters {len(letters.values)}")  # fmt: skip
        results.settle(1.0)
        assert sorted(v.decode() for v in results.values) == sorted(g for g in gids if g != "h7")
        [letter] = letters.letters()
        assert letter.error_type == "HandlerCrashError"
        assert "KeyError" in letter.error
        assert (letter.source_partition, letter.source_offset) == where[b"h7"]
        assert metrics.value("rewardstream_dead_letters_total", reason="HandlerCrashError") == 1
        assert thread.is_alive()
    finally:
        stop.set()
        thread.join(30)
        results.close()
        letters.close()


@pytest.mark.timeout(120)
def test_a_reward_engine_handler_that_raises_on_one_message_dead_letters_it_and_the_rest_flows(
    kafka_config: dict[str, str], unique_name: str, tmp_path: Path
) -> None:
    from streams.reward.kafka_engine import EngineOptions, RewardEngine
    from streams.reward.policy import load_policy

    with reward_env(kafka_config, unique_name, tmp_path) as env:
        gids = [f"b{i}" for i in range(6)]
        env.produce([part for g in gids for part in (execution(g), verdict(g), judgement(g))])
        settings = Settings(topic_prefix=env.prefix, topic_partitions=PARTITIONS)
        engine = RewardEngine(settings, load_policy(None), EngineOptions(app_id=env.app_id, tick_s=0.2))
        handle = engine.processor.handle

        async def buggy(topic: str, partition: int, offset: int, **kwargs: Any) -> None:
            await handle(topic, partition, offset, **kwargs)  # its table writes happen, then the bug shows
            if b'"generation_id":"b3"' in (kwargs.get("value") or b"") and topic == env.name("verdicts"):
                raise ValueError("a bug that only this message triggers")

        engine.processor.handle = buggy  # type: ignore[method-assign]
        thread = threading.Thread(target=engine.run, daemon=True)
        thread.start()
        rewards, letters = Reader(kafka_config, env.name("rewards")), Reader(kafka_config, env.name("dlq"))
        try:
            read_until([rewards, letters], lambda: len(rewards.values) >= 5 and bool(letters.values), 90,
                       lambda: f"rewards {len(rewards.values)}, letters {len(letters.values)}")  # fmt: skip
            rewards.settle(2.0)
            # b3's verdict was rolled back with its dead letter: b3 waits for the deadline (30 s), the rest is rewarded
            assert sorted(r.generation_id for r in rewards.rewards()) == [g for g in gids if g != "b3"]
            [letter] = letters.letters()
            assert (letter.error_type, letter.source_topic) == ("HandlerCrashError", env.name("verdicts"))
            assert thread.is_alive()
            assert engine.metrics.value("rewardstream_dead_letters_total", reason="HandlerCrashError") == 1
        finally:
            engine.stop.set()
            thread.join(30)
            rewards.close()
            letters.close()
