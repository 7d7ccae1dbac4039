"""An image task's submit in the verifier without a daemon: what the host causes is a sandbox_error verdict (never
a 0, never a dead letter), retried first when the daemon failed a step; an unusable snapshot is the agent's 0;
the executor and the judge publish nothing for it, and a one-shot generation naming it is an invalid event.
(The verification itself, through Kafka and the real daemon: tests/integration/test_image_task_rewards.py.)"""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path
from typing import Any

import pytest

from schemas.codec import decode
from schemas.events import GenerationEvent, HiddenVerdict
from schemas.tasks import PublicTask, Task
from tests.sandbox.image_task import hello
from workers.containers.image_containers import ContainerInfraError
from workers.containers.task_host import ImageTaskHost, NoImageTaskHost
from workers.episodes.snapshot import pack
from workers.grading import Grader
from workers.handler import Done, InvalidEventError, Source
from workers.judge.cache import CachedJudge
from workers.judge.rubric import RubricJudge
from workers.retry import RetryPolicy
from workers.roles import image_verifier
from workers.roles.common import RoleContext, TaskSource
from workers.roles.executor import ExecutorHandler
from workers.roles.image_verifier import ImageVerifier
from workers.roles.judging import JudgeHandler
from workers.roles.verifier import VerifierHandler
from workers.roles.workspace import EpisodeWorkspaces
from workers.tasks.registry import TaskRegistry

SOURCE = Source("rs.generations", 1, 42)


class Store:
    """S3 by content address, in memory: what the roles read a snapshot from."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}

    def url_for(self, sha256_hex: str) -> str:
        return f"s3://bucket/sha256/{sha256_hex[:2]}/{sha256_hex}"

    def put(self, data: bytes) -> str:
        url = self.url_for(hashlib.sha256(data).hexdigest())
        self.objects[url] = data
        return url

    def get(self, url: str, *, max_bytes: int | None = None) -> bytes:
        return self.objects[url]


@pytest.fixture
def image_task(tmp_path: Path) -> Task:
    return hello(tmp_path)


def context(tmp_path: Path, task: Task, role: str, store: Store) -> RoleContext:
    registry = TaskRegistry(tmp_path / "tasks")
    registry.store([task])
    return RoleContext(role=role, worker="host:1", tasks=TaskSource(registry), artifacts=store,  # type: ignore[arg-type]
                       output_topic="out")  # fmt: skip


def submitted(store: Store, task: Task, data: bytes | None = None) -> GenerationEvent:
    if data is None:
        with tempfile.TemporaryDirectory() as tmp:
            Path(tmp, "hello.py").write_text('print("hello")\n')
            data = pack(Path(tmp)).data
    return GenerationEvent(
        generation_id="g", episode_id="g", run_id="r", task_id=task.task_id, policy_version="p",
        workspace_ref=store.put(data), workspace_sha256=hashlib.sha256(data).hexdigest(),
    )  # fmt: skip


def verdict_of(done: Any) -> HiddenVerdict:
    assert isinstance(done, Done)
    value = done.outputs[0].value
    assert value is not None
    return decode(value, HiddenVerdict)


def test_a_verifier_without_a_daemon_withholds_never_zero(tmp_path: Path, image_task: Task) -> None:
    store = Store()
    ctx = context(tmp_path, image_task, "verifier", store)
    handler = VerifierHandler(ctx, Grader(object()), NoImageTaskHost("docker daemon unreachable"))  # type: ignore[arg-type]
    got = verdict_of(handler.handle(submitted(store, image_task), SOURCE))
    assert (got.suite_kind, got.run.status, got.verifier) == ("verifier", "sandbox_error", None)
    assert got.run.error is not None
    assert "docker daemon unreachable" in got.run.error


def test_an_image_that_cannot_be_had_is_the_hosts(tmp_path: Path, image_task: Task) -> None:
    store = Store()

    def image_of(task: PublicTask | Task) -> str:
        raise RuntimeError("the build ran out of disk")

    workspaces = EpisodeWorkspaces(context(tmp_path, image_task, "verifier", store))
    got = ImageVerifier(workspaces, ImageTaskHost(object(), image_of)).verify(submitted(store, image_task), image_task)
    assert (got.run.status, got.outcome) == ("sandbox_error", None)
    assert got.run.error is not None
    assert "the build ran out of disk" in got.run.error


def test_a_daemon_failure_is_retried_then_withheld(
    tmp_path: Path, image_task: Task, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store()
    calls: list[str] = []

    def failing(*_args: Any) -> Any:
        calls.append("verify")
        raise ContainerInfraError("docker exec failed: connection reset")

    monkeypatch.setattr(image_verifier, "verify", failing)
    workspaces = EpisodeWorkspaces(context(tmp_path, image_task, "verifier", store))
    host = ImageTaskHost(object(), lambda _task: "rs-task/x:1")
    verifier = ImageVerifier(workspaces, host, retry=RetryPolicy(3, 0.0, 0.0), sleep=lambda _s: None)
    got = verifier.verify(submitted(store, image_task), image_task)
    assert (got.run.status, got.attempts, len(calls)) == ("sandbox_error", 3, 3)


def test_an_unusable_snapshot_is_the_agents_zero(tmp_path: Path, image_task: Task) -> None:
    store = Store()
    workspaces = EpisodeWorkspaces(context(tmp_path, image_task, "verifier", store))
    host = ImageTaskHost(object(), lambda _task: pytest.fail("no image is needed to refuse a snapshot"))
    got = ImageVerifier(workspaces, host).verify(submitted(store, image_task, b"not a tar"), image_task)
    assert got.run.status == "crashed"
    assert got.outcome is not None
    assert got.outcome.reward == 0.0
    assert got.outcome.reason is not None
    assert got.outcome.reason.startswith("the workspace snapshot is unusable")


def test_the_executor_and_the_judge_publish_nothing_for_an_image_task(tmp_path: Path, image_task: Task) -> None:
    store = Store()
    event = submitted(store, image_task)
    executor = ExecutorHandler(context(tmp_path / "x", image_task, "executor", store), Grader(object()))  # type: ignore[arg-type]
    judge = JudgeHandler(context(tmp_path / "j", image_task, "judge", store), CachedJudge(RubricJudge()))
    for handler in (executor, judge):
        done = handler.handle(event, SOURCE)
        assert isinstance(done, Done)
        assert (done.outputs, done.status) == ((), "image_task")


def test_a_one_shot_generation_naming_an_image_task_is_invalid(tmp_path: Path, image_task: Task) -> None:
    store = Store()
    event = GenerationEvent(generation_id="g", episode_id="g", run_id="r", task_id=image_task.task_id, code="x = 1",
                           policy_version="p")  # fmt: skip
    verifier = VerifierHandler(context(tmp_path, image_task, "verifier", store), Grader(object()))  # type: ignore[arg-type]
    with pytest.raises(InvalidEventError, match="is an image task"):
        verifier.handle(event, SOURCE)


def test_a_verifications_evidence_is_fitted_to_the_verdicts_caps() -> None:
    """The image it ran on as the daemon said, the END of test.sh's output (the failures come last) and the
    START of the reward file, each cut to its field's cap, never unbounded."""
    from schemas.caps import cap
    from schemas.result_rules import VerifierOutcome
    from workers.containers.reward_file import VerifierReward
    from workers.containers.verification import Verification

    image_id = "sha256:" + "0f" * 32
    output = "collected 1 item\n" + "x" * 10_000 + "\n1 passed"
    ran = Verification(VerifierReward(1.0, "reward.json"), False, output, 2.0, image_id, '{"reward": 1}' + " " * 5000)
    outcome = image_verifier.verified_run(ran).outcome
    assert outcome is not None
    assert outcome.image_id == image_id
    assert outcome.output_tail is not None
    assert outcome.output_tail.endswith("\n1 passed")
    assert len(outcome.output_tail) == cap(VerifierOutcome, "output_tail") < len(output)
    assert outcome.reward_file is not None
    assert outcome.reward_file.startswith('{"reward": 1}')
    assert len(outcome.reward_file) == cap(VerifierOutcome, "reward_file")
    none = image_verifier.verified_run(Verification(VerifierReward(0.0, None, "neither"), False, "", 1.0)).outcome
    assert none is not None
    assert (none.image_id, none.output_tail, none.reward_file) == (None, "", None)
