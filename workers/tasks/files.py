"""Task files: JSONL, one ``rewardstream.task/v1`` per line, validated whole (every error, with its line and
field) before anything is stored; and the warnings about tasks that load but are probably mistakes.

Kept apart from the registry (``workers.tasks.registry``), which stores what these functions validated.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from schemas.codec import DecodeError, decode, encode
from schemas.errors import ValidationError
from schemas.tasks import Task
from workers.tasks.visibility import hidden_repeats_public


@dataclass(frozen=True, slots=True)
class LineError:
    """One problem in a JSONL task file."""

    line: int
    path: str
    problem: str

    def __str__(self) -> str:
        where = f"{self.path}: " if self.path else ""
        return f"line {self.line}: {where}{self.problem}"


_LISTED = 20


def _listed(items: Sequence[object]) -> str:
    """The first few of ``items``, ``; ``-joined, and how many more there are: an error line stays readable."""
    more = f"; ... and {len(items) - _LISTED} more" if len(items) > _LISTED else ""
    return "; ".join(str(item) for item in items[:_LISTED]) + more


class TaskFileError(ValidationError):
    """A task file has invalid lines; ``errors`` lists every one (nothing was stored)."""

    def __init__(self, source: str, errors: Sequence[LineError]) -> None:
        self.source = source
        self.errors: tuple[LineError, ...] = tuple(errors)
        super().__init__(f"{len(self.errors)} error(s) in {source}, nothing stored: {_listed(self.errors)}")


@dataclass(frozen=True, slots=True)
class TaskWarning:
    """A task that loads but is probably a mistake (e.g. hidden cases the public suite already shows)."""

    task_id: str
    problem: str

    def __str__(self) -> str:
        return f"task {self.task_id}: {self.problem}"


class WeakTasksError(ValidationError):
    """``strict`` loading refused a file because some tasks have warnings (nothing was stored)."""

    def __init__(self, source: str, warnings: Sequence[TaskWarning]) -> None:
        self.source = source
        self.warnings: tuple[TaskWarning, ...] = tuple(warnings)
        super().__init__(
            f"{len(self.warnings)} task(s) in {source} refused (strict), nothing stored: {_listed(self.warnings)}"
        )


def task_warnings(tasks: Iterable[Task]) -> list[TaskWarning]:
    """Every task whose hidden suite gives no signal beyond its public suite."""
    out: list[TaskWarning] = []
    for task in tasks:
        why = hidden_repeats_public(task)
        if why is not None:
            out.append(TaskWarning(task.task_id, f"{why}: the hidden suite gives no signal the public one does not"))
    return out


def parse_jsonl(data: bytes, source: str = "<tasks>") -> list[Task]:
    """Validate every line of a JSONL task file; raise TaskFileError listing all problems."""
    return [task for _, task in numbered_tasks(data, source)]


def numbered_tasks(data: bytes, source: str = "<tasks>") -> list[tuple[int, Task]]:
    """Every task of a JSONL task file with its line number (``parse_jsonl``'s rules: the wire codec's
    validation, blank lines skipped, a task id at most once); raise TaskFileError listing all problems."""
    tasks: list[tuple[int, Task]] = []
    errors: list[LineError] = []
    first_line: dict[str, int] = {}
    for number, line in enumerate(data.split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            task = decode(line, Task)
        except DecodeError as exc:
            errors.extend(LineError(number, path, problem) for path, problem in exc.problems)
            continue
        if task.task_id in first_line:
            errors.append(LineError(number, "task_id", f"duplicate of line {first_line[task.task_id]}"))
            continue
        first_line[task.task_id] = number
        tasks.append((number, task))
    if errors:
        raise TaskFileError(source, errors)
    if not tasks:
        raise TaskFileError(source, [LineError(0, "", "no tasks in file")])
    return tasks


def load_jsonl(path: Path) -> list[Task]:
    """Read and validate a JSONL task file (see ``parse_jsonl``)."""
    return [task for _, task in load_numbered(path)]


def load_numbered(path: Path) -> list[tuple[int, Task]]:
    """Read and validate a JSONL task file, each task with its line number (see ``numbered_tasks``)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ValidationError(f"cannot read task file {path}: {exc.strerror or exc}") from exc
    return numbered_tasks(data, str(path))


def write_jsonl(path: Path, tasks: Iterable[Task]) -> None:
    """Write tasks as JSONL atomically (readers never see half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, b"".join(encode(t) + b"\n" for t in tasks), 0o600)


def write_atomic(path: Path, data: bytes, mode: int) -> None:
    """Write ``data`` to ``path`` with ``mode`` so readers see the old or the new file, never a torn one."""
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
