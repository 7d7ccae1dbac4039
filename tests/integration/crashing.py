"""Consumers that die on one message, for the crash-loop tests: run under the real supervisor.

``python -m tests.integration.crashing worker --poison GEN ...`` is a transactional worker whose handler
SIGKILLs its own process when it meets generation GEN (as a segfault in a C extension would);
``... rewards --poison GEN`` is the reward engine doing the same while it handles a part of GEN, and
``... indexer --poison TEXT`` the log indexer on a record that holds TEXT. Everything
else is the production code path. Settings come from the environment (``RS_TOPIC_PREFIX`` etc.).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from typing import Any

from bus.clients import make_consumer, make_producer
from bus.metrics import WorkerMetrics
from schemas.events import GenerationEvent
from schemas.settings import Settings
from schemas.topics import catalog_for, topic_for
from workers.handler import Done, Outcome, Output, Source
from workers.logs.shipper import LogShipper
from workers.loop_config import WorkerConfig
from workers.transactional_loop import TransactionalWorker


class KillsItselfOn:
    """A handler that dies (SIGKILL, no cleanup) on one generation and echoes every other one."""

    def __init__(self, poison: str, out_topic: str) -> None:
        self.poison = poison
        self.out_topic = out_topic

    def handle(self, event: GenerationEvent, source: Source) -> Outcome:
        if event.generation_id == self.poison:
            os.kill(os.getpid(), signal.SIGKILL)
        return Done((Output(self.out_topic, event.key(), event.generation_id.encode()),))


def _stop_on_sigterm() -> threading.Event:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda _s, _f: stop.set())
    return stop


def worker_main(poison: str, group: str) -> None:
    settings = Settings()
    specs = catalog_for(settings)
    kafka = settings.kafka_client_config()
    config = WorkerConfig(
        role="executor",
        source_topic=topic_for("generations", specs).name,
        dlq_topic=topic_for("dlq", specs).name,
        group_id=group,
        transactional_id=f"{group}-tx",  # stable: a restart fences the dead one's open transaction at once
        concurrency=2,
        commit_interval_s=0.1,
        crash_attempts=settings.worker.crash_attempts,
    )
    overrides: dict[str, str | int | bool] = {
        "transactional.id": config.transactional_id,
        "transaction.timeout.ms": 10_000,
    }
    producer = make_producer(kafka, **overrides)
    consumer = make_consumer(kafka, group, **{"session.timeout.ms": 6000})
    shipper = LogShipper(producer, topic_for("logs", specs).name, "executor")
    handler = KillsItselfOn(poison, topic_for("executions", specs).name)
    metrics = WorkerMetrics("executor")
    worker = TransactionalWorker(config, handler, consumer=consumer, producer=producer, metrics=metrics,
                                 stop=_stop_on_sigterm(), shipper=shipper)  # fmt: skip
    worker.run()


def rewards_main(poison: str, app_id: str) -> None:
    from streams.reward.kafka_engine import EngineOptions, RewardEngine, run_engine
    from streams.reward.policy import load_policy

    settings = Settings()
    engine = RewardEngine(settings, load_policy(None), EngineOptions(app_id=app_id, tick_s=0.2))
    handle = engine.processor.handle
    marker = f'"generation_id":"{poison}"'.encode()

    async def dies_on_poison(topic: str, partition: int, offset: int, **kwargs: Any) -> None:
        if marker in (kwargs.get("value") or b""):
            os.kill(os.getpid(), signal.SIGKILL)
        await handle(topic, partition, offset, **kwargs)

    engine.processor.handle = dies_on_poison  # type: ignore[method-assign]
    run_engine(engine)


def indexer_main(poison: str, group: str) -> None:
    from workers.logs.indexer import LogIndexer
    from workers.logs.service import indexer_config, run_indexers

    settings = Settings()
    handle = LogIndexer.handle_batch
    marker = poison.encode()

    def dies_on_poison(self: LogIndexer, messages: list[Any]) -> None:
        if any(marker in (m.value() or b"") for m in messages):
            os.kill(os.getpid(), signal.SIGKILL)
        handle(self, messages)

    LogIndexer.handle_batch = dies_on_poison  # type: ignore[method-assign]
    config = indexer_config(settings, group_id=group, batch_size=4, poll_timeout_s=0.1)
    run_indexers(settings, _stop_on_sigterm(), metrics=WorkerMetrics("indexer"), config=config)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("kind", choices=["worker", "rewards", "indexer"])
    parser.add_argument("--poison", required=True)
    parser.add_argument("--group", required=True)
    args = parser.parse_args(argv)
    if args.kind == "worker":
        worker_main(args.poison, args.group)
    elif args.kind == "rewards":
        rewards_main(args.poison, args.group)
    else:
        indexer_main(args.poison, args.group)


if __name__ == "__main__":
    main(sys.argv[1:])
