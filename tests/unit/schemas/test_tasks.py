"""A task's canary flag: hidden like the tests, and a task that is no canary keeps its version."""

from __future__ import annotations

from pathlib import Path

import orjson

from schemas.codec import decode, encode
from schemas.tasks import Task, task_version

CANARY_FILE = Path(__file__).resolve().parents[3] / "examples" / "canary_tasks.jsonl"


def shipped_canary() -> Task:
    return decode(CANARY_FILE.read_bytes().splitlines()[0], Task)


def test_the_shipped_canary_contradicts_its_statement() -> None:
    task = shipped_canary()
    assert task.canary
    assert task.public_tests is None  # nothing a trainer sees hints at the contradiction
    suite = task.graded_suite
    assert suite.kind == "call"
    assert all(c.expected != sum(c.args) for c in suite.cases)  # type: ignore[arg-type]


def test_the_public_view_does_not_say_canary() -> None:
    public = shipped_canary().public()
    assert b"canary" not in encode(public).replace(b"canary/add", b"")


def test_a_task_that_is_no_canary_encodes_and_versions_as_before() -> None:
    data = orjson.loads(CANARY_FILE.read_bytes().splitlines()[0])
    del data["canary"]
    plain = decode(orjson.dumps(data), Task)
    assert b'"canary"' not in encode(plain)
    assert task_version(plain) != task_version(shipped_canary())
    assert task_version(decode(orjson.dumps({**data, "canary": False}), Task)) == task_version(plain)
