"""What the task-version tests share: an ``add`` task in two versions and a generation of it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from schemas.codec import encode
from schemas.events import GenerationEvent
from schemas.tasks import Task, task_version
from workers.tasks.registry import file_name

ADD = "def add(a, b):\n    return a + b\n"


def add_task(hidden_expected: int = 42, task_id: str = "T/1") -> Task:
    """``add`` whose hidden case expects ``hidden_expected`` for 40 + 2 (41: a wrong expected value)."""
    return Task.model_validate({
        "task_id": task_id, "prompt": "def add(a, b):\n", "entry_point": "add",
        "public_tests": {"kind": "call", "cases": [{"args": [1, 2], "expected": 3}]},
        "hidden_tests": {"kind": "call", "cases": [{"args": [40, 2], "expected": hidden_expected},
                                                   {"args": [5, 5], "expected": 10}]},
        "limits": {"timeout_s": 5, "memory_mb": 256},
    })  # fmt: skip


WRONG, RIGHT = add_task(41), add_task(42)
V1, V2 = task_version(WRONG), task_version(RIGHT)


def generation(**fields: Any) -> GenerationEvent:
    values: dict[str, Any] = {"generation_id": "g1", "episode_id": "g1", "run_id": "r", "task_id": "T/1",
                              "policy_version": "p", "code": ADD, **fields}  # fmt: skip
    return GenerationEvent(**values)


def legacy_registry(root: Path, *tasks: Task) -> None:
    """A registry as stored before versions: only public/<name>.json and hidden/<name>.json."""
    (root / "public").mkdir(parents=True)
    (root / "hidden").mkdir(mode=0o700)
    for task in tasks:
        (root / "hidden" / file_name(task.task_id)).write_bytes(encode(task))
        view = task.public().model_copy(update={"task_version": None})
        (root / "public" / file_name(task.task_id)).write_bytes(encode(view))
