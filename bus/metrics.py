"""Prometheus metrics of one worker process: its own registry and its own /metrics endpoint.

Why a registry per worker (never the global default): tests and multi-role processes create several
workers in one interpreter, and the global registry refuses a second metric of the same name.
Every metric carries a ``role`` label (executor, verifier, judge, indexer, rewards) so one dashboard serves all.
"""

from __future__ import annotations

import errno
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from threading import Thread
from typing import TYPE_CHECKING
from wsgiref.simple_server import WSGIServer

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    generate_latest,
    start_http_server,
)

from bus.host_metrics import HostCollector
from bus.labels import Children
from schemas.errors import RewardstreamError
from schemas.status import SANDBOX_ERROR_KINDS, SandboxErrorKind

if TYPE_CHECKING:
    from confluent_kafka import Consumer

#: Run-time buckets (seconds): sandboxed runs take from milliseconds to the task's timeout.
RUN_SECONDS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
#: Reward buckets (seconds, from a generation's publish to its reward): a join, up to past the deadline.
REWARD_SECONDS_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800)


class MetricsError(RewardstreamError):
    """The metrics endpoint could not be served."""


class WorkerMetrics:
    """The metrics every worker role reports; labels fixed at ``role``."""

    def __init__(self, role: str, registry: CollectorRegistry | None = None) -> None:
        self.role = role
        own = registry is None
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        if own:  # restarts (process_start_time_seconds), memory; the host's pressure
            ProcessCollector(registry=self.registry)
            self.registry.register(HostCollector(role))
        labels = ("role",)
        self._processed = Counter(
            "rewardstream_processed", "Messages fully handled (result produced or indexed)", labels,
            registry=self.registry,
        )  # fmt: skip
        self._dead_letters = Counter(
            "rewardstream_dead_letters", "Messages sent to the DLQ instead of being handled, by reason (the error "
            "class: DecodeError, InvalidEventError, HandlerCrashError, CrashLoopError, ...)", (*labels, "reason"),
            registry=self.registry,
        )  # fmt: skip
        self._sandbox_errors = Counter(
            "rewardstream_sandbox_errors", "Sandbox infrastructure failures (retried, then sandbox_error), by kind: "
            "host_contention, not_started, admission, shutdown, daemon, exception, other", (*labels, "kind"),
            registry=self.registry,
        )  # fmt: skip
        self._retries = Counter(
            "rewardstream_retries", "Retries of a dependency that was down (OpenSearch, S3, Kafka)",
            (*labels, "dependency"), registry=self.registry,
        )  # fmt: skip
        self._run_seconds = Histogram(
            "rewardstream_run_seconds", "Wall time of one unit of work (a sandbox run, a bulk request)", labels,
            buckets=RUN_SECONDS_BUCKETS, registry=self.registry,
        )  # fmt: skip
        self._sandbox_wait = Histogram(
            "rewardstream_sandbox_wait_seconds", "Time a graded sandbox run waited for a CPU the host gave to "
            "others (its limits never count it): the host's contention, per run", labels,
            buckets=RUN_SECONDS_BUCKETS, registry=self.registry,
        )  # fmt: skip
        self._host_retries = Counter(
            "rewardstream_host_retries", "Sandbox runs repeated because the host starved them past their ceiling "
            "(contention: never the program's failure)", labels, registry=self.registry,
        )  # fmt: skip
        self._in_flight = Gauge("rewardstream_in_flight", "Units of work started, not finished", labels,
                                registry=self.registry)  # fmt: skip
        self._rewards = Counter(
            "rewardstream_rewards", "Generations the reward processor decided, by outcome: complete, partial (emitted "
            "at the deadline with parts missing), gave_up (an invalid reward: a required part never came or its "
            "sandbox failed)", (*labels, "outcome"), registry=self.registry,
        )  # fmt: skip
        self._reward_seconds = Histogram(
            "rewardstream_reward_seconds", "From a generation's publish (its Kafka timestamp, which every result "
            "of it carries) to its reward (or giving up), by the processor's clock", labels,
            buckets=REWARD_SECONDS_BUCKETS, registry=self.registry,
        )  # fmt: skip
        self._reward_children = Children(self._rewards)
        self._reward_seconds_children = Children(self._reward_seconds)
        self._lag = Gauge(
            "rewardstream_consumer_lag", "Messages behind the partition's high watermark",
            (*labels, "topic", "partition"), registry=self.registry,
        )  # fmt: skip
        # Series born at 0: an alert on their increase sees the first one (a counter first scraped at 1 has none).
        for counter in (self._processed, self._host_retries):
            counter.labels(role)
        for kind in SANDBOX_ERROR_KINDS:
            self._sandbox_errors.labels(role, kind)

    def processed(self, n: int = 1) -> None:
        """Count ``n`` messages as done."""
        self._processed.labels(self.role).inc(n)

    def dead_letter(self, reason: str, n: int = 1) -> None:
        """Count ``n`` messages dead-lettered, by a short reason (the error class)."""
        self._dead_letters.labels(self.role, reason).inc(n)

    def sandbox_error(self, kind: SandboxErrorKind = "other", n: int = 1) -> None:
        """Count a sandbox infrastructure failure of ``kind`` (what part of the host failed)."""
        self._sandbox_errors.labels(self.role, kind).inc(n)

    def sandbox_run(self, wait_s: float, host_retries: int) -> None:
        """Record what the host did to a graded run: its wait for a CPU, the times it was repeated for it."""
        self._sandbox_wait.labels(self.role).observe(max(wait_s, 0.0))
        if host_retries > 0:
            self._host_retries.labels(self.role).inc(host_retries)

    def reward(self, outcome: str, seconds: float) -> None:
        """Count one decided generation by outcome and observe how long it took from its publish."""
        self._reward_children(self.role, outcome).inc()
        self._reward_seconds_children(self.role).observe(max(seconds, 0.0))

    def retry(self, dependency: str) -> None:
        """Count one retry of an unavailable dependency."""
        self._retries.labels(self.role, dependency).inc()

    def observe_run(self, seconds: float) -> None:
        """Record the wall time of one unit of work."""
        self._run_seconds.labels(self.role).observe(seconds)

    @contextmanager
    def in_flight(self) -> Iterator[None]:
        """Track one unit of work: in-flight while inside, its wall time observed on the way out."""
        gauge = self._in_flight.labels(self.role)
        gauge.inc()
        started = time.monotonic()
        try:
            yield
        finally:
            gauge.dec()
            self.observe_run(time.monotonic() - started)

    def set_lag(self, topic: str, partition: int, lag: int) -> None:
        """Set the lag of one partition."""
        self._lag.labels(self.role, topic, str(partition)).set(max(lag, 0))

    def update_lag(self, consumer: Consumer) -> None:
        """Lag of every assigned partition = high watermark - position (best effort, never raises).

        The watermarks are the ones the consumer's last fetch brought (``cached``): asking the broker instead
        queues behind the consumer's own long-poll fetch (up to ``fetch.wait.max.ms`` per partition), which
        blocked the worker's loop for seconds whenever the lag was updated."""
        try:
            positions = consumer.position(consumer.assignment())
            for tp in positions:
                topic, partition, offset = tp.topic, tp.partition, tp.offset
                watermarks = consumer.get_watermark_offsets(tp, cached=True)
                if watermarks is None or watermarks[1] < 0:  # no fetch of it answered yet
                    continue
                low, high = watermarks
                position = offset if offset >= 0 else low
                self.set_lag(topic, partition, high - position)
        except Exception:  # noqa: S110 - lag is advisory; a broker hiccup must not stop the worker
            pass

    def value(self, name: str, **labels: str) -> float:
        """Current value of a sample (for tests and the CLI), 0 if it was never set."""
        got = self.registry.get_sample_value(name, {"role": self.role, **labels})
        return 0.0 if got is None else got

    def exposition(self) -> bytes:
        """The text exposition format, as /metrics serves it."""
        return generate_latest(self.registry)


@dataclass
class MetricsServer:
    """A running /metrics endpoint; ``close()`` stops it and frees the port."""

    server: WSGIServer
    thread: Thread

    @property
    def port(self) -> int:
        """The port actually bound (useful with port 0)."""
        return int(self.server.server_address[1])

    def close(self) -> None:
        """Stop serving and release the socket."""
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def serve(metrics: WorkerMetrics, host: str, port: int) -> MetricsServer:
    """Serve ``metrics`` over HTTP on ``host:port`` in a daemon thread."""
    try:
        server, thread = start_http_server(port, addr=host, registry=metrics.registry)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise MetricsError(
                f"metrics port {host}:{port} is taken; set RS_METRICS_PORT (or --metrics-port) to a free one"
            ) from exc
        raise MetricsError(f"cannot serve metrics on {host}:{port}: {exc}") from exc
    return MetricsServer(server, thread)
