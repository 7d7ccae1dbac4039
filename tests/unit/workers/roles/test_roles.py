"""Role handlers without Kafka: sandbox errors become ``sandbox_error`` results after retries (never a failed
solution), unknown tasks and bad code refs are invalid events, the judge turns outcomes into JudgeScores."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from schemas.codec import decode
from schemas.events import ExecutionResult, GenerationEvent, HiddenVerdict, JudgeScore
from schemas.tasks import CallCase, CallSuite, Task
from workers.grading import Grader, GraderConfig
from workers.grading.grader import RunInfo
from workers.handler import Done, Source
from workers.judge.cache import CachedJudge
from workers.judge.rubric import RubricJudge
from workers.roles.common import CodeUnavailableError, RoleContext, TaskSource, UnknownTaskError
from workers.roles.executor import ExecutorHandler, feedback
from workers.roles.judging import JudgeHandler
from workers.roles.runs import sandbox_run
from workers.roles.verifier import VerifierHandler
from workers.sandbox.api import SandboxResult, SandboxSpec, SandboxStatus
from workers.tasks.registry import TaskRegistry

SOURCE = Source("rs.generations", 1, 42)


class BrokenSandbox:
    """Every run is an infrastructure failure."""

    name = "process"

    def __init__(self) -> None:
        self.runs = 0

    def run(self, spec: SandboxSpec) -> SandboxResult:
        self.runs += 1
        return SandboxResult(SandboxStatus.SANDBOX_ERROR, None, None, b"", b"", False, False, 1.0, 0.0, 0, "process",
                             error="cgroup vanished")  # fmt: skip

    def close(self) -> None:
        pass


def task(public: bool = True) -> Task:
    cases = [CallCase(args=[1], expected=2), CallCase(args=[2], expected=3)]
    return Task(
        task_id="T/1", prompt="def inc(x):\n", entry_point="inc",
        public_tests=CallSuite(kind="call", cases=cases) if public else None,
        hidden_tests=CallSuite(kind="call", cases=cases),
    )  # fmt: skip


def context(tmp_path: Path, role: str, *, public: bool = True) -> RoleContext:
    registry = TaskRegistry(tmp_path / "tasks")
    registry.store([task(public)])
    return RoleContext(role=role, worker="host:1", tasks=TaskSource(registry), artifacts=None, output_topic="out")


def event(task_id: str = "T/1", **kw: Any) -> GenerationEvent:
    values: dict[str, Any] = {
        "generation_id": "g1", "episode_id": "ep", "run_id": "r", "task_id": task_id, "policy_version": "p",
        "code": "def inc(x):\n    return x + 1\n", "turn": 2, **kw,
    }  # fmt: skip
    return GenerationEvent(**values)


def grader(sandbox: BrokenSandbox) -> Grader:
    return Grader(sandbox, GraderConfig(attempts=3, backoff_s=0.0), sleep=lambda _s: None)


def test_executor_publishes_sandbox_error_after_retries(tmp_path: Path) -> None:
    sandbox = BrokenSandbox()
    done = ExecutorHandler(context(tmp_path, "executor"), grader(sandbox)).handle(event(), SOURCE)
    assert isinstance(done, Done)
    assert done.status == "sandbox_error"
    assert sandbox.runs == 3
    result = decode((done.outputs[0].value or b""), ExecutionResult)
    assert done.outputs[0].key == b"ep"
    assert result.run.status == "sandbox_error"
    assert result.attempt == 3
    assert result.turn == 2
    assert result.total == 2
    assert {c.status for c in result.cases} == {"error"}
    assert done.log is not None
    assert done.log.level == "error"
    assert (done.log.topic, done.log.partition, done.log.offset) == ("rs.generations", 1, 42)
    assert done.log.fields["attempts"] == 3
    tagged = ExecutorHandler(context(tmp_path, "executor"), grader(sandbox)).handle(
        event(metadata={"experiment": "ablation-7"}), SOURCE
    )
    assert isinstance(tagged, Done)
    assert tagged.log is not None
    assert tagged.log.fields["meta.experiment"] == "ablation-7"


def test_verifier_publishes_sandbox_error_with_static_flags(tmp_path: Path) -> None:
    code = "import sys\ndef inc(x):\n    sys.exit(0)\n"
    done = VerifierHandler(context(tmp_path, "verifier"), grader(BrokenSandbox())).handle(event(code=code), SOURCE)
    assert isinstance(done, Done)
    verdict = decode((done.outputs[0].value or b""), HiddenVerdict)
    assert verdict.run.status == "sandbox_error"
    assert verdict.passed == 0
    assert "exit_call" in {f.rule for f in verdict.static_flags}
    assert verdict.grader_version


def test_the_verifier_says_canary_from_the_task_whatever_the_run(tmp_path: Path) -> None:
    registry = TaskRegistry(tmp_path / "tasks")
    registry.store([task(), task().model_copy(update={"task_id": "C/1", "canary": True})])
    ctx = RoleContext(role="verifier", worker="host:1", tasks=TaskSource(registry), artifacts=None, output_topic="o")
    for task_id, canary in (("C/1", True), ("T/1", False)):
        done = VerifierHandler(ctx, grader(BrokenSandbox())).handle(event(task_id), SOURCE)
        assert isinstance(done, Done)
        assert decode((done.outputs[0].value or b""), HiddenVerdict).canary is canary


def test_executor_without_public_tests_runs_nothing(tmp_path: Path) -> None:
    sandbox = BrokenSandbox()
    done = ExecutorHandler(context(tmp_path, "executor", public=False), grader(sandbox)).handle(event(), SOURCE)
    assert isinstance(done, Done)
    result = decode((done.outputs[0].value or b""), ExecutionResult)
    assert sandbox.runs == 0
    assert result.suite_kind is None
    assert result.total == 0
    assert result.feedback == "the task has no public tests"


def test_unknown_task_is_an_invalid_event(tmp_path: Path) -> None:
    handler = ExecutorHandler(context(tmp_path, "executor"), grader(BrokenSandbox()))
    with pytest.raises(UnknownTaskError, match="No/such"):
        handler.handle(event("No/such"), SOURCE)


def test_a_language_the_suites_do_not_take_fails_them_without_a_run(tmp_path: Path) -> None:
    sandbox = BrokenSandbox()
    rust = event(language="rust", code="fn main() {}")  # the task's call suites are python only
    done = ExecutorHandler(context(tmp_path, "executor"), grader(sandbox)).handle(rust, SOURCE)
    assert isinstance(done, Done)
    result = decode((done.outputs[0].value or b""), ExecutionResult)
    assert result.run.status == "unsupported_language"
    assert result.feedback is not None
    assert "not rust" in result.feedback
    assert {c.status for c in result.cases} == {"error"}
    done = VerifierHandler(context(tmp_path, "verifier"), grader(sandbox)).handle(rust, SOURCE)
    assert isinstance(done, Done)
    verdict = decode((done.outputs[0].value or b""), HiddenVerdict)
    assert (verdict.run.status, verdict.passed, verdict.total) == ("unsupported_language", 0, 2)
    assert verdict.language == "rust"  # what an audit re-grades it in
    assert sandbox.runs == 0


def test_a_build_that_fails_for_the_infrastructure_is_a_sandbox_error(tmp_path: Path) -> None:
    registry = TaskRegistry(tmp_path / "io-tasks")
    io = {"kind": "io", "cases": [{"stdin": "1", "expected_stdout": "1"}]}
    registry.store([Task.model_validate({"task_id": "IO/1", "prompt": "p", "public_tests": io, "hidden_tests": io})])
    ctx = RoleContext(role="verifier", worker="host:1", tasks=TaskSource(registry), artifacts=None, output_topic="o")
    sandbox = BrokenSandbox()
    done = VerifierHandler(ctx, grader(sandbox)).handle(event("IO/1", language="c", code="int main;"), SOURCE)
    assert isinstance(done, Done)
    verdict = decode((done.outputs[0].value or b""), HiddenVerdict)
    assert verdict.run.status == "sandbox_error"
    assert verdict.static_flags == []  # the analysis reads python only
    assert sandbox.runs == 3  # the compile step, retried


def test_code_ref_without_store_is_an_invalid_event(tmp_path: Path) -> None:
    ref = event(code=None, code_ref="s3://bucket-x/sha256/ab/abc", code_sha256=hashlib.sha256(b"x").hexdigest())
    with pytest.raises(CodeUnavailableError):
        context(tmp_path, "judge").code_of(ref)


def test_judge_handler_scores(tmp_path: Path) -> None:
    judge = CachedJudge(RubricJudge())
    done = JudgeHandler(context(tmp_path, "judge"), judge).handle(event(), SOURCE)
    assert isinstance(done, Done)
    score = decode((done.outputs[0].value or b""), JudgeScore)
    assert score.status == "ok"
    assert score.score is not None
    assert score.judge_model == "rubric-builtin/1"
    again = JudgeHandler(context(tmp_path, "judge"), judge).handle(event(), SOURCE)
    assert isinstance(again, Done)
    assert again.log is not None
    assert again.log.fields["cached"] is True


def test_sandbox_run_mapping_and_feedback() -> None:
    measured = SandboxResult(SandboxStatus.OK, 0, None, b"", b"", False, False, 12.0, 10.0, 2048, "process")
    info = RunInfo(measured, SandboxStatus.OK, 1)
    assert sandbox_run(info, None).status == "ok"
    broken = sandbox_run(info, "harness never started")
    assert broken.status == "sandbox_error"
    assert broken.error == "harness never started"
    assert feedback(None) == "the task has no public tests"
