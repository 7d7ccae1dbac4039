"""The audit test: a forced verdict disagreement is recorded and counted. A real auditor on the real Kafka, S3
and both sandbox backends reads verdicts a test publishes on the verdicts topic: one forged (a failing program
whose verdict claims every hidden case passed, as a broken verifier would say), one honest from each backend.
The forged one is re-graded on the other backend and recorded as a disagreement; the honest ones agree."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from bus.clients import make_producer
from bus.metrics import WorkerMetrics
from schemas.audits import AuditEvent
from schemas.codec import decode, encode
from schemas.errors import RewardstreamError
from schemas.events import HiddenCaseResult, HiddenVerdict, SandboxRun
from schemas.settings import Settings
from schemas.tasks import Task
from schemas.topics import catalog, topic_for
from tests.integration.helpers import PARTITIONS
from tests.integration.reward_env import Reader
from workers.artifacts import ArtifactStore
from workers.artifacts import minio_client as make_minio
from workers.audits.service import build_auditor
from workers.roles.service import Dependencies
from workers.sandbox.api import Sandbox
from workers.tasks.registry import TaskRegistry

pytestmark = [pytest.mark.integration, pytest.mark.sandbox, pytest.mark.slow, pytest.mark.timeout(90)]

TASK = Task.model_validate(
    {
        "task_id": "Audit/add",
        "prompt": "def add(a, b):\n",
        "entry_point": "add",
        "public_tests": {"kind": "call", "cases": [{"id": "p1", "args": [1, 2], "expected": 3}]},
        "hidden_tests": {"kind": "call", "cases": [{"id": "h1", "args": [2, 3], "expected": 5},
                                                   {"id": "h2", "args": [0, 0], "expected": 0},
                                                   {"id": "h3", "args": [4, 4], "expected": 8}]},
        "limits": {"timeout_s": 10, "memory_mb": 256},
    }
)  # fmt: skip
RIGHT = "def add(a, b):\n    return a + b\n"
WRONG = "def add(a, b):\n    return a - b\n"  # passes h2 only: 0 - 0 == 0


@pytest.fixture(scope="module")
def docker_sandbox() -> Iterator[Sandbox]:
    """The docker backend (skipped, or failed under CI, when it cannot start)."""
    import os

    from workers.sandbox.factory import make_sandbox

    try:
        sandbox = make_sandbox(Settings(), "docker")
    except RewardstreamError as exc:
        message = f"docker sandbox unavailable ({exc}); run `rewardstream up` to build its image"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    try:
        yield sandbox
    finally:
        sandbox.close()


def verdict(gid: str, code_url: str, backend: str, statuses: tuple[str, str, str]) -> HiddenVerdict:
    cases = [HiddenCaseResult(case_id=f"h{i + 1}", status=s) for i, s in enumerate(statuses)]  # type: ignore[arg-type]
    return HiddenVerdict(
        generation_id=gid, episode_id=gid, run_id="run-audit", task_id=TASK.task_id, worker="verifier:1",
        grader_version="g", suite_kind="call", cases=cases, passed=sum(c.status == "passed" for c in cases),
        total=len(cases), artifacts={"code": code_url},
        run=SandboxRun(status="ok", exit_code=0, wall_ms=1.0, cpu_ms=1.0, max_rss_kb=1, backend=backend),  # type: ignore[arg-type]
    )  # fmt: skip


def test_a_forged_verdict_is_recorded_and_counted_as_a_disagreement(  # noqa: PLR0917 - fixtures
    kafka_config: dict[str, str],
    prefix: str,
    settings: Settings,
    s3_bucket: str,
    tmp_path: Path,
    process_sandbox: Sandbox,
    docker_sandbox: Sandbox,
) -> None:
    TaskRegistry(tmp_path / "registry").store([TASK])
    store = ArtifactStore(make_minio(settings), s3_bucket)
    right, wrong = store.put(RIGHT.encode()).url, store.put(WRONG.encode()).url
    passed3 = ("passed", "passed", "passed")
    verdicts = [
        verdict("forged", wrong, "process", passed3),  # the lie: audited on docker
        verdict("honest-docker", right, "docker", passed3),  # audited on process
        verdict("honest-fail", wrong, "process", ("failed", "passed", "failed")),
    ]
    own = Settings(topic_prefix=prefix, topic_partitions=PARTITIONS, audit_rate=1.0, worker_commit_interval_s=0.1)
    specs = catalog(prefix, PARTITIONS, 1)
    producer = make_producer(kafka_config)
    for v in verdicts:
        producer.produce(topic_for("verdicts", specs).name, key=v.key(), value=encode(v))
    assert producer.flush(30) == 0

    stop, metrics = threading.Event(), WorkerMetrics("auditor")
    deps = Dependencies(registry=TaskRegistry(tmp_path / "registry"), artifacts=store)
    sandboxes = {"process": process_sandbox, "docker": docker_sandbox}
    reader = Reader(kafka_config, topic_for("audits", specs).name)
    failure: list[BaseException] = []

    def run() -> None:
        try:
            with build_auditor(own, stop, metrics, deps, sandboxes=sandboxes) as worker:
                worker.run()
        except BaseException as exc:
            failure.append(exc)
            raise

    thread = threading.Thread(target=run, name="test-auditor", daemon=True)
    thread.start()
    try:
        reader.wait(lambda: len(reader.values) >= len(verdicts) or bool(failure), 75, "three audit events")
    finally:
        stop.set()
        thread.join(timeout=30)
        reader.consumer.close()
    assert not failure, failure
    audits = {a.generation_id: a for a in (decode(value, AuditEvent) for value in reader.values)}
    forged = audits["forged"]
    assert (forged.outcome, forged.kinds) == ("disagree", ["pass_flip", "passed_count"])
    assert (forged.verdict.backend, forged.audit.backend) == ("process", "docker")
    assert (forged.audit.passed, forged.audit.total) == (1, 3)
    assert {c.case_id for c in forged.differing_cases} == {"h1", "h3"}
    assert audits["honest-docker"].outcome == "agree"
    assert audits["honest-docker"].audit.backend == "process"
    assert audits["honest-fail"].outcome == "agree"

    def count(name: str, **labels: str) -> float | None:
        return metrics.registry.get_sample_value(name, labels)

    assert count("rewardstream_audit_disagreements_total", dataset="Audit", kind="pass_flip") == 1
    assert count("rewardstream_audits_total", dataset="Audit", backend="docker", outcome="disagree") == 1
    assert count("rewardstream_audits_total", dataset="Audit", backend="process", outcome="agree") == 1
    assert count("rewardstream_audits_total", dataset="Audit", backend="docker", outcome="agree") == 1
