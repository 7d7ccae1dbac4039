"""What the capacity benchmark's parts share: a run's own topics, bucket and task registry; events spread evenly
over the partitions; a read_committed reader that times the outputs it waits for.

Why evenly: with a few hundred random keys some partitions get more than others, and the member that owns
them finishes last; the scaling figures would then measure the keys' luck, not the workers.
"""

from __future__ import annotations

import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from bus.admin import delete_groups_with_prefix, delete_topics, ensure_topics
from bus.clients import make_producer, make_reader
from bus.keys import partition_for
from schemas.codec import encode
from schemas.episodes import ActionEvent
from schemas.events import GenerationEvent
from schemas.settings import Settings
from schemas.tasks import Task
from schemas.topics import catalog
from workers.artifacts import minio_client, remove_bucket

TASK_ID = "bench/capacity"


def call_task(task_id: str = TASK_ID) -> Task:
    """A one-shot task with one public and one hidden case: ``f() == 1``."""
    return Task.model_validate({
        "schema": "rewardstream.task/v1", "task_id": task_id, "prompt": "def f():\n", "entry_point": "f",
        "public_tests": {"kind": "call", "cases": [{"id": "p0", "args": [], "expected": 1}]},
        "hidden_tests": {"kind": "call", "cases": [{"id": "h0", "args": [], "expected": 1}]},
    })  # fmt: skip


def sleeping_code(seconds: float) -> str:
    """A solution that waits ``seconds`` (as an agent's step mostly waits) and is right."""
    return f"import time\n\ndef f():\n    time.sleep({seconds!r})\n    return 1\n"


def balanced_keys(n: int, partitions: int, tag: str) -> list[str]:
    """``n`` distinct keys, as many on each partition as can be (the producers' CRC-32 partitioner)."""
    by_partition: list[list[str]] = [[] for _ in range(partitions)]
    want = -(-n // partitions)
    i = 0
    while sum(len(b) for b in by_partition) < want * partitions:
        key = f"{tag}-{i}"
        i += 1
        bucket = by_partition[partition_for(key.encode(), partitions)]
        if len(bucket) < want:
            bucket.append(key)
    return [by_partition[j % partitions][j // partitions] for j in range(n)]


def generations(n: int, partitions: int, code: str, tag: str) -> list[GenerationEvent]:
    return [
        GenerationEvent(generation_id=key, episode_id=key, run_id="bench-capacity", task_id=TASK_ID,
                        policy_version="bench", code=code)
        for key in balanced_keys(n, partitions, tag)
    ]  # fmt: skip


@dataclass
class BenchRun:
    """One part's own namespace: topic prefix, partitions, task registry, bucket; ``settings`` names them all."""

    settings: Settings
    partitions: int
    tmp: Path
    extra_topics: list[str] = field(default_factory=list)

    def env(self) -> dict[str, str]:
        """The same namespace as ``RS_*`` variables, for worker processes started as a user starts them."""
        s = self.settings
        return {"RS_TOPIC_PREFIX": s.kafka.topic_prefix, "RS_TOPIC_PARTITIONS": str(self.partitions),
                "RS_TASKS_DIR": str(s.tasks_dir), "RS_S3_BUCKET": s.s3.bucket, "RS_METRICS_PORT": "0"}  # fmt: skip

    def topic(self, role: str) -> str:
        return f"{self.settings.kafka.topic_prefix}{role}"

    def publish(self, topic: str, events: Sequence[GenerationEvent | ActionEvent]) -> None:
        producer = make_producer(self.settings.kafka_client_config())
        for event in events:
            producer.produce(topic, key=event.key(), value=encode(event))
            producer.poll(0)
        if producer.flush(60):
            raise RuntimeError(f"could not publish {len(events)} events to {topic}")


@contextmanager
def bench_run(name: str, partitions: int, **settings: Any) -> Iterator[BenchRun]:
    """Fresh topics (``partitions`` each), an empty task registry and bucket; all removed afterwards."""
    tag = uuid.uuid4().hex[:8]
    prefix = f"rs-bench.{name}-{tag}."
    with tempfile.TemporaryDirectory(prefix=f"rs-bench-{name}-") as tmp:
        s = Settings(topic_prefix=prefix, topic_partitions=partitions, tasks_dir=Path(tmp, "tasks"),
                     s3_bucket=f"rs-bench-{name}-{tag}", **settings)  # fmt: skip
        specs = catalog(prefix, partitions, 1)
        kafka = s.kafka_client_config()
        ensure_topics(specs, kafka)
        run = BenchRun(s, partitions, Path(tmp))
        try:
            yield run
        finally:
            existing = [spec.name for spec in specs] + run.extra_topics
            delete_topics(existing, kafka)
            delete_groups_with_prefix(prefix, kafka)
            s3 = minio_client(s)
            if s3.bucket_exists(s.s3.bucket):
                remove_bucket(s3, s.s3.bucket)


@dataclass
class Timed:
    """When the first and the last of the awaited messages were read."""

    count: int
    first_s: float
    last_s: float
    #: the messages' values and when each was read, when asked for
    values: list[bytes] = field(default_factory=list)
    read_at: list[float] = field(default_factory=list)

    def rate(self) -> float:
        """Messages per second between the first and the last (the steady state: start-up left out)."""
        span = self.last_s - self.first_s
        return (self.count - 1) / span if span > 0 and self.count > 1 else 0.0


class Reader:
    """Reads every partition of ``topic`` from its beginning, committed records only."""

    def __init__(self, run: BenchRun, topic: str) -> None:
        self._consumer = make_reader(run.settings.kafka_client_config(), f"bench-reader-{uuid.uuid4().hex}")
        self._consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(run.partitions)])
        self.topic = topic

    def wait(
        self,
        n: int,
        timeout_s: float,
        alive: object = None,
        *,
        keep: bool = False,
        on_first: Callable[[int], None] | None = None,
    ) -> Timed:
        """Until ``n`` messages were read (RuntimeError after ``timeout_s``, or once ``alive()`` says False);
        ``keep``: with their values; ``on_first`` is called with the count of the first messages read, as
        they are read (to sample what the process making them has spent by then)."""
        deadline = time.monotonic() + timeout_s
        seen, first, last = 0, 0.0, 0.0
        values: list[bytes] = []
        read_at: list[float] = []
        while seen < n:
            if callable(alive) and not alive():
                raise RuntimeError(f"{seen} of {n} messages on {self.topic}: the process making them stopped")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{seen} of {n} messages on {self.topic} in {timeout_s:g} s")
            got = [m for m in self._consumer.consume(1000, timeout=0.05) if m.error() is None]
            if got:
                now = time.perf_counter()
                if not first and on_first is not None:
                    on_first(len(got))
                first = first or now
                last = now
                seen += len(got)
                if keep:
                    values += [m.value() or b"" for m in got]
                    read_at += [now] * len(got)
        return Timed(seen, first, last, values, read_at)

    def close(self) -> None:
        self._consumer.close()
