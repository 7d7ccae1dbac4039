"""Result events name their artifacts, and the artifacts are in S3: real executor and verifier workers on the
real Kafka, S3 (through the minio SDK) and process sandbox.

The S3 outage goes through a TCP relay in front of the shared S3 that the test closes and reopens (on a free
port below the ephemeral range, so no client connection can take it while it is closed): the shared service
itself is never stopped.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import Consumer

from bus.clients import make_consumer, make_producer
from schemas.codec import decode, encode
from schemas.events import OUTPUT_TAIL_MAX_CHARS, ExecutionResult, GenerationEvent, HiddenVerdict
from schemas.settings import Settings
from schemas.tasks import Task
from schemas.topics import catalog, topic_for
from tests.integration.helpers import PARTITIONS, start_workers, stop_workers
from tests.integration.relay import Relay
from workers.artifacts import ArtifactStore
from workers.artifacts import minio_client as make_minio
from workers.loop_config import WorkerStats
from workers.roles.service import Dependencies
from workers.sandbox.api import Sandbox
from workers.tasks.registry import TaskRegistry

pytestmark = [pytest.mark.integration, pytest.mark.sandbox, pytest.mark.slow]

HIDDEN_EXPECTED = 987654321  # a value that must never appear in any artifact
TASK = Task.model_validate(
    {
        "task_id": "Artifacts/add",
        "prompt": "def add(a, b):\n",
        "entry_point": "add",
        "public_tests": {"kind": "call", "cases": [{"id": "p1", "args": [1, 2], "expected": 3},
                                                   {"id": "p2", "args": [2, 2], "expected": 4}]},
        "hidden_tests": {"kind": "call", "cases": [{"id": "h1", "args": [987654320, 1], "expected": HIDDEN_EXPECTED},
                                                   {"id": "h2", "args": [5, 5], "expected": 11}]},
        "limits": {"timeout_s": 10, "memory_mb": 256},
    }
)  # fmt: skip
#: Prints 3 x 9 KB plus a marker line per call: far over the inline cap (8 KiB), under the harness cap (1 MiB).
LOUD = (
    "import sys\n"
    "print('module loaded')\n"
    "def add(a, b):\n"
    "    for i in range(3):\n"
    "        print(f'{a}+{b} chunk {i} ' + 'x' * 9000)\n"
    "    print('done', a + b)\n"
    "    sys.stderr.write(f'debug {a} {b}\\n')\n"
    "    return a + b\n"
)
QUIET = "def add(a, b):\n    print('hi')\n    return a + b\n"


def loud_stdout(args: list[tuple[int, int]]) -> str:
    """What LOUD prints, byte for byte, for these calls (in order)."""
    out = "module loaded\n"
    for a, b in args:
        out += "".join(f"{a}+{b} chunk {i} " + "x" * 9000 + "\n" for i in range(3)) + f"done {a + b}\n"
    return out


@pytest.fixture
def registry_dir(tmp_path: Path) -> Path:
    path = tmp_path / "registry"
    TaskRegistry(path).store([TASK])
    return path


class Results:
    """A read_committed reader of result topics from the beginning, keyed by generation id."""

    def __init__(self, kafka_config: dict[str, str], topics: list[str]) -> None:
        self.consumer: Consumer = make_consumer(kafka_config, f"reader-{uuid.uuid4().hex}")
        self.consumer.subscribe(topics)
        self.values: dict[str, list[bytes]] = {t: [] for t in topics}

    def poll(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for msg in self.consumer.consume(100, timeout=0.2):
                if msg.error() is None and msg.value() is not None:
                    self.values[msg.topic() or "?"].append(msg.value() or b"")

    def wait_for(self, topic: str, count: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while len(self.values[topic]) < count:
            assert time.monotonic() < deadline, f"{len(self.values[topic])}/{count} results on {topic}"
            self.poll(0.5)

    def close(self) -> None:
        self.consumer.close()


def publish(kafka_config: dict[str, str], topic: str, events: list[GenerationEvent]) -> None:
    producer = make_producer(kafka_config)
    for ev in events:
        producer.produce(topic, key=ev.key(), value=encode(ev))
    assert producer.flush(30) == 0


def generation(gid: str, code: str) -> GenerationEvent:
    return GenerationEvent(generation_id=gid, episode_id=gid, run_id="run-artifacts", task_id=TASK.task_id,
                           policy_version="step-1", code=code)  # fmt: skip


def wait_until(what: str, check: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.05)


@dataclass(frozen=True)
class Rig:
    """Topics, a registry with TASK, the process sandbox and a bucket the worker must create."""

    prefix: str
    registry_dir: Path
    sandbox: Sandbox
    bucket: str

    def settings(self, **extra: Any) -> Settings:
        return Settings(topic_prefix=self.prefix, topic_partitions=PARTITIONS, tasks_dir=self.registry_dir,
                        s3_bucket=self.bucket, worker_concurrency=2, **extra)  # fmt: skip


@pytest.fixture
def rig(prefix: str, registry_dir: Path, process_sandbox: Sandbox, fresh_bucket: str) -> Rig:
    return Rig(prefix, registry_dir, process_sandbox, fresh_bucket)


def test_results_name_their_artifacts_and_s3_has_them(
    rig: Rig, kafka_config: dict[str, str], minio_client: Any
) -> None:
    prefix, process_sandbox, fresh_bucket = rig.prefix, rig.sandbox, rig.bucket
    settings = rig.settings()
    specs = catalog(prefix, PARTITIONS, 1)
    executions, verdicts = topic_for("executions", specs).name, topic_for("verdicts", specs).name
    reader = Results(kafka_config, [executions, verdicts])
    stop, threads, _metrics, outcome = start_workers(
        settings, ["executor", "verifier"], Dependencies(sandbox=process_sandbox)
    )
    try:
        publish(kafka_config, topic_for("generations", specs).name,
                [generation("loud", LOUD), generation("quiet", QUIET)])  # fmt: skip
        reader.wait_for(executions, 2, 120)
        reader.wait_for(verdicts, 2, 120)
    finally:
        stop_workers(stop, threads)
        reader.close()
    assert all(isinstance(o, WorkerStats) for o in outcome.values()), outcome
    assert minio_client.bucket_exists(fresh_bucket), "the worker did not create its bucket on start"
    store = ArtifactStore(make_minio(Settings()), fresh_bucket)
    results = {r.generation_id: r for r in (decode(v, ExecutionResult) for v in reader.values[executions])}
    hidden = {v.generation_id: v for v in (decode(x, HiddenVerdict) for x in reader.values[verdicts])}
    assert set(results) == set(hidden) == {"loud", "quiet"}

    loud = results["loud"]
    assert loud.run.status == "ok", loud.run
    assert (loud.passed, loud.total) == (2, 2)
    full = loud_stdout([(1, 2), (2, 2)])  # the public run only: the hidden run's output is nobody's business
    assert len(full) > OUTPUT_TAIL_MAX_CHARS
    assert loud.stdout_truncated
    assert loud.stdout == full[-OUTPUT_TAIL_MAX_CHARS:]
    assert (loud.stderr, loud.stderr_truncated) == ("debug 1 2\ndebug 2 2\n", False)
    assert set(loud.artifacts) == {"code", "cases", "stdout"}
    assert store.get(loud.artifacts["stdout"]) == full.encode(), "the stored stdout is not the full output"
    assert store.get(loud.artifacts["code"]) == LOUD.encode()
    assert orjson.loads(store.get(loud.artifacts["cases"])) == [c.model_dump(mode="json") for c in loud.cases]
    assert "987654320" not in full, "the hidden run's output reached the executor's result"

    quiet = results["quiet"]
    assert (quiet.stdout, quiet.stdout_truncated) == ("hi\nhi\n", False)
    assert set(quiet.artifacts) == {"code", "cases"}, "output that is fully inline is not stored again"
    assert quiet.artifacts["code"].endswith(hashlib.sha256(QUIET.encode()).hexdigest())

    for gid, verdict in hidden.items():
        assert set(verdict.artifacts) == {"code", "cases"}
        assert verdict.artifacts["code"] == results[gid].artifacts["code"], "the same code is one object"
        blob = store.get(verdict.artifacts["cases"])
        assert orjson.loads(blob) == [{"case_id": c.case_id, "status": c.status} for c in verdict.cases]
        assert str(HIDDEN_EXPECTED).encode() not in blob
        assert b"987654320" not in blob
    assert hidden["loud"].passed == 1  # h2 expects 11 from 5 + 5


def test_s3_outage_delays_results_and_loses_none(
    rig: Rig, kafka_config: dict[str, str], minio_client: Any, relay: Relay
) -> None:
    prefix, process_sandbox, fresh_bucket = rig.prefix, rig.sandbox, rig.bucket
    settings = rig.settings(s3_endpoint=f"127.0.0.1:{relay.port}")
    specs = catalog(prefix, PARTITIONS, 1)
    executions = topic_for("executions", specs).name
    reader = Results(kafka_config, [executions])
    # S3 is down when the worker starts: creating its bucket waits (retried) until S3 is back.
    stop, threads, metrics, outcome = start_workers(settings, ["executor"], Dependencies(sandbox=process_sandbox))
    m = metrics["executor"]

    def s3_retries() -> float:
        return m.value("rewardstream_retries_total", dependency="s3")

    try:
        wait_until("the bucket creation is retried", lambda: s3_retries() >= 2, 60)
        assert not minio_client.bucket_exists(fresh_bucket)
        relay.open()
        wait_until("the worker created its bucket", lambda: minio_client.bucket_exists(fresh_bucket), 60)

        # S3 goes down while generations are graded: results wait for their uploads, uncommitted.
        relay.close()
        before = s3_retries()
        events = [generation(f"g{i}", LOUD if i % 2 else QUIET.replace("hi", f"hi {i}")) for i in range(6)]
        publish(kafka_config, topic_for("generations", specs).name, events)
        wait_until("uploads are retried", lambda: s3_retries() >= before + 4, 120)
        reader.poll(1.0)
        assert reader.values[executions] == [], "a result was committed before its artifacts were stored"
        retried = s3_retries() - before
        relay.open()
        back = time.monotonic()
        reader.wait_for(executions, len(events), 180)
        print(f"S3 outage: {retried:.0f} upload retries while down; all {len(events)} results "
              f"{time.monotonic() - back:.1f}s after S3 was back")  # fmt: skip
    finally:
        stop_workers(stop, threads)
        reader.close()
    assert isinstance(outcome["executor"], WorkerStats), outcome
    results = [decode(v, ExecutionResult) for v in reader.values[executions]]
    assert sorted(r.generation_id for r in results) == sorted(e.generation_id for e in events), "lost or duplicated"
    store = ArtifactStore(make_minio(Settings()), fresh_bucket)
    for result in results:
        assert result.run.status == "ok", result.run
        assert result.passed == result.total == 2
        assert {"code", "cases"} <= set(result.artifacts)
        for url in result.artifacts.values():
            assert store.get(url)  # there, and matching its digest
        if "stdout" in result.artifacts:
            assert store.get(result.artifacts["stdout"]) == loud_stdout([(1, 2), (2, 2)]).encode()


def test_stop_during_an_s3_outage_leaves_the_work_to_the_next_worker(
    rig: Rig, kafka_config: dict[str, str], minio_client: Any, relay: Relay
) -> None:
    settings = rig.settings(s3_endpoint=f"127.0.0.1:{relay.port}")
    specs = catalog(rig.prefix, PARTITIONS, 1)
    executions = topic_for("executions", specs).name
    reader = Results(kafka_config, [executions])
    relay.open()
    events = [generation(f"s{i}", QUIET.replace("hi", f"hi {i}")) for i in range(4)]
    try:
        stop, threads, metrics, outcome = start_workers(settings, ["executor"], Dependencies(sandbox=rig.sandbox))
        try:
            wait_until("the worker created its bucket", lambda: minio_client.bucket_exists(rig.bucket), 60)
            relay.close()
            publish(kafka_config, topic_for("generations", specs).name, events)
            m = metrics["executor"]
            wait_until("uploads are retried", lambda: m.value("rewardstream_retries_total", dependency="s3") >= 4, 120)
        finally:
            stop_workers(stop, threads)  # S3 still down: the stop ends the retrying
        assert isinstance(outcome["executor"], WorkerStats), f"the stop was not clean: {outcome}"
        reader.poll(1.0)
        assert reader.values[executions] == [], "a result was committed without its artifacts"

        relay.open()
        stop, threads, _metrics, outcome = start_workers(settings, ["executor"], Dependencies(sandbox=rig.sandbox))
        try:
            reader.wait_for(executions, len(events), 180)
        finally:
            stop_workers(stop, threads)
        assert isinstance(outcome["executor"], WorkerStats), outcome
    finally:
        reader.close()
    results = [decode(v, ExecutionResult) for v in reader.values[executions]]
    assert sorted(r.generation_id for r in results) == sorted(e.generation_id for e in events), "lost or duplicated"
    store = ArtifactStore(make_minio(Settings()), rig.bucket)
    for result in results:
        assert store.get(result.artifacts["code"]).decode().startswith("def add")
