"""A Faust app whose consumer reads committed records only, under the at_least_once guarantee.

Why: the workers write their results in Kafka transactions. Faust reads with ``read_committed`` only in
its exactly_once mode (which we cannot use: open upstream bugs), so by default the processor would also see
the results of aborted transactions (a worker killed mid-run, whose generation is then run again) and join a
result that officially never existed. The isolation level is a setting of the aiokafka consumer that Faust
builds internally; these subclasses set it and change nothing else.
"""

from __future__ import annotations

import importlib
from typing import Any


def read_committed_app_class() -> Any:
    """``faust.App`` with a transport whose worker consumer has ``isolation_level="read_committed"``."""
    faust: Any = importlib.import_module("faust")
    drivers: Any = importlib.import_module("faust.transport.drivers.aiokafka")

    class ReadCommittedConsumerThread(drivers.AIOKafkaConsumerThread):  # type: ignore[misc]
        def _create_worker_consumer(self, transport: Any) -> Any:
            consumer = super()._create_worker_consumer(transport)
            consumer._isolation_level = "read_committed"  # read by aiokafka when its fetcher starts
            return consumer

    class ReadCommittedConsumer(drivers.Consumer):  # type: ignore[misc]
        def _new_consumer_thread(self) -> Any:
            return ReadCommittedConsumerThread(self, loop=self.loop, beacon=self.beacon)

    class ReadCommittedTransport(drivers.Transport):  # type: ignore[misc]
        Consumer = ReadCommittedConsumer

    class RewardApp(faust.App):  # type: ignore[misc]
        def _new_transport(self) -> Any:
            return ReadCommittedTransport(self.conf.broker_consumer, self)

    return RewardApp


def isolation_level(app: Any) -> str:
    """The isolation level the app's running consumer really uses (for tests and the startup log)."""
    return str(app.consumer._thread._consumer._isolation_level)
