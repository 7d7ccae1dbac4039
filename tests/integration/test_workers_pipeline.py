"""Executor, verifier and judge workers against the real Kafka, S3 and process sandbox.

HumanEval tasks are built once per module with the converter (canonical solutions run in the sandbox) and
loaded into a temporary registry. Every test uses its own topic prefix, consumer groups and bucket.
Figures are printed; run with ``-s`` to see them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Message, TopicPartition

from bus.clients import make_consumer, make_producer
from schemas.codec import decode, encode
from schemas.events import DeadLetter, ExecutionResult, GenerationEvent, HiddenVerdict, JudgeScore, LogRecord
from schemas.settings import Settings
from schemas.tasks import Task
from schemas.topics import catalog, topic_for
from tests.integration.helpers import PARTITIONS, start_workers, stop_workers
from workers.roles.service import Dependencies
from workers.sandbox.api import Sandbox
from workers.tasks.humaneval import Problem
from workers.tasks.registry import TaskRegistry

pytestmark = [pytest.mark.integration, pytest.mark.sandbox, pytest.mark.slow]


@dataclass(frozen=True)
class HumanEval:
    problems: list[Problem]
    tasks: dict[str, Task]
    registry_dir: Path


@pytest.fixture(scope="module")
def humaneval(process_sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> HumanEval:
    """All 164 HumanEval problems converted by the converter and loaded into a temporary registry."""
    from workers.tasks.humaneval import SandboxReference, convert_all, load_problems

    problems = load_problems()
    tasks, _ = convert_all(problems, SandboxReference(process_sandbox), workers=2)
    registry_dir = tmp_path_factory.mktemp("registry")
    TaskRegistry(registry_dir).store(tasks)
    return HumanEval(problems, {t.task_id: t for t in tasks}, registry_dir)


def wrong_code(problem: Problem) -> str:
    """A plausible-looking wrong answer: the signature and docstring, no solution."""
    return problem.prompt + "    raise NotImplementedError\n"


def generation(i: int, problem: Problem, code: str, *, episode: str | None = None, turn: int = 0) -> GenerationEvent:
    return GenerationEvent(
        generation_id=f"g{i}", episode_id=episode or f"g{i}", run_id="run-1", task_id=problem.task_id,
        policy_version="step-1", code=code, turn=turn,
    )  # fmt: skip


def publish(
    kafka_config: dict[str, str], topic: str, values: list[tuple[bytes | None, bytes]]
) -> list[tuple[int, int]]:
    """Produce in order; return each message's (partition, offset) from its delivery report."""
    producer = make_producer(kafka_config)
    offsets: list[tuple[int, int]] = [(-1, -1)] * len(values)

    def delivered(index: int) -> Callable[[object, Message], None]:
        def callback(err: object, msg: Message) -> None:
            assert err is None, err
            offsets[index] = (msg.partition() or 0, msg.offset() or 0)

        return callback

    for i, (key, value) in enumerate(values):
        producer.produce(topic, key=key, value=value, on_delivery=delivered(i))
        producer.poll(0)
    assert producer.flush(30) == 0
    return offsets


class Reader:
    """A read_committed consumer over result topics, from the beginning; keeps every message in order."""

    def __init__(self, kafka_config: dict[str, str], topics: list[str]) -> None:
        self.consumer: Consumer = make_consumer(kafka_config, f"reader-{uuid.uuid4().hex}")
        self.consumer.subscribe(topics)
        self.messages: dict[str, list[Message]] = defaultdict(list)

    def poll_until(self, done: Callable[[], bool], timeout_s: float, what: Callable[[], str]) -> None:
        deadline = time.monotonic() + timeout_s
        while not done():
            assert time.monotonic() < deadline, f"timed out waiting for {what()}"
            for msg in self.consumer.consume(500, timeout=0.2):
                if msg.error() is None:
                    self.messages[msg.topic() or "?"].append(msg)

    def at_end(self) -> bool:
        """Every assigned partition read up to its high watermark (= the last stable offset once no
        transaction is open, since this consumer is read_committed)."""
        assignment = self.consumer.assignment()
        if not assignment:
            return False
        for tp in self.consumer.position(assignment):
            _low, high = self.consumer.get_watermark_offsets(TopicPartition(tp.topic, tp.partition), timeout=10)
            if tp.offset < high and not (tp.offset < 0 and high == 0):
                return False
        return True

    def count(self, topic: str) -> int:
        return len(self.messages[topic])

    def close(self) -> None:
        self.consumer.close()


def settings_for(prefix: str, humaneval: HumanEval, bucket: str, **extra: Any) -> Settings:
    return Settings(
        topic_prefix=prefix, topic_partitions=PARTITIONS, tasks_dir=humaneval.registry_dir, s3_bucket=bucket,
        worker_concurrency=2, **extra,
    )  # fmt: skip


def check_verdicts(verdicts: list[HiddenVerdict], canonical: dict[str, bool]) -> None:
    for v in verdicts:
        assert v.run.status != "sandbox_error", v
        if canonical[v.generation_id]:
            assert v.total > 0, v
            assert v.passed == v.total, f"canonical {v.task_id} failed hidden tests: {v}"
        else:
            assert v.passed < v.total, f"wrong solution passed {v.task_id}"


def check_executions(
    executions: list[ExecutionResult], canonical: dict[str, bool], by_id: dict[str, GenerationEvent]
) -> None:
    for x in executions:
        assert x.run.status != "sandbox_error", x
        assert x.turn == by_id[x.generation_id].turn
        if canonical[x.generation_id]:
            assert x.passed == x.total, f"canonical {x.task_id} failed public tests: {x.feedback}"
        elif x.total:
            assert x.passed < x.total
            assert x.feedback
            assert "public tests passed" in x.feedback


def check_scores(scores: list[JudgeScore], canonical: dict[str, bool], by_id: dict[str, GenerationEvent]) -> None:
    """Every score is ok; per task, every canonical solution scores above every stub."""
    assert all(s.status == "ok" and s.score is not None for s in scores)
    by_task: dict[str, tuple[list[float], list[float]]] = defaultdict(lambda: ([], []))
    for s in scores:
        by_task[s.task_id][0 if canonical[s.generation_id] else 1].append(s.score or 0.0)
    for task_id, (good, bad) in by_task.items():
        if good and bad:
            assert min(good) > max(bad), task_id
    assert {by_id[s.generation_id].task_id for s in scores} == set(by_task)


# ---- 1,000 generations, three roles -----------------------------------------------------------------------

GENERATIONS = 1000
EPISODES = 25  # the last 100 generations: 25 episodes of 4 turns (three wrong, then the canonical solution)
TURNS = 4


@pytest.mark.timeout(900)
def test_thousand_generations_exactly_one_correct_result_per_role(
    prefix: str, humaneval: HumanEval, process_sandbox: Sandbox, kafka_config: dict[str, str], s3_bucket: str
) -> None:
    problems = humaneval.problems
    events: list[GenerationEvent] = []
    canonical: dict[str, bool] = {}
    one_shot = GENERATIONS - EPISODES * TURNS
    for i in range(one_shot):
        problem = problems[i % len(problems)]
        good = (i + i // len(problems)) % 2 == 0  # every problem gets both kinds over the run
        events.append(generation(i, problem, problem.reference_code if good else wrong_code(problem)))
        canonical[f"g{i}"] = good
    for e in range(EPISODES):
        problem = problems[(7 * e) % len(problems)]
        for turn in range(TURNS):
            i = one_shot + e * TURNS + turn
            good = turn == TURNS - 1
            code = problem.reference_code if good else wrong_code(problem)
            events.append(generation(i, problem, code, episode=f"ep{e}", turn=turn))
            canonical[f"g{i}"] = good
    by_id = {ev.generation_id: ev for ev in events}
    specs = catalog(prefix, PARTITIONS, 1)
    names = {r: topic_for(r, specs).name for r in ("generations", "executions", "verdicts", "judgements", "dlq")}
    publish(kafka_config, names["generations"], [(ev.key(), encode(ev)) for ev in events])

    settings = settings_for(prefix, humaneval, s3_bucket)
    deps = Dependencies(sandbox=process_sandbox)
    reader = Reader(kafka_config, [names["executions"], names["verdicts"], names["judgements"]])
    started = time.monotonic()
    stop, threads, _metrics, outcome = start_workers(settings, ["executor", "verifier", "judge"], deps)
    try:
        results = (names["executions"], names["verdicts"], names["judgements"])
        reader.poll_until(
            lambda: all(reader.count(t) >= GENERATIONS for t in results) or len(outcome) > 0,
            780,
            lambda: f"results {[reader.count(t) for t in results]} of {GENERATIONS}",
        )
        elapsed = time.monotonic() - started
        assert not outcome, f"a worker stopped early: {outcome}"
    finally:
        stop_workers(stop, threads)
    reader.poll_until(reader.at_end, 60, lambda: "the end of the result topics")
    reader.close()

    executions = [decode(m.value() or b"", ExecutionResult) for m in reader.messages[names["executions"]]]
    verdicts = [decode(m.value() or b"", HiddenVerdict) for m in reader.messages[names["verdicts"]]]
    scores = [decode(m.value() or b"", JudgeScore) for m in reader.messages[names["judgements"]]]
    for kind, got in (("executions", executions), ("verdicts", verdicts), ("judgements", scores)):
        counts = Counter(r.generation_id for r in got)
        assert len(got) == GENERATIONS, f"{kind}: {len(got)} results for {GENERATIONS} generations"
        assert set(counts) == set(by_id), f"{kind}: missing results"
        assert max(counts.values()) == 1, f"{kind}: duplicates"
    check_verdicts(verdicts, canonical)
    check_executions(executions, canonical, by_id)
    check_scores(scores, canonical, by_id)

    # Per-episode order: on the executions topic, every episode's turns appear as 0, 1, 2, 3.
    turns: dict[str, list[int]] = defaultdict(list)
    for x in executions:
        if x.episode_id.startswith("ep"):
            turns[x.episode_id].append(x.turn)
    assert len(turns) == EPISODES
    assert all(t == list(range(TURNS)) for t in turns.values()), turns

    print(
        f"\n{GENERATIONS} generations through executor + verifier + judge (process sandbox, concurrency 2 each, "
        f"{PARTITIONS} partitions): {elapsed:.1f}s = {GENERATIONS / elapsed:.1f} generations/s per role"
    )


def test_each_run_logs_one_record_with_artifacts(
    prefix: str, humaneval: HumanEval, process_sandbox: Sandbox, kafka_config: dict[str, str], s3_bucket: str
) -> None:
    problems = humaneval.problems[:20]
    events = [generation(i, p, p.reference_code) for i, p in enumerate(problems)]
    specs = catalog(prefix, PARTITIONS, 1)
    publish(kafka_config, topic_for("generations", specs).name, [(ev.key(), encode(ev)) for ev in events])
    logs_topic = topic_for("logs", specs).name
    reader = Reader(kafka_config, [logs_topic])
    stop, threads, _metrics, outcome = start_workers(
        settings_for(prefix, humaneval, s3_bucket), ["executor", "verifier"], Dependencies(sandbox=process_sandbox)
    )
    try:
        reader.poll_until(lambda: reader.count(logs_topic) >= 2 * len(events) or len(outcome) > 0, 120,
                          lambda: f"{reader.count(logs_topic)} log records")  # fmt: skip
    finally:
        stop_workers(stop, threads)
    reader.close()
    records = [decode(m.value() or b"", LogRecord) for m in reader.messages[logs_topic]]
    assert Counter((r.component, r.generation_id) for r in records) == Counter(
        {(role, ev.generation_id): 1 for role in ("executor", "verifier") for ev in events}
    )
    from workers.artifacts import ArtifactStore, minio_client

    store = ArtifactStore(minio_client(Settings()), s3_bucket)
    for record in records:
        assert record.topic == topic_for("generations", specs).name
        assert record.offset is not None
        assert record.fields["status"] == "ok"
        assert record.fields["backend"] == "process"
        assert isinstance(record.fields["wall_ms"], float)
        code_url = record.fields["code_url"]
        assert isinstance(code_url, str)
        code = store.get(code_url).decode()
        assert code == next(ev.code for ev in events if ev.generation_id == record.generation_id)
        cases_url = record.fields["cases_url"]
        assert isinstance(cases_url, str)
        assert store.get(cases_url).startswith(b"[")


# ---- invalid events --------------------------------------------------------------------------------------


def test_invalid_events_go_to_the_dlq_with_their_source_and_reason(
    prefix: str, humaneval: HumanEval, process_sandbox: Sandbox, kafka_config: dict[str, str], s3_bucket: str
) -> None:
    problems = humaneval.problems[:12]
    valid = [generation(i, p, p.reference_code) for i, p in enumerate(problems)]
    unknown_task = GenerationEvent(generation_id="bad-task", episode_id="bad-task", run_id="r", task_id="No/such",
                                   policy_version="p", code="def f(): pass\n")  # fmt: skip
    invalid: list[tuple[bytes | None, bytes, str]] = [
        (b"k1", b"\x00\xffnot json at all", "DecodeError"),
        (b"k2", b'{"schema_version": "1.0", "generation_id": "x"}', "DecodeError"),
        (b"k3", encode(valid[0]).replace(b'"schema_version":"1.0"', b'"schema_version":"9.0"'), "DecodeError"),
        (
            b"k4",
            b'{"generation_id": "g", "episode_id": "g", "run_id": "r", "task_id": "t", "policy_version": "p"}',
            "DecodeError",
        ),
        (unknown_task.key(), encode(unknown_task), "UnknownTaskError"),
    ]
    values: list[tuple[bytes | None, bytes]] = []
    kinds: list[str | None] = []
    for i, ev in enumerate(valid):
        values.append((ev.key(), encode(ev)))
        kinds.append(None)
        if i < len(invalid):
            key, value, error_type = invalid[i]
            values.append((key, value))
            kinds.append(error_type)
    specs = catalog(prefix, PARTITIONS, 1)
    generations, dlq = topic_for("generations", specs).name, topic_for("dlq", specs).name
    executions = topic_for("executions", specs).name
    offsets = publish(kafka_config, generations, values)

    reader = Reader(kafka_config, [dlq, executions])
    stop, threads, _metrics, outcome = start_workers(
        settings_for(prefix, humaneval, s3_bucket), ["executor"], Dependencies(sandbox=process_sandbox)
    )
    try:
        reader.poll_until(
            lambda: (reader.count(dlq) >= len(invalid) and reader.count(executions) >= len(valid)) or len(outcome) > 0,
            120, lambda: f"{reader.count(dlq)} dead letters, {reader.count(executions)} results",
        )  # fmt: skip
    finally:
        stop_workers(stop, threads)
    reader.poll_until(reader.at_end, 60, lambda: "the end of dlq/executions")
    reader.close()

    letters = [decode(m.value() or b"", DeadLetter) for m in reader.messages[dlq]]
    assert len(letters) == len(invalid)
    expected = {offsets[i]: (values[i], kind) for i, kind in enumerate(kinds) if kind is not None}
    for letter, msg in zip(letters, reader.messages[dlq], strict=True):
        assert letter.source_topic == generations
        assert letter.component == "executor"
        (key, value), kind = expected[(letter.source_partition, letter.source_offset)]
        assert letter.payload() == value
        assert letter.original_key() == key
        assert msg.key() == key
        assert letter.error_type == kind
        assert letter.error
    assert "No/such" in next(x.error for x in letters if x.error_type == "UnknownTaskError")
    assert "schema_version" in next(x.error for x in letters if "9.0" in x.payload().decode(errors="replace"))
    results = [decode(m.value() or b"", ExecutionResult) for m in reader.messages[executions]]
    assert sorted(r.generation_id for r in results) == sorted(ev.generation_id for ev in valid)
    assert all(r.passed == r.total for r in results)


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
