"""The task registry: all-or-nothing loads with every error, hidden tests stored apart, atomic files."""

from __future__ import annotations

import copy
import shutil
import stat
from pathlib import Path
from typing import Any

import orjson
import pytest

from workers.tasks.registry import (
    LineError,
    TaskFileError,
    TaskNotFoundError,
    TaskRegistry,
    WeakTasksError,
    file_name,
    parse_jsonl,
    task_warnings,
)

#: How a task's invalid ``language`` is reported: every supported language id.
LANGUAGE_CHOICES = (
    "input should be 'python', 'c', 'cpp', 'java', 'javascript', 'typescript', 'go', 'rust', 'bash', 'php', "
    "'ruby', 'lua', 'perl', 'r', 'csharp', 'kotlin', 'scala', 'racket', 'verilog' or 'd'"
)

TASK: dict[str, Any] = {
    "task_id": "demo/1",
    "prompt": "def add(a, b):\n",
    "entry_point": "add",
    "public_tests": {"kind": "call", "cases": [{"args": [1, 2], "expected": 3}]},
    "hidden_tests": {"kind": "call", "cases": [{"args": [20, 22], "expected": 42}]},
}


def task(task_id: str, **changes: Any) -> dict[str, Any]:
    doc = copy.deepcopy(TASK) | {"task_id": task_id}
    doc.update(changes)
    return doc


def jsonl(*docs: dict[str, Any] | str) -> bytes:
    return b"\n".join(d.encode() if isinstance(d, str) else orjson.dumps(d) for d in docs) + b"\n"


def test_all_errors_reported_with_line_and_field() -> None:
    data = jsonl(
        task("a/1"),
        task("a/2", hidden_tests={"kind": "call", "cases": [{"args": 3, "expected": 1}]}),
        "",
        task("a/1"),
        "{oops",
        task("a/5", limits={"timeout_s": -1}, language="cobol"),
    )
    with pytest.raises(TaskFileError) as caught:
        parse_jsonl(data, "f.jsonl")
    assert [str(e) for e in caught.value.errors] == [
        "line 2: hidden_tests.cases[0].args: input should be a valid array",
        "line 4: task_id: duplicate of line 1",
        "line 5: not JSON: unexpected character, expected a string key: line 1 column 2 (char 1)",
        f"line 6: language: {LANGUAGE_CHOICES}",
        "line 6: limits.timeout_s: input should be greater than 0",
    ]
    assert str(caught.value).startswith("5 error(s) in f.jsonl, nothing stored: line 2: hidden_tests.cases[0]")


def test_empty_file_is_an_error() -> None:
    with pytest.raises(TaskFileError, match="no tasks in file"):
        parse_jsonl(b"\n\n")


def test_invalid_file_stores_nothing(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(jsonl(task("ok/1"), task("bad/2", entry_point=None)))
    registry = TaskRegistry(tmp_path / "reg")
    with pytest.raises(TaskFileError) as caught:
        registry.load_file(path)
    assert caught.value.errors == (LineError(2, "entry_point", "required for call and assert tests"),)
    assert registry.ids() == []
    assert not (tmp_path / "reg").exists()


def test_hidden_tests_stored_apart(tmp_path: Path) -> None:
    registry = TaskRegistry(tmp_path / "reg")
    report = registry.store(parse_jsonl(jsonl(task("HumanEval/0"), task("x"))))
    assert report.added == ("HumanEval/0", "x")
    public_file = tmp_path / "reg" / "public" / "HumanEval%2F0.json"
    hidden_file = tmp_path / "reg" / "hidden" / "HumanEval%2F0.json"
    assert b"42" not in public_file.read_bytes()
    assert b"hidden_tests" not in public_file.read_bytes()
    assert b"42" in hidden_file.read_bytes()
    assert stat.S_IMODE(hidden_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(hidden_file.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(public_file.stat().st_mode) == 0o644
    assert registry.ids() == ["HumanEval/0", "x"]
    assert registry.public("HumanEval/0").public_tests is not None
    full = registry.task("HumanEval/0")
    assert full.hidden_tests.kind == "call"
    assert full.hidden_tests.cases[0].expected == 42
    assert full.public() == registry.public("HumanEval/0")
    assert not list((tmp_path / "reg").rglob(".tmp-*"))


def test_its_public_part_alone_serves_every_public_read(tmp_path: Path) -> None:
    """The chart mounts only ``public/`` into the roles that grade without hidden tests (their root could read
    ``hidden/``): every read they make works from it, pinned versions and the latest alike."""
    full = TaskRegistry(tmp_path / "reg")
    full.store(parse_jsonl(jsonl(task("HumanEval/0"), task("x"))))
    version = full.latest_version("HumanEval/0")
    full.store(parse_jsonl(jsonl(task("HumanEval/0", prompt="def add(a, b):\n    pass\n"))))
    shutil.copytree(tmp_path / "reg" / "public", tmp_path / "mounted" / "public")
    public_only = TaskRegistry(tmp_path / "mounted")
    assert public_only.ids() == ["HumanEval/0", "x"]
    assert public_only.latest_version("HumanEval/0") == full.latest_version("HumanEval/0") != version
    assert public_only.versions("HumanEval/0") == full.versions("HumanEval/0")
    assert public_only.public("HumanEval/0") == full.public("HumanEval/0")
    assert version is not None
    assert public_only.public("HumanEval/0", version) == full.public("HumanEval/0", version)
    with pytest.raises(TaskNotFoundError):
        public_only.task("HumanEval/0")


def test_a_canary_is_stored_with_its_hidden_part_only(tmp_path: Path) -> None:
    registry = TaskRegistry(tmp_path / "reg")
    registry.store(parse_jsonl(jsonl(task("canary/1", canary=True), task("plain/1"))))
    assert registry.task("canary/1").canary  # what the verifier reads: its verdicts say canary
    assert not registry.task("plain/1").canary
    public_file = tmp_path / "reg" / "public" / "canary%2F1.json"
    assert b'"canary":' not in public_file.read_bytes()  # trainers' view: no hint


def test_reload_reports_unchanged_and_updated(tmp_path: Path) -> None:
    registry = TaskRegistry(tmp_path)
    registry.store(parse_jsonl(jsonl(task("a"), task("b"))))
    report = registry.store(parse_jsonl(jsonl(task("a"), task("b", prompt="changed"), task("c"))))
    assert (report.added, report.updated, report.unchanged) == (("c",), ("b",), ("a",))
    assert registry.public("b").prompt == "changed"


def test_unknown_task(tmp_path: Path) -> None:
    with pytest.raises(TaskNotFoundError, match="no task 'nope/1' in the registry"):
        TaskRegistry(tmp_path).public("nope/1")


@pytest.mark.parametrize("task_id", ["HumanEval/0", "a:b", "a.b-c_d", "x/../y"])
def test_file_names_stay_inside_the_directory(task_id: str) -> None:
    name = file_name(task_id)
    assert "/" not in name
    assert not name.startswith(".")


# ---- hidden suites that only repeat the public one ---------------------------------------------------------

REPEATS = task(
    "weak/1",
    public_tests={"kind": "call", "cases": [{"args": [1, 2], "expected": 3}, {"args": [20, 22], "expected": 42}]},
    hidden_tests={"kind": "call", "cases": [{"args": [20, 22], "expected": 42}]},
)


@pytest.mark.parametrize(
    ("public", "hidden", "why"),
    [
        (
            {
                "kind": "call",
                "cases": [{"args": [1], "expected": 1}, {"args": [2], "kwargs": {"k": [1]}, "expected": 2}],
            },
            {"kind": "call", "cases": [{"args": [2], "kwargs": {"k": [1]}, "expected": 9}]},
            "all 1 of its hidden cases repeat inputs of its public suite",
        ),
        (
            {"kind": "io", "cases": [{"stdin": "1\n", "expected_stdout": "1"}]},
            {
                "kind": "io",
                "cases": [{"stdin": "1\n", "expected_stdout": "1"}, {"stdin": "1\n", "expected_stdout": "1"}],
            },
            "all 2 of its hidden cases repeat inputs of its public suite",
        ),
        (
            {"kind": "assert", "code": "def check(candidate):\n    assert candidate(1) == 3\n"},
            {"kind": "assert", "code": "def check(candidate):\n    assert candidate(1) == 3\n\n"},
            "its hidden check code is the same as its public check code",
        ),
        (
            {"kind": "call", "cases": [{"args": [1], "expected": 1}]},
            {"kind": "call", "cases": []},
            "its hidden suite has no cases",
        ),
    ],
)
def test_hidden_suites_that_repeat_the_public_one_are_warned(
    public: dict[str, Any], hidden: dict[str, Any], why: str
) -> None:
    weak = parse_jsonl(jsonl(task("weak/1", public_tests=public, hidden_tests=hidden)))
    assert [(w.task_id, w.problem.split(":")[0]) for w in task_warnings(weak)] == [("weak/1", why)]


@pytest.mark.parametrize(
    ("public", "hidden"),
    [
        (None, {"kind": "call", "cases": [{"args": [1], "expected": 1}]}),
        (
            {"kind": "call", "cases": [{"args": [1], "expected": 1}]},
            {"kind": "call", "cases": [{"args": [1], "expected": 1}, {"args": [2], "expected": 2}]},  # one new
        ),
        (
            {"kind": "call", "cases": [{"args": [1], "expected": 1}]},
            {"kind": "call", "cases": [{"args": [1.5], "expected": 1}]},
        ),
        (
            {"kind": "call", "cases": [{"args": [1], "expected": 1}]},
            {"kind": "assert", "code": "def check(candidate):\n    assert candidate(1) == 1\n"},
        ),
    ],
)
def test_hidden_suites_with_their_own_cases_are_fine(public: dict[str, Any] | None, hidden: dict[str, Any]) -> None:
    assert task_warnings(parse_jsonl(jsonl(task("ok/1", public_tests=public, hidden_tests=hidden)))) == []


def test_load_warns_and_strict_refuses(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(jsonl(task("ok/1"), REPEATS))
    strict = TaskRegistry(tmp_path / "strict")
    with pytest.raises(WeakTasksError, match=r"task weak/1: all 1 of its hidden cases repeat") as caught:
        strict.load_file(path, strict=True)
    assert [w.task_id for w in caught.value.warnings] == ["weak/1"]
    assert strict.ids() == []  # nothing stored, not even the good task
    lenient = TaskRegistry(tmp_path / "lenient")
    report = lenient.load_file(path)
    assert [w.task_id for w in report.warnings] == ["weak/1"]
    assert report.as_json()["warnings"] == [{"task_id": "weak/1", "problem": report.warnings[0].problem}]
    assert lenient.ids() == ["ok/1", "weak/1"]


def test_cli_load_names_the_task(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from rewardstream.cli.main import _register, app

    _register()
    path = tmp_path / "t.jsonl"
    path.write_bytes(jsonl(task("ok/1"), REPEATS))
    runner = CliRunner()
    warned = runner.invoke(app, ["tasks", "load", str(path), "--dir", str(tmp_path / "a")])
    assert warned.exit_code == 0
    assert f"{path}: warning: task weak/1: all 1 of its hidden cases repeat inputs of its public suite" in warned.output
    refused = runner.invoke(app, ["tasks", "load", str(path), "--dir", str(tmp_path / "b"), "--strict"])
    assert refused.exit_code != 0
    assert isinstance(refused.exception, WeakTasksError)
    assert "refused (--strict): task weak/1" in refused.output
    assert not (tmp_path / "b").exists()
