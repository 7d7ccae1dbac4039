"""The task registry: validated tasks on disk, hidden tests stored apart from what trainers may read.

Layout under ``settings.tasks_dir``::

    public/<task>.json   PublicTask (no hidden tests)   dir 0755, files 0644: trainers, executors
    hidden/<task>.json   full Task                      dir 0700, files 0600: verifiers only

Why files: every worker machine can get the registry by syncing a directory (or mounting it read-only),
and the hidden directory's permissions keep it out of reach of the unprivileged sandbox user. Each file
is written atomically (temp file + rename), hidden before public, so a reader never sees a torn file or a
public task without its hidden tests. A load validates every line first and stores nothing if any fails.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, unquote

from schemas.codec import DecodeError, decode, encode
from schemas.errors import RewardstreamError, ValidationError
from schemas.settings import Settings
from schemas.tasks import PublicTask, Task
from workers.tasks.visibility import hidden_repeats_public

PUBLIC_DIR = "public"
HIDDEN_DIR = "hidden"
_SAFE = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-"


class TaskNotFoundError(RewardstreamError):
    """No task with that id is in the registry."""


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


@dataclass(frozen=True, slots=True)
class StoreReport:
    """What ``TaskRegistry.store`` did, and the warnings about what it stored."""

    added: tuple[str, ...]
    updated: tuple[str, ...]
    unchanged: tuple[str, ...]
    warnings: tuple[TaskWarning, ...] = ()

    def as_json(self) -> dict[str, object]:
        """JSON form for ``rewardstream tasks load --json``."""
        return {
            "added": list(self.added),
            "updated": list(self.updated),
            "unchanged": list(self.unchanged),
            "total": len(self.added) + len(self.updated) + len(self.unchanged),
            "warnings": [{"task_id": w.task_id, "problem": w.problem} for w in self.warnings],
        }


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
    _write_atomic(path, b"".join(encode(t) + b"\n" for t in tasks), 0o600)


def file_name(task_id: str) -> str:
    """File name for a task id (ids may contain '/', e.g. HumanEval/0)."""
    return quote(task_id, safe=_SAFE) + ".json"


def _write_atomic(path: Path, data: bytes, mode: int) -> None:
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


class TaskRegistry:
    """Read and write tasks under one directory. Cheap to create; holds no open resources."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.public_dir = root / PUBLIC_DIR
        self.hidden_dir = root / HIDDEN_DIR

    @classmethod
    def from_settings(cls, settings: Settings) -> TaskRegistry:
        """The registry at ``settings.tasks_dir``."""
        return cls(settings.tasks_dir)

    def _prepare(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.public_dir.mkdir(mode=0o755, exist_ok=True)
        self.hidden_dir.mkdir(mode=0o700, exist_ok=True)
        self.public_dir.chmod(0o755)  # public views are meant to be world-readable
        self.hidden_dir.chmod(0o700)  # explicit, whatever the umask

    def store(self, tasks: Iterable[Task]) -> StoreReport:
        """Write every task (hidden file first, then its public view); report what changed."""
        self._prepare()
        added: list[str] = []
        updated: list[str] = []
        unchanged: list[str] = []
        for task in tasks:
            name = file_name(task.task_id)
            hidden, public = encode(task), encode(task.public())
            hidden_path, public_path = self.hidden_dir / name, self.public_dir / name
            old = hidden_path.read_bytes() if hidden_path.exists() else None
            if old == hidden and public_path.exists() and public_path.read_bytes() == public:
                unchanged.append(task.task_id)
                continue
            _write_atomic(hidden_path, hidden, 0o600)
            _write_atomic(public_path, public, 0o644)
            (added if old is None else updated).append(task.task_id)
        return StoreReport(tuple(added), tuple(updated), tuple(unchanged))

    def load_file(self, path: Path, *, strict: bool = False) -> StoreReport:
        """Validate a whole JSONL file, then store it; nothing is stored if any line is invalid, nor, when
        ``strict``, if any task has a warning (``WeakTasksError``)."""
        tasks = load_jsonl(path)
        warnings = task_warnings(tasks)
        if strict and warnings:
            raise WeakTasksError(str(path), warnings)
        report = self.store(tasks)
        return StoreReport(report.added, report.updated, report.unchanged, tuple(warnings))

    def ids(self) -> list[str]:
        """Every task id in the registry, sorted."""
        if not self.public_dir.is_dir():
            return []
        return sorted(unquote(p.name.removesuffix(".json")) for p in self.public_dir.glob("*.json"))

    def public(self, task_id: str) -> PublicTask:
        """The public view of a task: what trainers and executors may read."""
        return decode(self._read(self.public_dir, task_id), PublicTask)

    def task(self, task_id: str) -> Task:
        """The full task with hidden tests: verifiers only (needs read access to hidden/)."""
        return decode(self._read(self.hidden_dir, task_id), Task)

    def _read(self, directory: Path, task_id: str) -> bytes:
        path = directory / file_name(task_id)
        try:
            return path.read_bytes()
        except FileNotFoundError:
            raise TaskNotFoundError(f"no task {task_id!r} in the registry at {self.root}") from None
        except OSError as exc:
            raise RewardstreamError(f"cannot read task {task_id!r} from {path}: {exc.strerror or exc}") from exc
