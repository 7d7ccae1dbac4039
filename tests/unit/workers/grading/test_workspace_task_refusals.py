"""The one-shot consumers of tasks refuse workspace tasks instead of grading them wrong.

The grader runs one program text, and would call ``calc.ops:add`` as a name in it and run an io suite's
program instead of its command; the executor, verifier and judge roles would publish that as evidence. Until
the episode worker grades them, a workspace task is an error there (``rewardstream grade``) or an invalid
event (the roles: dead-lettered with why), and no sandbox ever runs. The registry stores and serves them.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from rewardstream.cli import grade as grade_cli
from rewardstream.cli.main import _register, app
from schemas.codec import decode, encode
from schemas.events import GenerationEvent
from schemas.tasks import PublicTask, Task
from tests.unit.schemas.test_workspace_tasks import CONTRACT_EXAMPLE
from workers.grading import Grader, WorkspaceTaskError, public_suite
from workers.handler import InvalidEventError, Source
from workers.judge.cache import CachedJudge
from workers.judge.rubric import RubricJudge
from workers.roles.common import RoleContext, TaskSource, WorkspaceTaskEventError
from workers.roles.executor import ExecutorHandler
from workers.roles.judging import JudgeHandler
from workers.roles.verifier import VerifierHandler
from workers.sandbox.api import SandboxResult, SandboxSpec
from workers.tasks.registry import TaskRegistry

SOURCE = Source("rs.generations", 0, 7)
WORKSPACE_TASK = decode(CONTRACT_EXAMPLE, Task)


class NoSandbox:
    """A sandbox that must never be asked to run anything."""

    name = "process"

    def run(self, spec: SandboxSpec) -> SandboxResult:
        raise AssertionError("a workspace task reached the sandbox")

    def close(self) -> None:
        pass


def _context(tmp_path: Path, role: str) -> RoleContext:
    registry = TaskRegistry(tmp_path / "tasks")
    registry.store([WORKSPACE_TASK])
    return RoleContext(role=role, worker="host:1", tasks=TaskSource(registry), artifacts=None, output_topic="out")


def _event() -> GenerationEvent:
    return GenerationEvent(
        generation_id="g1",
        episode_id="g1",
        run_id="r",
        task_id="swe/calc-1",
        policy_version="p",
        code="def add(a, b):\n    return a + b\n",
    )


def test_the_grader_refuses_a_workspace_task() -> None:
    with pytest.raises(WorkspaceTaskError, match="workspace tasks are graded by the episode worker"):
        Grader(NoSandbox()).grade(WORKSPACE_TASK, "def add(a, b):\n    return a + b\n")
    with pytest.raises(WorkspaceTaskError):
        public_suite(WORKSPACE_TASK.public())


@pytest.mark.parametrize("role", ["executor", "verifier", "judge"])
def test_the_roles_dead_letter_a_generation_for_a_workspace_task(tmp_path: Path, role: str) -> None:
    context = _context(tmp_path, role)
    grader = Grader(NoSandbox())
    handler: ExecutorHandler | VerifierHandler | JudgeHandler
    if role == "executor":
        handler = ExecutorHandler(context, grader)
    elif role == "verifier":
        handler = VerifierHandler(context, grader)
    else:
        handler = JudgeHandler(context, CachedJudge(RubricJudge()))
    with pytest.raises(WorkspaceTaskEventError, match="workspace tasks are graded by the episode worker") as caught:
        handler.handle(_event(), SOURCE)
    assert isinstance(caught.value, InvalidEventError)  # dead-lettered at once, never retried


def test_the_registry_stores_and_serves_a_workspace_task(tmp_path: Path) -> None:
    registry = TaskRegistry(tmp_path / "tasks")
    registry.store([WORKSPACE_TASK])
    assert registry.task("swe/calc-1") == WORKSPACE_TASK
    public = registry.public("swe/calc-1")
    assert isinstance(public, PublicTask)
    assert public.workspace == WORKSPACE_TASK.workspace
    assert b"hidden" not in encode(public)


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    _register()
    monkeypatch.setattr(grade_cli, "open_sandbox", lambda _settings, _backend: NoSandbox())
    return CliRunner()


def test_rewardstream_grade_refuses_a_workspace_task(cli: CliRunner, tmp_path: Path) -> None:
    (tmp_path / "task.json").write_bytes(CONTRACT_EXAMPLE)
    (tmp_path / "code.py").write_text("def add(a, b):\n    return a + b\n")
    res = cli.invoke(app, ["grade", "--task", str(tmp_path / "task.json"), "--code", str(tmp_path / "code.py")])
    assert res.exit_code != 0
    assert "workspace tasks are graded by the episode worker" in str(res.exception)


def test_rewardstream_grade_names_the_line_of_a_workspace_task_in_a_batch(cli: CliRunner, tmp_path: Path) -> None:
    (tmp_path / "tasks.jsonl").write_bytes(orjson.dumps(orjson.loads(CONTRACT_EXAMPLE)) + b"\n")
    (tmp_path / "sols.jsonl").write_text('{"task_id": "swe/calc-1", "generation_id": "g", "code": ""}\n')
    args = ["grade", "--tasks", str(tmp_path / "tasks.jsonl"), "--solutions", str(tmp_path / "sols.jsonl")]
    res = cli.invoke(app, [*args, "--out", str(tmp_path / "out.jsonl")])
    assert res.exit_code != 0
    assert "tasks.jsonl:1: task swe/calc-1 is a workspace task" in str(res.exception)
