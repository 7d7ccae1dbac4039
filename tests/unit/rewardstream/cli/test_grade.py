"""``rewardstream grade``: single and batch modes, the result contract, and input errors.

The sandbox factory is replaced by the unit tests' ``LocalRunner`` (no isolation), so only the benign
programs written here run.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from rewardstream.cli import grade as grade_cli
from rewardstream.cli.main import _register, app
from schemas.solutions import Solution
from schemas.tasks import Task, task_version
from workers.grading import Grader, GraderConfig
from workers.sandbox.api import SandboxResult, SandboxSpec, SandboxStatus

PY = ("/usr/bin/python3", "-I", "-S", "-B")


class LocalRunner:
    """Runs a spec in a temp dir with no isolation (benign test code only)."""

    name = "local"

    def run(self, spec: SandboxSpec) -> SandboxResult:
        with tempfile.TemporaryDirectory() as tmp:
            for rel, data in spec.files.items():
                Path(tmp, rel).write_bytes(data)
            proc = subprocess.run(
                list(spec.argv), input=spec.stdin, cwd=tmp, capture_output=True, timeout=spec.timeout_s, check=False
            )
        status = SandboxStatus.OK if proc.returncode == 0 else SandboxStatus.NONZERO_EXIT
        out = (proc.stdout, proc.stderr, False, False, 1.0, 1.0, 1, "local")
        return SandboxResult(status, proc.returncode, None, *out)

    def close(self) -> None:
        pass


TASK = {
    "task_id": "cli/add",
    "prompt": "add",
    "entry_point": "add",
    "public_tests": {"kind": "call", "cases": [{"args": [1, 2], "expected": 3}]},
    "hidden_tests": {"kind": "call", "cases": [{"args": [2, 2], "expected": 4}, {"args": [5, 5], "expected": 10}]},
}
GOOD = "def add(a, b):\n    return a + b\n"
BAD = "def add(a, b):\n    return a * b\n"
CONTRACT_KEYS = {"generation_id", "task_id", "status", "public", "hidden", "flags", "reward"}


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    _register()
    monkeypatch.setattr(grade_cli, "open_sandbox", lambda _settings, _backend: LocalRunner())
    original = Grader  # the class grade_cli uses (it imports it from workers.grading.grader)

    def local_grader(sandbox: Any, config: GraderConfig | None = None) -> Any:
        return original(sandbox, GraderConfig(python_argv=PY))

    monkeypatch.setattr(grade_cli, "Grader", local_grader)
    return CliRunner()


def test_single(cli: CliRunner, tmp_path: Path) -> None:
    (tmp_path / "task.json").write_text(json.dumps(TASK))
    (tmp_path / "sol.py").write_text(GOOD)
    res = cli.invoke(app, ["grade", "--task", str(tmp_path / "task.json"), "--code", str(tmp_path / "sol.py")])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert set(out) >= CONTRACT_KEYS
    assert out["status"] == "pass"
    assert out["reward"] == 1.0
    assert out["public"] == {"passed": 1, "total": 1}
    assert out["hidden"] == {"passed": 2, "total": 2}
    assert out["generation_id"] == "sol"
    assert out["policy"] == {"name": "default", "version": "2"}  # the pipeline's policy, not a grader rule
    assert out["task_version"] == task_version(Task.model_validate(TASK))  # as the registry names it


def test_policy_option_rewards_with_that_file(cli: CliRunner, tmp_path: Path) -> None:
    (tmp_path / "task.json").write_text(json.dumps(TASK))
    (tmp_path / "sol.py").write_text(BAD)
    (tmp_path / "p.toml").write_text('name = "lenient"\nversion = "7"\n[score]\npartial_credit = 1.0\n')
    args = ["grade", "--task", str(tmp_path / "task.json"), "--code", str(tmp_path / "sol.py")]
    res = cli.invoke(app, [*args, "--policy", str(tmp_path / "p.toml")])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert (out["status"], out["reward"]) == ("fail", 0.5)  # partial credit: 1 of 2 hidden cases
    assert out["policy"] == {"name": "lenient", "version": "7"}


def test_batch(cli: CliRunner, tmp_path: Path) -> None:
    other = {**TASK, "task_id": "cli/mul", "hidden_tests": {"kind": "call", "cases": [{"args": [2, 3], "expected": 6}]}}
    (tmp_path / "tasks.jsonl").write_text(json.dumps(TASK) + "\n\n" + json.dumps(other) + "\n")
    sols = [
        {"task_id": "cli/add", "generation_id": "g1", "code": GOOD},
        {"task_id": "cli/add", "generation_id": "g2", "code": BAD},
        {"task_id": "cli/mul", "generation_id": "g3", "code": BAD},
    ]
    (tmp_path / "sols.jsonl").write_text("".join(json.dumps(s) + "\n" for s in sols))
    out = tmp_path / "out.jsonl"
    args = [
        "grade",
        "--tasks",
        str(tmp_path / "tasks.jsonl"),
        "--solutions",
        str(tmp_path / "sols.jsonl"),
        "--out",
        str(out),
        "--concurrency",
        "2",
    ]
    res = cli.invoke(app, args)
    assert res.exit_code == 0, res.output
    results = {r["generation_id"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert set(results) == {"g1", "g2", "g3"}
    assert all(set(r) >= CONTRACT_KEYS for r in results.values())
    assert results["g1"]["status"] == "pass"
    assert results["g2"]["status"] == "fail"
    assert results["g3"]["status"] == "fail"  # 2*3 == 6 but the public case 1*2 != 3
    assert results["g3"]["hidden"] == {"passed": 1, "total": 1}
    assert results["g3"]["task_version"] == task_version(Task.model_validate(other))


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["grade"], "either --task"),
        (["grade", "--task", "t.json"], "--task and --code"),
        (["grade", "--tasks", "t.jsonl", "--task", "x"], "either --task"),
        (["grade", "--task", "missing.json", "--code", "missing.py"], "cannot read"),
        (["grade", "--task", "t.json", "--code", "c.py", "--backend", "vm"], "--backend"),
    ],
)
def test_bad_invocations(
    cli: CliRunner, tmp_path: Path, args: list[str], needle: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    res = cli.invoke(app, args)
    assert res.exit_code != 0
    assert needle in str(res.exception) or needle in res.output


def test_unknown_task_in_batch_is_reported_with_its_line(cli: CliRunner, tmp_path: Path) -> None:
    (tmp_path / "tasks.jsonl").write_text(json.dumps(TASK) + "\n")
    (tmp_path / "sols.jsonl").write_text(json.dumps({"task_id": "nope", "generation_id": "g", "code": ""}) + "\n")
    res = cli.invoke(
        app,
        [
            "grade",
            "--tasks",
            str(tmp_path / "tasks.jsonl"),
            "--solutions",
            str(tmp_path / "sols.jsonl"),
            "--out",
            str(tmp_path / "o.jsonl"),
        ],
    )
    assert res.exit_code != 0
    assert "sols.jsonl:1" in str(res.exception)


def test_one_bad_result_never_costs_the_batch_its_other_lines() -> None:
    """Each line is its own outcome: a grader that raised, or a result that cannot be written (a lone
    surrogate that got past every boundary), is a ``sandbox_error`` line for that solution only."""
    from concurrent.futures import Future

    from rewardstream.cli.graded import Graded

    sol = Solution(task_id="cli/add", generation_id="g1", code=GOOD)
    raised: Future[Graded] = Future()
    raised.set_exception(RuntimeError("grader bug \ud800"))
    status, reward, line = grade_cli.result_line(sol, raised)
    assert (status, reward) == ("sandbox_error", 0.0)
    rec = json.loads(line)
    assert rec["generation_id"] == "g1"
    assert rec["status"] == "sandbox_error"
    assert "grader bug" in rec["reasons"][0]

    class Unwritable:
        status = "fail"
        reward = 0.0

        def to_json(self) -> dict[str, Any]:
            return {"reasons": ["\ud800"]}

    done: Future[Any] = Future()
    done.set_result(Unwritable())
    assert grade_cli.result_line(sol, done)[0] == "sandbox_error"
