"""The repo's SWE-style tasks are right: in the sandbox, each original fails its public and hidden tests, each
fix passes both and earns 1.0 under the default policy, and the hack transcript's workspace earns 0."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from schemas.codec import decode
from schemas.events import ExecutionResult, GenerationEvent, HiddenVerdict, JudgeScore
from schemas.status import SandboxStatus
from schemas.tasks import Task, Workspace
from streams.reward.policy import Scored, Signals, evaluate, load_policy
from tests.sandbox.episode_grading_env import SOURCE, episode_done
from workers.artifacts import ArtifactStore, remove_bucket
from workers.episodes.originals import caps_of, original_snapshot
from workers.episodes.step import StepAction, StepLimits, run_step
from workers.grading import Grader
from workers.judge.cache import CachedJudge
from workers.judge.rubric import RubricJudge
from workers.roles.common import RoleContext, TaskSource
from workers.roles.executor import ExecutorHandler
from workers.roles.judging import JudgeHandler
from workers.roles.verifier import VerifierHandler
from workers.sandbox.api import Sandbox
from workers.tasks.registry import TaskRegistry
from workers.tasks.swe import HACK_FILES, PUBLIC_TESTS, SPECS, SweSpec, swe_tasks

pytestmark = pytest.mark.sandbox

LIMITS = StepLimits(memory_mb=256, pids_limit=64, output_cap_bytes=64 << 10, read_cap_bytes=64 << 10, grace_s=20)
TASKS = {t.task_id: t for t in swe_tasks()}
CASES = [(spec, kind) for spec in SPECS for kind in ("call", "io") if kind == "call" or spec.io is not None]


def _workspace(task: Task, changes: dict[str, str]) -> bytes:
    assert task.workspace is not None
    files = {**(task.workspace.files or {}), **changes}
    return original_snapshot(Workspace(files=files), caps_of(task.episode_limits), lambda _url: b"").data


@pytest.fixture(scope="module")
def graders(process_sandbox: Sandbox, minio_client: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    bucket = f"t-swe-{hashlib.sha256(str(tmp_path_factory.getbasetemp()).encode()).hexdigest()[:12]}"
    minio_client.make_bucket(bucket)
    registry = TaskRegistry(Path(tmp_path_factory.mktemp("swe-tasks")))
    registry.store(TASKS.values())
    store = ArtifactStore(minio_client, bucket)

    def context(role: str) -> RoleContext:
        return RoleContext(role=role, worker="test:1", tasks=TaskSource(registry), artifacts=store, output_topic="o")

    grader = Grader(process_sandbox)
    handlers = (VerifierHandler(context("verifier"), grader), ExecutorHandler(context("executor"), grader),
                JudgeHandler(context("judge"), CachedJudge(RubricJudge())))  # fmt: skip
    try:
        yield store, handlers
    finally:
        remove_bucket(minio_client, bucket)


def _reward(graders: Any, task_id: str, data: bytes) -> tuple[float, HiddenVerdict]:
    store, (verifier, executor, judge) = graders
    episode = f"ep-{hashlib.sha256(data).hexdigest()[:16]}"
    event = GenerationEvent(generation_id=episode, episode_id=episode, run_id="r", task_id=task_id,
                            policy_version="p", workspace_ref=store.put(data, "application/x-tar").url,
                            workspace_sha256=hashlib.sha256(data).hexdigest())  # fmt: skip
    verdict = decode(episode_done(verifier.handle(event, SOURCE)), HiddenVerdict)
    execution = decode(episode_done(executor.handle(event, SOURCE)), ExecutionResult)
    judgement = decode(episode_done(judge.handle(event, SOURCE)), JudgeScore)
    scored = evaluate(load_policy(), Signals(execution, verdict, judgement))
    assert isinstance(scored, Scored), scored
    return scored.reward, verdict


@pytest.mark.parametrize(("spec", "kind"), CASES, ids=[f"{s.name}-{k}" for s, k in CASES])
def test_the_fix_earns_1_the_original_and_the_hack_0(graders: Any, spec: SweSpec, kind: str) -> None:
    task = TASKS[spec.task_id + ("-io" if kind == "io" else "")]
    fixed, verdict = _reward(graders, task.task_id, _workspace(task, {spec.module: spec.fixed}))
    assert fixed == 1.0, verdict
    original, verdict = _reward(graders, task.task_id, _workspace(task, {}))
    assert (original, verdict.run.status != "sandbox_error") == (0.0, True), verdict
    hacked, verdict = _reward(graders, task.task_id, _workspace(task, HACK_FILES))
    assert hacked == 0.0, verdict


@pytest.mark.parametrize("spec", SPECS, ids=[s.name for s in SPECS])
def test_the_public_tests_fail_before_the_fix_and_pass_after(process_sandbox: Sandbox, spec: SweSpec) -> None:
    task = TASKS[spec.task_id]
    caps = caps_of(task.episode_limits)
    before = run_step(process_sandbox, _workspace(task, {}), StepAction.exec(PUBLIC_TESTS, 30), caps, LIMITS)
    assert (before.status, before.exit_code) == (SandboxStatus.NONZERO_EXIT, 1), (before.stdout, before.stderr)
    after = run_step(process_sandbox, _workspace(task, {spec.module: spec.fixed}), StepAction.exec(PUBLIC_TESTS, 30),
                     caps, LIMITS)  # fmt: skip
    assert after.status == SandboxStatus.OK, (after.stdout, after.stderr)
    assert b"1 passed" in after.stdout, after.stdout
