"""``rewardstream tasks``: HumanEval converted through the real sandbox, then loaded; invalid tasks rejected."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from tests.integration.sdk_env import process_sandbox_or_skip

pytestmark = pytest.mark.integration

CLI = str(Path(sys.executable).with_name("rewardstream"))


def run(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture(scope="module")
def process_sandbox_available() -> None:
    """Skip (or, under CI, fail) when the process sandbox backend cannot start."""
    process_sandbox_or_skip().close()


@pytest.mark.sandbox
@pytest.mark.usefixtures("process_sandbox_available")
def test_humaneval_converted_and_loaded(tmp_path: Path) -> None:
    out = tmp_path / "humaneval.jsonl"
    converted = run("tasks", "humaneval", str(out), "--backend", "process", "--json")
    assert converted.returncode == 0, converted.stderr
    summary = json.loads(converted.stdout)
    assert summary["tasks"] == 164
    kinds = {p["task_id"]: p["kind"] for p in summary["problems"]}
    assert [t for t, k in kinds.items() if k == "assert"] == ["HumanEval/32", "HumanEval/38", "HumanEval/50"]
    assert all(not p["dropped"] for p in summary["problems"])
    lines = out.read_bytes().splitlines()
    assert len(lines) == 164

    # One bad line among the 164: everything is rejected, naming line and field, and nothing is stored.
    bad = orjson.loads(lines[4])
    bad["hidden_tests"]["cases"][0]["args"] = "not a list"
    broken = tmp_path / "broken.jsonl"
    broken.write_bytes(b"\n".join([*lines[:4], orjson.dumps(bad), *lines[5:]]) + b"\n")
    registry = tmp_path / "registry"
    rejected = run("tasks", "load", str(broken), "--dir", str(registry))
    assert rejected.returncode == 2
    assert f"{broken}: line 5: hidden_tests.cases[0].args: input should be a valid array" in rejected.stderr
    assert rejected.stderr.splitlines()[-1] == (
        f"rewardstream: error: 1 error(s) in {broken}, nothing stored; "
        "first: line 5: hidden_tests.cases[0].args: input should be a valid array"
    )
    assert not registry.exists()

    loaded = run("tasks", "load", str(out), "--dir", str(registry), "--json", "--strict")
    assert loaded.returncode == 0, loaded.stderr  # every hidden suite has cases the public one does not show
    assert json.loads(loaded.stdout)["total"] == 164
    assert json.loads(loaded.stdout)["warnings"] == []
    assert len(json.loads(run("tasks", "list", "--dir", str(registry), "--json").stdout)["tasks"]) == 164

    shown = run("tasks", "show", "HumanEval/0", "--dir", str(registry))
    assert shown.returncode == 0, shown.stderr
    public = json.loads(shown.stdout)
    assert "hidden_tests" not in public
    assert public["public_tests"]["kind"] == "call"
    assert public["entry_point"] == "has_close_elements"
    hidden_file = registry / "hidden" / "HumanEval%2F0.json"
    assert stat.S_IMODE(hidden_file.stat().st_mode) == 0o600
    hidden = orjson.loads(hidden_file.read_bytes())
    hidden_args = {json.dumps(c["args"]) for c in hidden["hidden_tests"]["cases"]}
    public_args = {json.dumps(c["args"]) for c in public["public_tests"]["cases"]}
    assert hidden_args
    assert not hidden_args & public_args


def test_invalid_task_rejected_with_field(tmp_path: Path) -> None:
    good = {
        "task_id": "demo/1",
        "prompt": "def add(a, b):\n",
        "entry_point": "add",
        "hidden_tests": {"kind": "call", "cases": [{"args": [1, 2], "expected": 3}]},
    }
    bad = {**good, "task_id": "demo/2", "hidden_tests": {"kind": "call", "cases": [{"args": {"a": 1}, "expected": 3}]}}
    path = tmp_path / "tasks.jsonl"
    path.write_bytes(orjson.dumps(good) + b"\n" + orjson.dumps(bad) + b"\n")
    registry = tmp_path / "registry"
    result = run("tasks", "load", str(path), "--dir", str(registry))
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"{path}: line 2: hidden_tests.cases[0].args: input should be a valid array",
        f"rewardstream: error: 1 error(s) in {path}, nothing stored; "
        "first: line 2: hidden_tests.cases[0].args: input should be a valid array",
    ]
    assert not registry.exists()
    missing = run("tasks", "show", "demo/1", "--dir", str(registry))
    assert missing.returncode == 2
    assert missing.stderr == f"rewardstream: error: no task 'demo/1' in the registry at {registry}\n"
