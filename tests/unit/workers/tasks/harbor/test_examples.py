"""The shipped Harbor tasks, checked on the host without docker: each is a loadable task directory, the same
bytes every time it is written, its fix only on another branch, its cases failed by the buggy code (a no-op
earns 0), passed by the fix (its oracle earns 1) and by nothing in between unless partly fixed (graded)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from schemas.tasks import task_version
from workers.tasks.harbor.directory import read_task_dir
from workers.tasks.harbor.examples import EXAMPLES, example, rle_c, write_tasks
from workers.tasks.harbor.examples.python_task import case_argv
from workers.tasks.harbor.examples.spec import ExampleTask

PYTHON_TASKS = [spec for spec in EXAMPLES if spec.language == "python"]


def _git(app: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(app), *args], capture_output=True, text=True, check=True).stdout


def _project(tmp_path: Path, spec: ExampleTask, files: dict[str, str]) -> Path:
    app = tmp_path / f"{spec.name}-app"
    shutil.rmtree(app, ignore_errors=True)
    app.mkdir()
    for relative, text in {**spec.base, **files}.items():
        (app / relative).write_text(text)
    return app


def _passed(spec: ExampleTask, app: Path) -> list[bool]:
    cases = json.loads(spec.test_files["cases.json"])
    out = []
    for case in cases:
        run = subprocess.run(case_argv(sys.executable, case["code"], str(app)), capture_output=True, text=True,
                             timeout=30, check=False)  # fmt: skip
        out.append(run.stdout.strip() == case["expected"])
    return out


def test_six_tasks_are_written_and_load_as_image_tasks(tmp_path: Path) -> None:
    written = write_tasks(tmp_path)
    assert [p.name for p in written] == [spec.name for spec in EXAMPLES]
    assert len(written) >= 6
    assert {spec.language for spec in EXAMPLES} == {"python", "c"}
    for path in written:
        task = read_task_dir(path).task
        assert task.environment is not None
        assert task.environment.workdir == "/app"
        assert task.solution is not None


def test_the_same_tasks_are_the_same_bytes_every_time(tmp_path: Path) -> None:
    first = [task_version(read_task_dir(p).task) for p in write_tasks(tmp_path / "a")]
    again = [task_version(read_task_dir(p).task) for p in write_tasks(tmp_path / "b")]
    assert first == again


def test_the_fix_is_on_another_branch_and_a_tag_only(tmp_path: Path) -> None:
    for path in write_tasks(tmp_path):
        spec = example(path.name)
        app = path / "environment" / "app"
        assert _git(app, "symbolic-ref", "HEAD").strip() == "refs/heads/main"
        refs = set(_git(app, "for-each-ref", "--format=%(refname)").split())
        assert refs == {"refs/heads/main", f"refs/heads/{spec.fix_branch}", f"refs/tags/{spec.fix_tag}"}
        assert spec.fix_message not in _git(app, "log", "--format=%s", "main")
        for relative, text in spec.fixed.items():
            assert _git(app, "show", f"{spec.fix_tag}:{relative}") == text
            assert (app / relative).read_text() == spec.buggy[relative]
        assert not (app / ".git" / "index").exists()  # rebuilt in the image: its stat data is no content


@pytest.mark.parametrize("spec", PYTHON_TASKS, ids=lambda spec: spec.name)
def test_a_python_task_fails_every_case_buggy_and_passes_every_case_fixed(spec: ExampleTask, tmp_path: Path) -> None:
    assert not any(_passed(spec, _project(tmp_path, spec, spec.buggy)))
    assert all(_passed(spec, _project(tmp_path, spec, spec.fixed)))


def test_a_partial_fix_earns_a_partial_reward(tmp_path: Path) -> None:
    spec = example("interval-merge")
    merge_only = spec.fixed["intervals.py"].replace(
        "for start, end in merge(intervals))", "for start, end in intervals)"
    )
    assert merge_only != spec.fixed["intervals.py"]
    assert _passed(spec, _project(tmp_path, spec, {"intervals.py": merge_only})) == [True] * 3 + [False] * 2


def test_each_solution_writes_the_fixed_files(tmp_path: Path) -> None:
    for spec in EXAMPLES:
        app = _project(tmp_path, spec, spec.buggy)
        script = spec.solve_sh.replace("cd /app", f"cd {app}")
        subprocess.run(["bash", "-c", script], check=True)
        for relative, text in spec.fixed.items():
            assert (app / relative).read_text() == text


@pytest.mark.skipif(shutil.which("gcc") is None, reason="no gcc on this host (the task's image has its own)")
def test_the_c_task_fails_every_case_buggy_and_passes_every_case_fixed(tmp_path: Path) -> None:
    spec = rle_c.SPEC
    for files, want in ((spec.buggy, False), (spec.fixed, True)):
        app = _project(tmp_path, spec, files)
        subprocess.run(["gcc", "-O2", "-std=c11", "-Wall", "-Werror", "-o", str(app / "rle"), str(app / "main.c"),
                        str(app / "rle.c")], check=True)  # fmt: skip
        for expected, mode, text in rle_c.CASES:
            run = subprocess.run([str(app / "rle"), mode, text], capture_output=True, text=True, check=False)
            assert (run.stdout.strip() == expected) is want, (mode, text, run.stdout, run.stderr)
