"""Loading a task file or a directory of Harbor tasks into a registry: validated whole first, then stored.

Why shared: the directory registry (``workers.tasks.registry``) and the S3 one (``workers.tasks.s3_registry``)
differ only in how they store; what a load refuses (an invalid line, a weak task under ``--strict``, a failed
image build) and what it reports must be the same for both.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from schemas.tasks import Task
from workers.tasks.files import TaskWarning, WeakTasksError, load_jsonl, task_warnings
from workers.tasks.harbor.directory import read_task_tree


@dataclass(frozen=True, slots=True)
class StoreReport:
    """What ``TaskRegistry.store`` did, and the warnings about what it stored. ``versions``: each stored
    task's version, now its latest; ``replaced``: the version an updated task had before (still readable);
    ``migrated``: tasks stored before versions that got their version files."""

    added: tuple[str, ...]
    updated: tuple[str, ...]
    unchanged: tuple[str, ...]
    warnings: tuple[TaskWarning, ...] = ()
    versions: Mapping[str, str] = field(default_factory=dict)
    replaced: Mapping[str, str] = field(default_factory=dict)
    migrated: tuple[str, ...] = ()

    def as_json(self) -> dict[str, object]:
        """JSON form for ``rewardstream tasks load --json``."""
        return {
            "added": list(self.added),
            "updated": list(self.updated),
            "unchanged": list(self.unchanged),
            "total": len(self.added) + len(self.updated) + len(self.unchanged),
            "warnings": [{"task_id": w.task_id, "problem": w.problem} for w in self.warnings],
            "versions": dict(self.versions),
            "replaced": dict(self.replaced),
            "migrated": list(self.migrated),
        }


class TaskLoading(ABC):
    """``load_file``, ``load_dir`` and ``load_tasks`` over a registry's ``store``."""

    @abstractmethod
    def store(self, tasks: Iterable[Task]) -> StoreReport:
        """Store every task as its version and make it the latest; report what changed."""

    def load_file(self, path: Path, *, strict: bool = False) -> StoreReport:
        """Validate a whole JSONL file, then store it; nothing is stored if any line is invalid, nor, when
        ``strict``, if any task has a warning (``WeakTasksError``)."""
        return self.load_tasks(load_jsonl(path), str(path), strict=strict)

    def load_dir(
        self, path: Path, *, strict: bool = False, prepare: Callable[[list[Task]], None] | None = None
    ) -> StoreReport:
        """Validate every Harbor task under ``path`` (each subdirectory holding a ``task.toml``), then store
        them; nothing is stored if any is invalid (``TaskDirError``), nor, when ``strict``, if any task has a
        warning, nor if ``prepare(tasks)`` (e.g. building their images) raises."""
        read = read_task_tree(path)
        told = [TaskWarning(item.task.task_id, warning) for item in read for warning in item.warnings]
        return self.load_tasks([item.task for item in read], str(path), strict=strict, warnings=told, prepare=prepare)

    def load_tasks(
        self,
        tasks: list[Task],
        source: str,
        *,
        strict: bool = False,
        warnings: Iterable[TaskWarning] = (),
        prepare: Callable[[list[Task]], None] | None = None,
    ) -> StoreReport:
        """Store validated ``tasks`` with their warnings (and those ``task_warnings`` finds); when ``strict``,
        nothing if there is any (``WeakTasksError``), and nothing if ``prepare(tasks)``, run before storing,
        raises."""
        told = [*warnings, *task_warnings(tasks)]
        if strict and told:
            raise WeakTasksError(source, told)
        if prepare is not None:
            prepare(tasks)
        return replace(self.store(tasks), warnings=tuple(told))
