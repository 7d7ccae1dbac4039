"""The image-task parts of a task: packed trees pinned by digest, caps, and the rules that keep image tasks
apart from one-shot and workspace tasks."""

from __future__ import annotations

import base64
import hashlib
from typing import Any

import orjson
import pytest

from schemas.codec import DecodeError, decode
from schemas.environments import MAX_FILES_BYTES, PackedTree
from schemas.tasks import PublicTask, Task

TREE = PackedTree.of(b"x" * 1024).model_dump()


def image_task(**changes: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "task_id": "img/1",
        "prompt": "do it",
        "environment": {"context": TREE, "workdir": "/app"},
        "hidden_tests": {"kind": "verifier", "tests": TREE},
        "solution": {"solution": TREE},
    }
    raw.update(changes)
    return {k: v for k, v in raw.items() if v is not None}


def problem(raw: dict[str, Any], model: type[Task] | type[PublicTask] = Task) -> str:
    with pytest.raises(DecodeError) as caught:
        decode(orjson.dumps(raw), model)
    return str(caught.value)


def test_an_image_task_decodes() -> None:
    task = decode(orjson.dumps(image_task()), Task)
    assert task.environment is not None
    assert task.environment.context is not None
    assert task.environment.context.tar() == b"x" * 1024


def test_a_tree_whose_digest_is_not_its_bytes_is_refused() -> None:
    wrong = {**TREE, "sha256": hashlib.sha256(b"other").hexdigest()}
    assert "sha256 is not the digest of the tar" in problem(
        image_task(hidden_tests={"kind": "verifier", "tests": wrong})
    )
    assert "not base64" in problem(image_task(solution={"solution": {**TREE, "tar_b64": "@@@"}}))


def test_trees_over_their_caps_are_refused() -> None:
    big = PackedTree.of(b"y" * (MAX_FILES_BYTES + 1)).model_dump()
    assert "over the" in problem(image_task(hidden_tests={"kind": "verifier", "tests": big}))


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"environment": None}, "set environment"),
        ({"workspace": {"files": {"a.py": ""}}}, "not a workspace"),
        ({"entry_point": "f"}, "not by calling a function"),
        ({"protected": ["tests/**"]}, "fresh container"),
        ({"public_tests": {"kind": "call", "cases": [{"args": [], "expected": 1}]}}, "verifier alone"),
        ({"hidden_tests": {"kind": "call", "cases": [{"args": [], "expected": 1}]}}, "graded by its verifier alone"),
        ({"environment": {"workdir": "/app"}}, "needs a context or a docker_image"),
        ({"environment": {"context": TREE, "workdir": "/app/../etc"}}, ". or .. segment"),
        ({"environment": {"context": TREE, "workdir": "app"}}, "workdir"),
        ({"environment": {"context": TREE, "workdir": "//"}}, "must be a directory of its own"),
        ({"environment": {"context": TREE, "workdir": "/tests"}}, "overlaps /tests"),
        ({"environment": {"context": TREE, "workdir": "/logs/verifier/x"}}, "overlaps /logs"),
        ({"environment": {"context": TREE, "workdir": "/solution/"}}, "overlaps /solution"),
        ({"environment": {"context": TREE, "workdir": "/app", "env": {"1BAD": "x"}}}, "env"),
    ],
)
def test_image_task_rules(changes: dict[str, Any], named: str) -> None:
    assert named in problem(image_task(**changes))


def test_the_public_view_has_no_tests_and_no_solution() -> None:
    task = decode(orjson.dumps(image_task()), Task)
    public = task.public()
    assert public.environment == task.environment
    dumped = public.model_dump(by_alias=True)
    assert "hidden_tests" not in dumped
    assert "solution" not in dumped
    assert decode(orjson.dumps(image_task(hidden_tests=None, solution=None)), PublicTask).environment is not None


def test_a_task_without_the_new_fields_encodes_as_before() -> None:
    raw = {"task_id": "t/1", "prompt": "p", "entry_point": "f",
           "hidden_tests": {"kind": "call", "cases": [{"args": [], "expected": 1}]}}  # fmt: skip
    encoded = orjson.loads(orjson.dumps(decode(orjson.dumps(raw), Task).model_dump(mode="json", by_alias=True)))
    assert "environment" not in encoded
    assert "solution" not in encoded
    assert base64  # the module's encoding is base64 (PackedTree.of)
