"""The task registry: all-or-nothing loads with every error, hidden tests stored apart, atomic files."""

from __future__ import annotations

import copy
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
    file_name,
    parse_jsonl,
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
        task("a/5", limits={"timeout_s": -1}, language="c"),
    )
    with pytest.raises(TaskFileError) as caught:
        parse_jsonl(data, "f.jsonl")
    assert [str(e) for e in caught.value.errors] == [
        "line 2: hidden_tests.cases[0].args: input should be a valid array",
        "line 4: task_id: duplicate of line 1",
        "line 5: not JSON: unexpected character, expected a string key: line 1 column 2 (char 1)",
        "line 6: language: input should be 'python'",
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
