"""Generations in other languages through the executor and the verifier over the real Kafka: the language on
the event reaches the grader, a build that fails is ``compile_error`` (the compiler's output as feedback, every
hidden case failed, never ``sandbox_error``), and a suite that does not take the language fails it
(``unsupported_language``) without a run: a result for every generation, nothing dead-lettered."""

from __future__ import annotations

from pathlib import Path

import pytest

from schemas.codec import decode, encode
from schemas.events import DeadLetter, ExecutionResult, GenerationEvent, HiddenVerdict
from schemas.settings import Settings
from schemas.tasks import Task
from schemas.topics import catalog, topic_for
from tests.integration.helpers import PARTITIONS, start_workers, stop_workers
from tests.integration.workers_pipeline_env import Reader, publish
from tests.sandbox.language_programs import SOLUTIONS, SUM_TASK
from workers.roles.service import Dependencies
from workers.sandbox.api import Sandbox
from workers.tasks.registry import TaskRegistry

pytestmark = [pytest.mark.integration, pytest.mark.sandbox]

CPP_ONLY = Task.model_validate(
    {**SUM_TASK.model_dump(by_alias=True), "task_id": "lang/sum-cpp",
     "hidden_tests": {**SUM_TASK.hidden_tests.model_dump(), "languages": ["cpp"]}}
)  # fmt: skip


def _generation(gid: str, task: Task, language: str, code: str) -> GenerationEvent:
    return GenerationEvent(generation_id=gid, episode_id=gid, run_id="run-1", task_id=task.task_id,
                           policy_version="step-1", language=language, code=code)  # type: ignore[arg-type]  # fmt: skip


def test_languages_through_the_roles(
    prefix: str, process_sandbox: Sandbox, kafka_config: dict[str, str], s3_bucket: str, tmp_path: Path
) -> None:
    TaskRegistry(tmp_path / "tasks").store([SUM_TASK, CPP_ONLY])
    events = [
        _generation("cpp-right", SUM_TASK, "cpp", SOLUTIONS["cpp"].right),
        _generation("cpp-broken", SUM_TASK, "cpp", SOLUTIONS["cpp"].broken),
        _generation("java-wrong", SUM_TASK, "java", SOLUTIONS["java"].wrong),
        _generation("rust-refused", CPP_ONLY, "rust", SOLUTIONS["rust"].right),
    ]
    specs = catalog(prefix, PARTITIONS, 1)
    names = {role: topic_for(role, specs).name for role in ("generations", "executions", "verdicts", "dlq")}
    publish(kafka_config, names["generations"], [(ev.key(), encode(ev)) for ev in events])
    reader = Reader(kafka_config, [names["executions"], names["verdicts"], names["dlq"]])
    settings = Settings(topic_prefix=prefix, topic_partitions=PARTITIONS, tasks_dir=tmp_path / "tasks",
                        s3_bucket=s3_bucket, worker_concurrency=2)  # fmt: skip
    stop, threads, _metrics, outcome = start_workers(
        settings, ["executor", "verifier"], Dependencies(sandbox=process_sandbox)
    )

    def finished() -> bool:
        return (reader.count(names["executions"]) >= 4 and reader.count(names["verdicts"]) >= 4) or len(outcome) > 0

    try:
        reader.poll_until(finished, 240, lambda: f"{ {k: reader.count(v) for k, v in names.items()} }")
    finally:
        stop_workers(stop, threads)
    reader.close()
    verdicts = {
        v.generation_id: v
        for v in (decode(m.value() or b"", HiddenVerdict) for m in reader.messages[names["verdicts"]])
    }
    executions = {
        e.generation_id: e
        for e in (decode(m.value() or b"", ExecutionResult) for m in reader.messages[names["executions"]])
    }
    dead = [decode(m.value() or b"", DeadLetter) for m in reader.messages[names["dlq"]]]

    assert (verdicts["cpp-right"].passed, verdicts["cpp-right"].total, verdicts["cpp-right"].run.status) == (3, 3, "ok")
    broken = verdicts["cpp-broken"]
    assert (broken.passed, broken.run.status) == (0, "compile_error")
    assert broken.run.error is not None
    assert broken.run.error.startswith("compile_error")
    feedback = executions["cpp-broken"]
    assert feedback.run.status == "compile_error"
    assert "error" in feedback.stderr  # the compiler's own output
    assert feedback.feedback is not None
    assert feedback.feedback.startswith("compile_error")
    assert (executions["java-wrong"].passed, verdicts["java-wrong"].passed) == (1, 0)
    refused = verdicts["rust-refused"]
    assert (refused.passed, refused.total, refused.run.status) == (0, 3, "unsupported_language")
    assert executions["rust-refused"].passed == 1  # its public suite takes any language
    assert dead == []
