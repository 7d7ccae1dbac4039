"""A transactional worker whose runs only sleep, for the rebalancing tests (``test_rebalancing.py``).

``python -m tests.integration.sleeping_worker --group G --starts FILE --sleep S`` consumes the prefix's
generations in group G and, for each, appends ``<generation_id> <pid>`` to FILE when the run starts, sleeps S
seconds (an agent step mostly waits) and echoes the generation id to the executions topic. Everything else (the
consumer group, its cooperative rebalancing, the transactions, SIGTERM's drain) is the production loop; what
stands in is the sandbox run only. Settings come from the environment (``RS_TOPIC_PREFIX`` etc.).

``--fleet-rate R`` admits each run as a sandbox run is admitted, through ``workers.sandbox.admission`` with this
worker's share of R starts per second (``workers.sandbox.fleet_pace``, told by the loop) and slots in
``--slots-dir``, and adds the start's wall-clock time to its line (``test_fleet_pace.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path

from bus.clients import make_consumer, make_producer
from bus.metrics import WorkerMetrics
from schemas.events import GenerationEvent
from schemas.settings import Settings
from schemas.topics import catalog_for, topic_for
from workers.handler import Done, Outcome, Output, Source
from workers.logs.shipper import LogShipper
from workers.loop_config import WorkerConfig
from workers.sandbox.admission import Admission
from workers.sandbox.fleet_pace import FleetPace
from workers.transactional_loop import TransactionalWorker


class Sleeps:
    """Notes each start in ``starts``, sleeps, and echoes the generation id. With ``admission``, a run starts
    as a sandbox run does: once admitted (a host slot, the host's pace and the worker's fleet share)."""

    def __init__(self, starts: Path, sleep_s: float, out_topic: str, admission: Admission | None = None) -> None:
        self.starts = starts
        self.sleep_s = sleep_s
        self.out_topic = out_topic
        self.admission = admission
        self.lock = threading.Lock()

    def handle(self, event: GenerationEvent, source: Source) -> Outcome:
        with self.admission.admit() if self.admission is not None else contextlib.nullcontext():
            with self.lock, self.starts.open("a") as out:
                out.write(f"{event.generation_id} {os.getpid()} {time.time():.6f}\n")
            time.sleep(self.sleep_s)
        return Done((Output(self.out_topic, event.key(), event.generation_id.encode()),))


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--group", required=True)
    parser.add_argument("--starts", type=Path, required=True)
    parser.add_argument("--sleep", type=float, default=2.0)
    parser.add_argument("--concurrency", type=int, default=6)
    parser.add_argument("--rebalance-drain", type=float, default=10.0)
    parser.add_argument("--fleet-rate", type=float, default=0.0)
    parser.add_argument("--slots-dir", type=Path)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(process)d %(name)s %(message)s")
    settings = Settings()
    specs = catalog_for(settings)
    kafka = settings.kafka_client_config()
    config = WorkerConfig(
        role="executor",
        source_topic=topic_for("generations", specs).name,
        dlq_topic=topic_for("dlq", specs).name,
        group_id=args.group,
        transactional_id=f"{args.group}-{os.getpid()}",
        concurrency=args.concurrency,
        commit_interval_s=0.1,
        drain_timeout_s=30.0,
        rebalance_drain_s=args.rebalance_drain,
    )
    overrides: dict[str, str | int | bool] = {"transactional.id": config.transactional_id,
                                              "transaction.timeout.ms": 6000}  # fmt: skip
    producer = make_producer(kafka, **overrides)
    consumer = make_consumer(kafka, args.group, **{"session.timeout.ms": 6000})
    shipper = LogShipper(producer, topic_for("logs", specs).name, "executor")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda _s, _f: stop.set())
    pace = FleetPace(args.fleet_rate) if args.fleet_rate > 0 else None
    admission = None
    if pace is not None:  # the host's slots and pace out of the way: only the fleet's share limits the starts
        admission = Admission(args.slots_dir or args.starts.parent / "slots", 1024, 100_000.0, fleet=pace)
    handler = Sleeps(args.starts, args.sleep, topic_for("executions", specs).name, admission)
    worker = TransactionalWorker(config, handler, consumer=consumer, producer=producer,
                                 metrics=WorkerMetrics("executor"), stop=stop, shipper=shipper,
                                 shares=pace)  # fmt: skip
    stats = worker.run()
    logging.getLogger(__name__).info("stopped: %s", stats)


if __name__ == "__main__":
    main(sys.argv[1:])
