"""What every role needs besides its own work: tasks, the code of a generation, artifacts, log records.

Why a task cache: the registry is a directory of small files and the same task is graded thousands of
times; tasks are immutable once loaded (a changed task gets a new id or a restart).
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Generic, TypeVar

from schemas.events import GenerationEvent, LogLevel, LogRecord, LogValue
from schemas.tasks import PublicTask, Task
from workers.artifacts import ArtifactError, ArtifactStore, StoredArtifact
from workers.runtime import InvalidEventError, Source
from workers.tasks.registry import TaskNotFoundError, TaskRegistry

T = TypeVar("T")


class UnknownTaskError(InvalidEventError):
    """The generation names a task the registry does not have."""


class CodeUnavailableError(InvalidEventError):
    """The generation's ``code_ref`` cannot be read or does not match ``code_sha256``."""


class _Lru(Generic[T]):
    def __init__(self, load: Callable[[str], T], size: int = 4096) -> None:
        self._load = load
        self._size = size
        self._items: OrderedDict[str, T] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> T:
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
                return found
        value = self._load(key)
        with self._lock:
            self._items[key] = value
            if len(self._items) > self._size:
                self._items.popitem(last=False)
        return value


class TaskSource:
    """Cached reads of the registry; unknown tasks are invalid events (DLQ), not crashes."""

    def __init__(self, registry: TaskRegistry) -> None:
        self.registry = registry
        self._public = _Lru(registry.public)
        self._full = _Lru(registry.task)

    def public(self, task_id: str) -> PublicTask:
        """The public view (executor, judge)."""
        try:
            return self._public.get(task_id)
        except TaskNotFoundError as exc:
            raise UnknownTaskError(str(exc)) from exc

    def task(self, task_id: str) -> Task:
        """The full task with hidden tests (verifier only)."""
        try:
            return self._full.get(task_id)
        except TaskNotFoundError as exc:
            raise UnknownTaskError(str(exc)) from exc


@dataclass(frozen=True)
class RoleContext:
    """Shared, thread-safe dependencies of one worker's handler."""

    role: str
    worker: str
    tasks: TaskSource
    artifacts: ArtifactStore | None
    output_topic: str
    uploads: ThreadPoolExecutor | None = None

    def code_of(self, event: GenerationEvent) -> str:
        """Inline code, or the S3 object ``code_ref`` names (checked against ``code_sha256``)."""
        if event.code is not None:
            return event.code
        if self.artifacts is None or event.code_ref is None:
            raise CodeUnavailableError("code_ref is set but this worker has no artifact store")
        try:
            data = self.artifacts.get(event.code_ref)
        except ArtifactError as exc:
            if "still failing" in str(exc):
                raise  # an outage: retried by the runtime, never dead-lettered at once
            raise CodeUnavailableError(f"code_ref {event.code_ref}: {exc}") from exc
        if hashlib.sha256(data).hexdigest() != event.code_sha256:
            raise CodeUnavailableError(f"code_ref {event.code_ref} does not match code_sha256")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CodeUnavailableError(f"code_ref {event.code_ref} is not UTF-8") from exc

    def store(
        self, fields: dict[str, LogValue], name: str, value: object, *, text: bool = False
    ) -> Future[StoredArtifact] | None:
        """Put an artifact (code as text, results as canonical JSON) and record its URL in ``fields``.

        With an uploader pool the upload runs there (the URL is known up front: it is the content's digest),
        so the sandbox slot moves on; the runtime commits the result only once the upload has finished.
        """
        store = self.artifacts
        if store is None:
            return None
        import orjson

        data = str(value).encode("utf-8") if text else orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
        content_type = "text/plain; charset=utf-8" if text else "application/json"
        fields[f"{name}_url"] = store.url_for(hashlib.sha256(data).hexdigest())
        if self.uploads is None:
            store.put(data, content_type)
            return None
        return self.uploads.submit(store.put, data, content_type)

    def log_record(
        self,
        event: GenerationEvent,
        source: Source,
        level: LogLevel,
        message: str,
        fields: Mapping[str, LogValue],
    ) -> LogRecord:
        """The one LogRecord of a run: ids, where the event came from, and the run's figures."""
        return LogRecord(
            level=level,
            component=self.role,
            worker=self.worker,
            logger=f"rewardstream.worker.{self.role}",
            message=message[:8192],
            generation_id=event.generation_id,
            episode_id=event.episode_id,
            run_id=event.run_id,
            task_id=event.task_id,
            topic=source.topic,
            partition=source.partition,
            offset=source.offset,
            fields={
                "turn": event.turn,
                "policy_version": event.policy_version,
                **dict(list(fields.items())[:40]),
                **{f"meta.{k}"[:64]: v for k, v in list(event.metadata.items())[:20]},  # trainer tags, for search
            },
        )
