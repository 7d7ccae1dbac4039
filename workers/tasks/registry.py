"""The task registry: validated tasks on disk, every version kept, hidden tests stored apart from what trainers
may read.

Layout under ``settings.tasks_dir`` (``schemas.registry_layout``)::

    public/<task>.json                  latest PublicTask (no hidden tests), as before versions   dir 0755, 0644
    hidden/<task>.json                  latest full Task, as before versions                      dir 0700, 0600
    public/versions/<task>/<v>.json     PublicTask of version <v>, with its task_version          0644
    public/versions/<task>/latest       the latest version                                        0644
    hidden/versions/<task>/<v>.json     full Task of version <v> (sha256 of these bytes = <v>)    dirs 0700, 0600

A task's version is its content digest (``schemas.tasks.task_version``). A load of a changed task adds a
version and moves ``latest``; the old version stays readable, so a generation pinned to it, its
explanation and its replay still grade against it. Versions never change once written, so a reader may
cache them for ever; ``latest`` is read each time.

Why files: every worker machine can get the registry by syncing a directory (or mounting it read-only),
and the hidden directory's permissions keep it out of reach of the unprivileged sandbox user. Each file
is written atomically (temp file + rename): a version's hidden file, then its public view, then the
pointer, then the latest views, so a reader never sees a torn file, a pointer to a version not yet
there, or a public task without its hidden tests. A load validates every line first and stores nothing
if any fails.

A registry written before versions (only ``<task>.json`` files) keeps working: each such task reads as
its own digest (a reader that cannot read its hidden part does not know it: None), and the next load
gives every one of them its version files (``migrate``).
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import unquote

from schemas.codec import DecodeError, decode, encode
from schemas.errors import RewardstreamError
from schemas.registry_layout import (
    HIDDEN_DIR,
    PUBLIC_DIR,
    VERSIONS_DIR,
    file_name,
    file_stem,
    is_version,
    latest_pointer,
    read_latest,
    versions_dir,
)
from schemas.settings import Settings
from schemas.tasks import PublicTask, Task, task_version
from workers.tasks.files import (
    LineError,
    TaskFileError,
    TaskWarning,
    WeakTasksError,
    load_jsonl,
    load_numbered,
    numbered_tasks,
    parse_jsonl,
    task_warnings,
    write_atomic,
    write_jsonl,
)
from workers.tasks.loading import StoreReport, TaskLoading

__all__ = [
    "HIDDEN_DIR",
    "PUBLIC_DIR",
    "LineError",
    "StoreReport",
    "TaskFileError",
    "TaskNotFoundError",
    "TaskRegistry",
    "TaskVersionNotFoundError",
    "TaskWarning",
    "WeakTasksError",
    "file_name",
    "load_jsonl",
    "load_numbered",
    "numbered_tasks",
    "parse_jsonl",
    "task_warnings",
    "write_jsonl",
]


class TaskNotFoundError(RewardstreamError):
    """No task with that id is in the registry."""


class TaskVersionNotFoundError(TaskNotFoundError):
    """The registry has the task, but not in the version asked for."""


class TaskRegistry(TaskLoading):
    """Read and write tasks under one directory. Cheap to create; holds no open resources (only a memo of the
    digests of tasks stored before versions, keyed by their files' identity)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.public_dir = root / PUBLIC_DIR
        self.hidden_dir = root / HIDDEN_DIR
        self._legacy: dict[str, tuple[tuple[int, int, int], str]] = {}
        self._legacy_lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: Settings) -> TaskRegistry:
        """The registry at ``settings.tasks_dir``."""
        return cls(settings.tasks_dir)

    # ---- writing ----------------------------------------------------------------------------------------
    def _prepare(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        for directory, mode in (
            (self.public_dir, 0o755),  # public views are meant to be world-readable
            (self.hidden_dir, 0o700),  # explicit, whatever the umask
            (self.public_dir / VERSIONS_DIR, 0o755),
            (self.hidden_dir / VERSIONS_DIR, 0o700),
        ):
            directory.mkdir(mode=mode, exist_ok=True)
            directory.chmod(mode)

    def store(self, tasks: Iterable[Task]) -> StoreReport:
        """Store every task as its version (an old version stays readable) and make it the latest; tasks stored
        before versions get their version files first. Report what changed."""
        self._prepare()
        migrated = self.migrate()
        added: list[str] = []
        updated: list[str] = []
        unchanged: list[str] = []
        versions: dict[str, str] = {}
        replaced: dict[str, str] = {}
        for task in tasks:
            version, before = self._store_one(task)
            versions[task.task_id] = version
            if before == version:
                unchanged.append(task.task_id)
            elif before is None:
                added.append(task.task_id)
            else:
                updated.append(task.task_id)
                if before:
                    replaced[task.task_id] = before
        return StoreReport(
            tuple(added), tuple(updated), tuple(unchanged), versions=versions, replaced=replaced, migrated=migrated
        )

    def _store_one(self, task: Task) -> tuple[str, str | None]:
        """(the task's version, the latest version it had before: None if it is new, "" if that cannot be
        read). Files already as they should be are not written again."""
        hidden = encode(task)
        version = hashlib.sha256(hidden).hexdigest()  # == task_version(task): these are its wire bytes
        view = task.public()
        before = self._before(task.task_id)
        self._write_version(task.task_id, version, hidden, encode(view))
        if read_latest(self.root, task.task_id) != version:
            write_atomic(latest_pointer(self.root, task.task_id), version.encode() + b"\n", 0o644)
        latest_public = encode(view.model_copy(update={"task_version": None}))  # as before versions
        for path, data, mode in (
            (self.hidden_dir / file_name(task.task_id), hidden, 0o600),
            (self.public_dir / file_name(task.task_id), latest_public, 0o644),
        ):
            if not _holds(path, data):
                write_atomic(path, data, mode)
        return version, before

    def _before(self, task_id: str) -> str | None:
        """The task's latest version before a load: None if it is new, "" if it cannot be told."""
        pointed = read_latest(self.root, task_id)
        if pointed is not None:
            return pointed
        if not (self.hidden_dir / file_name(task_id)).exists():
            return None
        try:
            return self._digest_of(self.hidden_dir / file_name(task_id))
        except (OSError, DecodeError):
            return ""

    def _write_version(self, task_id: str, version: str, hidden: bytes, public: bytes) -> None:
        """A version's files, hidden first; written once (what is there already is kept if it is right)."""
        for is_hidden, data, mode in ((True, hidden, 0o600), (False, public, 0o644)):
            directory = versions_dir(self.root, task_id, hidden=is_hidden)
            if not directory.is_dir():
                directory.mkdir(mode=0o700)  # explicit below, whatever the umask: public views are world-readable
                directory.chmod(0o700 if is_hidden else 0o755)
            path = directory / f"{version}.json"
            if not _holds(path, data):
                write_atomic(path, data, mode)

    def migrate(self) -> tuple[str, ...]:
        """Give every task stored before versions its version files and pointer (its latest files are left as
        they are); a task whose hidden file cannot be read or parsed is left alone. Returns the ids migrated."""
        done: list[str] = []
        for task_id in self.ids():
            if read_latest(self.root, task_id) is not None:
                continue
            try:
                task = decode((self.hidden_dir / file_name(task_id)).read_bytes(), Task)
            except (OSError, DecodeError):
                continue
            version = task_version(task)
            self._write_version(task_id, version, encode(task), encode(task.public()))
            write_atomic(latest_pointer(self.root, task_id), version.encode() + b"\n", 0o644)
            done.append(task_id)
        return tuple(done)

    # ---- reading ----------------------------------------------------------------------------------------
    def ids(self) -> list[str]:
        """Every task id in the registry, sorted."""
        if not self.public_dir.is_dir():
            return []
        return sorted(unquote(p.name.removesuffix(".json")) for p in self.public_dir.glob("*.json") if p.is_file())

    def latest_version(self, task_id: str) -> str | None:
        """The task's latest version, read now (a load may move it at any moment). For a task stored before
        versions, its digest; None if this reader cannot read its hidden part to compute it.
        TaskNotFoundError if the registry has no such task."""
        _check_id(task_id)
        version = self._pointer(task_id)
        if version is not None:
            return version
        return self._legacy_version(task_id)

    def versions(self, task_id: str) -> list[str]:
        """Every stored version of the task, oldest first (by when each was stored)."""
        _check_id(task_id)
        directory = versions_dir(self.root, task_id, hidden=False)
        found = [(p.stat().st_mtime_ns, p.stem) for p in directory.glob("*.json") if is_version(p.stem)]
        if found:
            return [stem for _mtime, stem in sorted(found)]
        legacy = self._legacy_version(task_id)
        return [] if legacy is None else [legacy]

    def public(self, task_id: str, version: str | None = None) -> PublicTask:
        """The public view of a task (what trainers and executors may read): of ``version``, or of the latest.
        Its ``task_version`` names the version (None only for a task stored before versions whose digest this
        reader cannot compute)."""
        _check_id(task_id)
        if version is None:
            version = self.latest_version(task_id)
            if version is None:
                return decode(self._read(self.public_dir / file_name(task_id), task_id), PublicTask)
        self._check_version(version)
        path = versions_dir(self.root, task_id, hidden=False) / f"{version}.json"
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            legacy = self._legacy_public(task_id, version)
            if legacy is None:
                raise self._no_version(task_id, version) from None
            return legacy
        except OSError as exc:
            raise RewardstreamError(f"cannot read task {task_id!r} from {path}: {exc.strerror or exc}") from exc
        view = decode(data, PublicTask)
        if view.task_version != version:
            raise RewardstreamError(f"{path} is not the public view of version {version} of task {task_id!r}")
        return view

    def task(self, task_id: str, version: str | None = None) -> Task:
        """The full task with hidden tests (verifiers only: needs read access to hidden/): of ``version``, or of
        the latest."""
        _check_id(task_id)
        if version is None:
            version = self.latest_version(task_id)
            if version is None:  # a task stored before versions whose hidden file this reader cannot read
                return decode(self._read(self.hidden_dir / file_name(task_id), task_id), Task)
        self._check_version(version)
        path = versions_dir(self.root, task_id, hidden=True) / f"{version}.json"
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            if self._legacy_version(task_id) != version:
                raise self._no_version(task_id, version) from None
            return decode(self._read(self.hidden_dir / file_name(task_id), task_id), Task)
        except OSError as exc:
            raise RewardstreamError(f"cannot read task {task_id!r} from {path}: {exc.strerror or exc}") from exc
        if hashlib.sha256(data).hexdigest() != version:
            raise RewardstreamError(f"{path} does not hold version {version} of task {task_id!r} (its digest differs)")
        return decode(data, Task)

    # ---- helpers ----------------------------------------------------------------------------------------
    def _pointer(self, task_id: str) -> str | None:
        try:
            return read_latest(self.root, task_id)
        except OSError as exc:
            raise RewardstreamError(
                f"cannot read the latest version of task {task_id!r}: {exc.strerror or exc}"
            ) from exc

    @staticmethod
    def _check_version(version: str) -> None:
        if not is_version(version):
            raise TaskVersionNotFoundError(f"{version!r} is not a task version (64 lowercase hex digits)")

    def _no_version(self, task_id: str, version: str) -> TaskVersionNotFoundError:
        if not (self.public_dir / file_name(task_id)).exists() and read_latest(self.root, task_id) is None:
            return TaskVersionNotFoundError(f"no task {task_id!r} in the registry at {self.root}")
        return TaskVersionNotFoundError(f"no version {version} of task {task_id!r} in the registry at {self.root}")

    def _legacy_version(self, task_id: str) -> str | None:
        """The digest of a task stored before versions (None if its hidden file cannot be read here);
        TaskNotFoundError if there is no such task."""
        if not (self.public_dir / file_name(task_id)).exists():
            raise TaskNotFoundError(f"no task {task_id!r} in the registry at {self.root}")
        try:
            return self._digest_of(self.hidden_dir / file_name(task_id))
        except (OSError, DecodeError):
            return None

    def _digest_of(self, path: Path) -> str:
        """The version of the full task in ``path`` (re-encoded: the bytes as a load would store them), memoised
        by the file's identity so a registry stored before versions costs one parse per change."""
        info = path.stat()
        identity = (info.st_ino, info.st_mtime_ns, info.st_size)
        with self._legacy_lock:
            known = self._legacy.get(str(path))
        if known is not None and known[0] == identity:
            return known[1]
        version = task_version(decode(path.read_bytes(), Task))
        with self._legacy_lock:
            if len(self._legacy) > 65_536:
                self._legacy.clear()
            self._legacy[str(path)] = (identity, version)
        return version

    def _legacy_public(self, task_id: str, version: str) -> PublicTask | None:
        """The public view of a task stored before versions, if it is ``version``."""
        try:
            if self._legacy_version(task_id) != version:
                return None
        except TaskNotFoundError:
            return None
        view = decode(self._read(self.public_dir / file_name(task_id), task_id), PublicTask)
        return view.model_copy(update={"task_version": version})

    def _read(self, path: Path, task_id: str) -> bytes:
        try:
            return path.read_bytes()
        except FileNotFoundError:
            raise TaskNotFoundError(f"no task {task_id!r} in the registry at {self.root}") from None
        except OSError as exc:
            raise RewardstreamError(f"cannot read task {task_id!r} from {path}: {exc.strerror or exc}") from exc


def _check_id(task_id: str) -> None:
    """TaskNotFoundError for what cannot be a task id (it would name no file of the registry)."""
    try:
        file_stem(task_id)
    except ValueError:
        raise TaskNotFoundError(f"{task_id!r} is not a task id") from None


def _holds(path: Path, data: bytes) -> bool:
    """Whether ``path`` already holds exactly ``data``."""
    try:
        return path.read_bytes() == data
    except OSError:
        return False
