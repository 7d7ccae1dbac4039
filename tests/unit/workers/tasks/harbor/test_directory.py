"""A Harbor task directory read into one image task: public and hidden parts apart, every problem named,
and `tasks load DIR` storing all or nothing."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from schemas.codec import encode
from schemas.environments import VerifierSuite
from schemas.tasks import ImageTaskError, language_problem, task_version
from workers.tasks.harbor.directory import HarborTaskError, TaskDirError, read_task_dir, read_task_tree
from workers.tasks.registry import TaskRegistry, WeakTasksError

#: The agent's program runs through rs-as-agent: as root it could write the reward itself.
TEST_SH = (
    '#!/bin/bash\n[ "$(rs-as-agent python /app/hello.py)" = hello ] && echo 1 > /logs/verifier/reward.txt '
    "|| echo 0 > /logs/verifier/reward.txt\n"
)


def make_task(root: Path, name: str = "hello", toml: str = "[agent]\ntimeout_sec = 300.0\n") -> Path:
    task = root / name
    for part in ("environment", "tests", "solution"):
        (task / part).mkdir(parents=True)
    (task / "task.toml").write_text(toml)
    (task / "instruction.md").write_text("Make /app/hello.py print hello.\n")
    (task / "environment" / "Dockerfile").write_text("FROM python:3.11-slim\nWORKDIR /app\nCOPY hello.py .\n")
    (task / "environment" / "hello.py").write_text('print("helo")\n')
    (task / "tests" / "test.sh").write_text(TEST_SH)
    (task / "tests" / "test.sh").chmod(0o755)
    (task / "solution" / "solve.sh").write_text("#!/bin/bash\necho 'print(\"hello\")' > /app/hello.py\n")
    return task


def members(data: bytes) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return {m.name: m for m in tar.getmembers()}


def test_a_task_directory_is_one_image_task(tmp_path: Path) -> None:
    read = read_task_dir(make_task(tmp_path))
    task = read.task
    assert task.task_id == "hello"
    assert task.prompt == "Make /app/hello.py print hello.\n"
    assert task.environment is not None
    assert task.environment.workdir == "/app"
    assert task.environment.context is not None
    assert set(members(task.environment.context.tar())) == {"Dockerfile", "hello.py"}
    assert isinstance(task.hidden_tests, VerifierSuite)
    tests = members(task.hidden_tests.tests.tar())
    assert tests["test.sh"].mode == 0o755
    assert task.solution is not None
    assert set(members(task.solution.solution.tar())) == {"solve.sh"}
    assert task.episode_limits.episode_timeout_s == 300.0
    assert task.episode_limits.step_timeout_s == 300.0


def test_tests_and_solution_are_never_in_the_public_view(tmp_path: Path) -> None:
    task = read_task_dir(make_task(tmp_path)).task
    public = encode(task.public())
    assert b"hidden_tests" not in public
    assert b"solution" not in public
    assert isinstance(task.hidden_tests, VerifierSuite)
    assert task.hidden_tests.tests.tar_b64.encode() not in public
    assert task.environment is not None
    assert task.environment.context is not None
    assert task.environment.context.tar_b64.encode() in public


def test_the_same_directory_is_the_same_version_and_a_changed_byte_another(tmp_path: Path) -> None:
    task_dir = make_task(tmp_path)
    first = task_version(read_task_dir(task_dir).task)
    os.utime(task_dir / "tests" / "test.sh", (0, 0))
    assert task_version(read_task_dir(task_dir).task) == first  # times are not content
    (task_dir / "tests" / "test.sh").write_text(TEST_SH + "# changed\n")
    assert task_version(read_task_dir(task_dir).task) != first


def test_an_image_task_is_refused_by_the_one_shot_grader(tmp_path: Path) -> None:
    task = read_task_dir(make_task(tmp_path)).task
    assert "image task" in (language_problem(task, "python") or "")
    with pytest.raises(ImageTaskError, match="image task"):
        _ = task.graded_suite


def test_every_problem_of_a_directory_is_named(tmp_path: Path) -> None:
    task = make_task(tmp_path, "bad task")
    (task / "instruction.md").write_text("  \n")
    (task / "tests" / "test.sh").unlink()
    (task / "environment" / "docker-compose.yaml").write_text("services: {}\n")
    (task / "environment" / "Dockerfile").write_text("FROM x\nWORKDIR $APP\n")
    with pytest.raises(HarborTaskError) as caught:
        read_task_dir(task)
    text = "\n".join(caught.value.problems)
    for named in ("not a task id", "instruction.md is empty", "tests/test.sh is missing", "docker-compose",
                  "set [environment] workdir"):  # fmt: skip
        assert named in text, text


def test_a_fifo_in_a_task_directory_is_refused(tmp_path: Path) -> None:
    task = make_task(tmp_path)
    os.mkfifo(task / "environment" / "pipe")
    with pytest.raises(HarborTaskError, match="not files, directories or links: pipe"):
        read_task_dir(task)


def test_symlinks_stay_links(tmp_path: Path) -> None:
    task = make_task(tmp_path)
    (task / "environment" / "link").symlink_to("/etc/passwd")
    env = read_task_dir(task).task.environment
    assert env is not None
    assert env.context is not None
    link = members(env.context.tar())["link"]
    assert link.issym()
    assert link.linkname == "/etc/passwd"


def test_a_prebuilt_image_needs_no_dockerfile_and_workdir_comes_from_task_toml(tmp_path: Path) -> None:
    task = make_task(tmp_path, toml='[environment]\ndocker_image = "org/task:1"\nworkdir = "/srv"\n')
    (task / "environment" / "Dockerfile").unlink()
    env = read_task_dir(task).task.environment
    assert env is not None
    assert (env.docker_image, env.context, env.workdir) == ("org/task:1", None, "/srv")


def test_load_dir_stores_every_task_or_nothing(tmp_path: Path) -> None:
    root = tmp_path / "tasks"
    make_task(root, "one")
    make_task(root, "two")
    registry = TaskRegistry(tmp_path / "reg")
    report = registry.load_dir(root)
    assert report.added == ("one", "two")
    assert registry.load_dir(root).unchanged == ("one", "two")
    assert registry.public("one").environment is not None
    (root / "three").mkdir()
    (root / "three" / "task.toml").write_text("[environment]\ngpus = 4\n")
    other = TaskRegistry(tmp_path / "other")
    with pytest.raises(TaskDirError) as caught:
        other.load_dir(root)
    assert any(p.startswith("three: ") and "GPUs" in p for p in caught.value.problems)
    assert other.ids() == []


def test_strict_refuses_a_task_with_a_warning(tmp_path: Path) -> None:
    make_task(tmp_path / "tasks", toml="[environment]\nallow_internet = true\n")
    registry = TaskRegistry(tmp_path / "reg")
    with pytest.raises(WeakTasksError, match="allow_internet"):
        registry.load_dir(tmp_path / "tasks", strict=True)
    assert registry.ids() == []
    report = registry.load_dir(tmp_path / "tasks")
    assert [w.task_id for w in report.warnings] == ["hello"]


def test_a_root_without_tasks_says_so(tmp_path: Path) -> None:
    with pytest.raises(TaskDirError, match="no task directory"):
        read_task_tree(tmp_path)
    with pytest.raises(TaskDirError, match="is not a directory"):
        read_task_tree(tmp_path / "missing")


def test_cli_loads_a_directory_and_names_each_problem(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from rewardstream.cli.main import _register, app

    _register()
    make_task(tmp_path / "tasks")
    runner = CliRunner()
    load = ["tasks", "load", str(tmp_path / "tasks"), "--no-build"]  # images: tests/sandbox/test_image_tasks.py
    ok = runner.invoke(app, [*load, "--dir", str(tmp_path / "a"), "--json"])
    assert ok.exit_code == 0, ok.output
    assert '"added": [\n    "hello"\n  ]' in ok.output or '"hello"' in ok.output
    (tmp_path / "tasks" / "hello" / "instruction.md").unlink()
    bad = runner.invoke(app, [*load, "--dir", str(tmp_path / "b")])
    assert bad.exit_code != 0
    assert "hello: instruction.md is missing" in bad.output
    assert not (tmp_path / "b").exists()


def test_cli_without_dockerd_says_how_to_load_anyway(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from rewardstream.cli.main import _register, app

    _register()
    make_task(tmp_path / "tasks")
    monkeypatch.setenv("RS_DOCKER_HOST", f"unix://{tmp_path}/no-dockerd.sock")
    runner = CliRunner()
    refused = runner.invoke(app, ["tasks", "load", str(tmp_path / "tasks"), "--dir", str(tmp_path / "a")])
    assert refused.exit_code != 0
    assert "start it (`rewardstream up`), or load with --no-build" in str(refused.exception)
    assert TaskRegistry(tmp_path / "a").ids() == []
    deferred = runner.invoke(
        app, ["tasks", "load", str(tmp_path / "tasks"), "--dir", str(tmp_path / "a"), "--no-build"]
    )
    assert deferred.exit_code == 0, deferred.output
    assert TaskRegistry(tmp_path / "a").ids() == ["hello"]
