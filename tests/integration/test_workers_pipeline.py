"""Executor, verifier and judge workers on real Kafka, S3 and sandbox: 1,000 generations, logs, dead letters."""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from typing import Any

import pytest

from schemas.codec import decode, encode
from schemas.events import DeadLetter, ExecutionResult, GenerationEvent, HiddenVerdict, JudgeScore, LogRecord
from schemas.settings import Settings
from schemas.topics import catalog, topic_for
from tests.integration.helpers import PARTITIONS, start_workers, stop_workers
from tests.integration.workers_pipeline_env import HumanEval, Reader, generation, publish, wrong_code
from workers.roles.service import Dependencies
from workers.sandbox.api import Sandbox

pytestmark = [pytest.mark.integration, pytest.mark.sandbox, pytest.mark.slow]


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
