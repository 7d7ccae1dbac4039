"""Executor workers killed with -9 or drained by SIGTERM: still exactly one result per generation."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from schemas.codec import decode, encode
from schemas.events import ExecutionResult
from schemas.topics import catalog, topic_for
from tests.integration.helpers import PARTITIONS
from tests.integration.workers_pipeline_env import HumanEval, Reader, generation, publish, wrong_code

pytestmark = [pytest.mark.integration, pytest.mark.sandbox, pytest.mark.slow]


# ---- kill -9 one of two executor processes ----------------------------------------------------------------

KILL_GENERATIONS = 400


def _spawn_executor(prefix: str, humaneval: HumanEval, bucket: str, log: Path) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "RS_TOPIC_PREFIX": prefix,
        "RS_TOPIC_PARTITIONS": str(PARTITIONS),
        "RS_TASKS_DIR": str(humaneval.registry_dir),
        "RS_S3_BUCKET": bucket,
        "RS_METRICS_PORT": "0",
        "RS_WORKER_TRANSACTION_TIMEOUT_MS": "10000",
        "RS_WORKER_DRAIN_TIMEOUT_S": "20",
    }
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "rewardstream", "worker", "executor", "--concurrency", "2"],
            env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip


def _scrape(log: Path) -> str:
    """GET the worker's /metrics (its URL is the first line the worker prints)."""
    import re
    import urllib.request

    match = re.search(r"metrics on (http://\S+/metrics)", log.read_text(errors="replace"))
    assert match, log.read_text(errors="replace")[-2000:]
    with urllib.request.urlopen(match.group(1), timeout=5) as response:  # noqa: S310 (loopback URL)
        return str(response.read().decode())


def _wait_for_members(kafka_config: dict[str, str], group: str, n: int, logs: Callable[[], str]) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({**kafka_config})
    deadline = time.monotonic() + 120
    while True:
        try:
            described = admin.describe_consumer_groups([group])[group].result(timeout=10)
            members, state = len(described.members), str(described.state)
        except Exception as exc:  # the group does not exist until the first member joins
            members, state = 0, repr(exc)
        if members == n and state.endswith("STABLE"):
            return
        assert time.monotonic() < deadline, f"group {group}: {members} members, {state}\n{logs()}"
        time.sleep(0.2)


@pytest.mark.timeout(600)
def test_kill_9_one_of_two_executors_still_exactly_one_result_each(
    prefix: str, humaneval: HumanEval, kafka_config: dict[str, str], s3_bucket: str, tmp_path: Path
) -> None:
    problems = humaneval.problems
    events = [
        generation(i, problems[i % len(problems)],
                   problems[i % len(problems)].reference_code if i % 3 else wrong_code(problems[i % len(problems)]))
        for i in range(KILL_GENERATIONS)
    ]  # fmt: skip
    specs = catalog(prefix, PARTITIONS, 1)
    executions = topic_for("executions", specs).name
    reader = Reader(kafka_config, [executions])
    procs = [_spawn_executor(prefix, humaneval, s3_bucket, tmp_path / f"executor-{n}.log") for n in range(2)]

    def logs() -> str:
        return "\n".join((tmp_path / f"executor-{n}.log").read_text(errors="replace")[-3000:] for n in range(2))

    def by_worker() -> Counter[str]:
        return Counter(decode(m.value() or b"", ExecutionResult).worker for m in reader.messages[executions])

    try:
        # Both executors in the group before any work exists, so both own partitions when the kill comes.
        _wait_for_members(kafka_config, f"{prefix}executor", 2, logs)
        publish(kafka_config, topic_for("generations", specs).name, [(ev.key(), encode(ev)) for ev in events])
        reader.poll_until(lambda: reader.count(executions) >= KILL_GENERATIONS // 4 and len(by_worker()) == 2, 240,
                          lambda: f"{by_worker()} results before the kill\n{logs()}")  # fmt: skip
        victim = procs[0]
        assert victim.poll() is None, logs()
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=30)
        killed_at = reader.count(executions)
        assert killed_at < KILL_GENERATIONS, "everything was done before the kill"
        reader.poll_until(
            lambda: len({m.key() for m in reader.messages[executions]}) >= KILL_GENERATIONS,
            300, lambda: f"{len({m.key() for m in reader.messages[executions]})} distinct results\n{logs()}",
        )  # fmt: skip
        survivor = procs[1]
        assert survivor.poll() is None, logs()
        metrics = _scrape(tmp_path / "executor-1.log")
        assert 'rewardstream_processed_total{role="executor"}' in metrics
        assert 'rewardstream_in_flight{role="executor"}' in metrics
        assert "rewardstream_run_seconds_bucket" in metrics
        survivor.send_signal(signal.SIGTERM)
        assert survivor.wait(timeout=60) == 0, logs()
        reader.poll_until(reader.at_end, 60, lambda: "the end of the executions topic")
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
        reader.close()
    results = [decode(m.value() or b"", ExecutionResult) for m in reader.messages[executions]]
    counts = Counter(r.generation_id for r in results)
    assert set(counts) == {ev.generation_id for ev in events}, "a generation was lost"
    duplicates = {g: n for g, n in counts.items() if n > 1}
    assert not duplicates, f"committed duplicates: {duplicates}"
    workers = Counter(r.worker for r in results)
    assert len(workers) == 2, workers  # both executors committed results
    print(f"\nkill -9 after {killed_at} of {KILL_GENERATIONS} results: {len(results)} committed, 0 duplicates, "
          f"by worker {dict(workers)}")  # fmt: skip


@pytest.mark.timeout(600)
def test_sigterm_drains_in_flight_runs_and_a_restart_finishes_exactly_once(
    prefix: str, humaneval: HumanEval, kafka_config: dict[str, str], s3_bucket: str, tmp_path: Path
) -> None:
    problems = humaneval.problems
    events = [generation(i, problems[i % len(problems)], problems[i % len(problems)].reference_code)
              for i in range(300)]  # fmt: skip
    specs = catalog(prefix, PARTITIONS, 1)
    executions = topic_for("executions", specs).name
    publish(kafka_config, topic_for("generations", specs).name, [(ev.key(), encode(ev)) for ev in events])
    reader = Reader(kafka_config, [executions])
    first = _spawn_executor(prefix, humaneval, bucket=s3_bucket, log=tmp_path / "first.log")
    second: subprocess.Popen[bytes] | None = None
    try:
        reader.poll_until(lambda: reader.count(executions) >= 50, 240,
                          lambda: f"{reader.count(executions)} results before SIGTERM")  # fmt: skip
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=30) == 0, (tmp_path / "first.log").read_text()[-3000:]
        stopped = (tmp_path / "first.log").read_text()
        assert "executor: stopped; committed" in stopped
        assert "did not finish within the drain deadline" not in stopped
        at_stop = reader.count(executions)
        assert at_stop < len(events), "the first worker finished everything before SIGTERM; nothing to resume"
        second = _spawn_executor(prefix, humaneval, bucket=s3_bucket, log=tmp_path / "second.log")

        def distinct() -> int:
            return len({m.key() for m in reader.messages[executions]})

        reader.poll_until(lambda: distinct() >= len(events), 300, lambda: f"{distinct()} distinct results")
        second.send_signal(signal.SIGTERM)
        assert second.wait(timeout=60) == 0
        reader.poll_until(reader.at_end, 60, lambda: "the end of the executions topic")
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
        reader.close()
    counts = Counter(decode(m.value() or b"", ExecutionResult).generation_id for m in reader.messages[executions])
    assert set(counts) == {ev.generation_id for ev in events}
    assert max(counts.values()) == 1
    print(f"\nSIGTERM after {at_stop} of {len(events)} results: drained, exit 0; a new worker finished the rest once")
