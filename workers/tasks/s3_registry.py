"""The task registry in an S3 bucket: every version kept, the hidden part under a prefix of its own.

Why S3: workers on many machines read one registry without syncing a directory, and the bucket's policy, not
a file mode, keeps the hidden tests to the verifiers (``workers.tasks.s3_policy``). The layout and the checks
on what is read back are ``workers.tasks.s3_layout``.

Why it can never grade with a stale task: a version is the task's content digest (``task_version``) and its
objects never change once written, so a worker keeps the versions it fetched in a local cache by version
(``VersionCache``) and fetches one it does not hold; the ``latest`` pointer, which a load moves, is read each
time it is needed. A load writes a task's hidden version, then its public view, then its history, then its
pointer, so a reader never sees a pointer to a version that is not there yet.

Why a load of 100,000 tasks is fast: one listing of the pointers (with their ETags, the MD5 of their bytes)
tells which tasks are already at the version being loaded, without a request each, and the rest are written
by a pool of threads. A new task costs three PUTs (its history is written when a second version comes).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import TypeVar

from schemas.codec import encode
from schemas.registry_layout import file_stem, is_version
from schemas.registry_s3 import POINTER_MAX, RegistryLocation
from schemas.settings import Settings
from schemas.tasks import PublicTask, Task
from workers.tasks.loading import StoreReport, TaskLoading
from workers.tasks.registry import TaskNotFoundError, TaskVersionNotFoundError
from workers.tasks.s3_access import RegistryAccessError, S3Access, registry_client
from workers.tasks.s3_layout import (
    HISTORY_MAX,
    CorruptObjectError,
    decode_full,
    decode_history,
    decode_pointer,
    decode_public,
    encode_history,
)
from workers.tasks.version_cache import VersionCache

T = TypeVar("T")
#: Uploading threads of a load: S3 requests mostly wait on the network and the server.
LOAD_THREADS = 32


@dataclass(frozen=True, slots=True)
class _Stored:
    """What storing one task did: its version, and the latest one it had before (None: new; "": unreadable)."""

    task_id: str
    version: str
    before: str | None


class S3TaskRegistry(TaskLoading):
    """Read and write tasks under ``s3://bucket/prefix``; thread-safe."""

    def __init__(
        self,
        location: RegistryLocation,
        access: S3Access,
        cache: VersionCache | None = None,
        *,
        threads: int = LOAD_THREADS,
    ) -> None:
        self.location = location
        self.access = access
        self.cache = cache
        self.threads = threads

    @classmethod
    def open(cls, url: str, settings: Settings, *, threads: int = LOAD_THREADS) -> S3TaskRegistry:
        """The registry at ``url`` (``s3://bucket/prefix``) through the S3 of ``settings`` (endpoint and
        credentials: a worker's, a verifier's or a loader's), with its version cache under the cache dir."""
        location = RegistryLocation.parse(url)
        client = registry_client(settings, connections=threads)
        cache = VersionCache(settings.local.cache_dir / "task-cache", settings.tasks_cache_mb * 1024 * 1024)
        return cls(location, S3Access(client, location.bucket, settings.s3.endpoint), cache, threads=threads)

    @property
    def root(self) -> str:
        """Where the registry is, as a user names it (``tasks load`` prints it)."""
        return self.location.url

    # ---- writing ----------------------------------------------------------------------------------------
    def store(self, tasks: Iterable[Task]) -> StoreReport:
        """Store every task as its version and make it the latest (an old version stays readable); tasks
        already at that version cost no request. Report what changed."""
        pointers = {item.key: item.etag for item in self.access.list(self.location.latest_dir())}
        todo: list[Callable[[], _Stored]] = []
        done: list[_Stored] = []
        order: list[str] = []
        for task in tasks:
            hidden = encode(task)
            version = hashlib.sha256(hidden).hexdigest()  # == task_version(task): these are its wire bytes
            order.append(task.task_id)
            etag = pointers.get(self.location.latest_key(task.task_id))
            if etag is not None and etag == hashlib.md5(_pointer(version), usedforsecurity=False).hexdigest():
                done.append(_Stored(task.task_id, version, version))
            else:
                todo.append(partial(self._store_one, task, hidden, version, etag is not None))
        done.extend(self._run(todo))
        by_id = {item.task_id: item for item in done}
        stored = [by_id[task_id] for task_id in order]
        return StoreReport(
            added=tuple(s.task_id for s in stored if s.before is None),
            updated=tuple(s.task_id for s in stored if s.before is not None and s.before != s.version),
            unchanged=tuple(s.task_id for s in stored if s.before == s.version),
            versions={s.task_id: s.version for s in stored},
            replaced={s.task_id: s.before for s in stored if s.before and s.before != s.version},
        )

    def _run(self, jobs: list[Callable[[], _Stored]]) -> list[_Stored]:
        """Run ``jobs`` on the pool; the first failure is raised once every job has ended (a load cut short
        leaves each task whole: its old version or its new one)."""
        if not jobs:
            return []
        with ThreadPoolExecutor(min(self.threads, len(jobs)), thread_name_prefix="task-upload") as pool:
            futures = [pool.submit(job) for job in jobs]
        failed = [f.exception() for f in futures if f.exception() is not None]
        if failed:
            stored = len(futures) - len(failed)
            raise RegistryAccessError(
                f"{len(failed)} of {len(futures)} changed task(s) not stored ({stored} were): {failed[0]}"
            ) from failed[0]
        return [f.result() for f in futures]

    def _store_one(self, task: Task, hidden: bytes, version: str, listed: bool) -> _Stored:
        location, access = self.location, self.access
        before: str | None = None
        if listed:
            try:
                before = self._read_pointer(task.task_id, missing_ok=True) or ""
            except CorruptObjectError:  # overwritten below, like a pointer that cannot be read
                before = ""
            if before == version:
                return _Stored(task.task_id, version, before)
        access.put(location.version_key(task.task_id, version, hidden=True), hidden)
        access.put(location.version_key(task.task_id, version, hidden=False), encode(task.public()))
        if before:
            history = self._history(task.task_id, before)
            if version not in history:
                access.put(location.history_key(task.task_id), encode_history([*history, version]), "text/plain")
        access.put(location.latest_key(task.task_id), _pointer(version), "text/plain")
        return _Stored(task.task_id, version, before)

    # ---- reading ----------------------------------------------------------------------------------------
    def ids(self) -> list[str]:
        """Every task id in the registry, sorted."""
        named = (self.location.task_id_of(item.key) for item in self.access.list(self.location.latest_dir()))
        return sorted(task_id for task_id in named if task_id is not None)

    def latest_version(self, task_id: str) -> str:
        """The task's latest version, read now (a load may move it at any moment); TaskNotFoundError if the
        registry has no such task."""
        version = self._read_pointer(task_id)
        if version is None:  # only with missing_ok
            raise TaskNotFoundError(f"no task {task_id!r} in the registry at {self.root}")
        return version

    def versions(self, task_id: str) -> list[str]:
        """Every stored version of the task, oldest first."""
        return self._history(task_id, self.latest_version(task_id))

    def public(self, task_id: str, version: str | None = None) -> PublicTask:
        """The public view (trainers, executors) of ``version``, or of the latest now."""
        chosen = version or self.latest_version(task_id)
        key = self._version_key(task_id, chosen, hidden=False)
        return self._cached(task_id, chosen, key, False, lambda data: decode_public(data, key, chosen))

    def task(self, task_id: str, version: str | None = None) -> Task:
        """The full task with hidden tests (verifiers only: the hidden prefix's policy) of ``version``, or of the
        latest now."""
        chosen = version or self.latest_version(task_id)
        key = self._version_key(task_id, chosen, hidden=True)
        return self._cached(task_id, chosen, key, True, lambda data: decode_full(data, key, chosen))

    # ---- helpers ----------------------------------------------------------------------------------------
    def _cached(self, task_id: str, version: str, key: str, hidden: bool, parse: Callable[[bytes], T]) -> T:
        """``version`` from the local cache, else fetched (and kept); an entry that does not hold it is dropped."""
        if self.cache is not None and (data := self.cache.get(version, hidden=hidden)) is not None:
            try:
                return parse(data)
            except CorruptObjectError:
                self.cache.drop(version, hidden=hidden)
        data = self.access.get(key, Task.max_bytes)
        if data is None:
            raise self._no_version(task_id, version)
        value = parse(data)
        if self.cache is not None:
            self.cache.put(version, data, hidden=hidden)
        return value

    def _version_key(self, task_id: str, version: str, *, hidden: bool) -> str:
        _check_id(task_id)
        if not is_version(version):
            raise TaskVersionNotFoundError(f"{version!r} is not a task version (64 lowercase hex digits)")
        return self.location.version_key(task_id, version, hidden=hidden)

    def _read_pointer(self, task_id: str, *, missing_ok: bool = False) -> str | None:
        _check_id(task_id)
        key = self.location.latest_key(task_id)
        data = self.access.get(key, POINTER_MAX)
        if data is None:
            if missing_ok:
                return None
            raise TaskNotFoundError(f"no task {task_id!r} in the registry at {self.root}")
        return decode_pointer(data, key)

    def _history(self, task_id: str, latest: str) -> list[str]:
        """The task's versions, oldest first: its history object, or only ``latest`` when it has none (a task
        with one version) or when it is unreadable."""
        key = self.location.history_key(task_id)
        data = self.access.get(key, HISTORY_MAX)
        if data is None:
            return [latest]
        try:
            history = decode_history(data, key)
        except CorruptObjectError:
            return [latest]
        return history if latest in history else [*history, latest]

    def _no_version(self, task_id: str, version: str) -> TaskVersionNotFoundError:
        if self._read_pointer(task_id, missing_ok=True) is None:
            return TaskVersionNotFoundError(f"no task {task_id!r} in the registry at {self.root}")
        return TaskVersionNotFoundError(f"no version {version} of task {task_id!r} in the registry at {self.root}")


def _pointer(version: str) -> bytes:
    return version.encode("ascii") + b"\n"


def _check_id(task_id: str) -> None:
    """TaskNotFoundError for what cannot be a task id (it would name no object of the registry)."""
    try:
        file_stem(task_id)
    except ValueError:
        raise TaskNotFoundError(f"{task_id!r} is not a task id") from None
