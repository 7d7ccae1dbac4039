"""The one solutions-file reader of ``grade`` and ``submit``: what a line may hold, and errors by line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from schemas.errors import ConfigError, ValidationError
from schemas.solutions import Solution, numbered_solutions


def _file(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "s.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    return path


def test_lines_are_numbered_blank_ones_skipped_and_other_keys_ignored(tmp_path: Path) -> None:
    version = "a" * 64
    path = _file(
        tmp_path,
        json.dumps({"task_id": "t", "generation_id": "g1", "code": ""}),
        "   ",
        json.dumps(
            {"task_id": "t", "generation_id": "g2", "code": "x", "language": "c", "task_version": version, "note": 1}
        ),
    )
    assert numbered_solutions(path) == [
        (1, Solution(task_id="t", generation_id="g1", code="")),
        (3, Solution(task_id="t", generation_id="g2", code="x", language="c", task_version=version)),
    ]


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("{nope", r"s\.jsonl:2: not JSON"),
        ("[1]", r"s\.jsonl:2: expected an object"),
        ('{"task_id": "t", "code": "x"}', r"s\.jsonl:2: generation_id must be a non-empty string"),
        ('{"task_id": "", "generation_id": "g", "code": "x"}', r"s\.jsonl:2: task_id must be a non-empty string"),
        ('{"task_id": "t", "generation_id": "g"}', r"s\.jsonl:2: code must be a string"),
        ('{"task_id": "t", "generation_id": "g", "code": "x", "language": 3}', r"s\.jsonl:2: language must be"),
        ('{"task_id": "t", "generation_id": "g", "code": "x", "language": "cobol"}', r"s\.jsonl:2: language: "),
        ('{"task_id": "t", "generation_id": "g", "code": "x", "task_version": "v1"}', r"s\.jsonl:2: task_version"),
        (json.dumps({"task_id": "t", "generation_id": "g" * 129, "code": "x"}), r"s\.jsonl:2: generation_id: "),
    ],
)
def test_a_bad_line_is_named_by_its_number_and_its_problem(tmp_path: Path, line: str, problem: str) -> None:
    path = _file(tmp_path, json.dumps({"task_id": "t", "generation_id": "g0", "code": "x"}), line)
    with pytest.raises(ValidationError, match=problem):
        numbered_solutions(path)


def test_an_unreadable_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        numbered_solutions(tmp_path / "missing.jsonl")
