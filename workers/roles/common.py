"""What every role needs besides its own work: tasks, the code of a generation, artifacts, log records.

Why a task cache keyed by version: the registry is a directory of small files (or an S3 bucket) and the same
task is graded thousands of times; a version never changes once stored (its id is its content digest), so a
cached version can never be outdated. A generation pinned to a version (``task_version``) is graded against
exactly that one (one the registry does not have is an invalid event); an unpinned one against the latest
version when the role reads it, the registry's ``latest`` pointer being read each time (never cached). Every
result names the version it was graded against.

Why artifacts are uploaded in a pool and their URLs known up front: a URL is the content's digest, so the
result event can name it before the upload finished; the runtime commits the result only once every upload
it refers to has finished. An S3 outage is retried by the store until the worker stops; an upload cut short
by the stop leaves its result uncommitted (re-run by the next owner), never failed or dead-lettered.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Generic, TypeVar

from schemas.caps import fit
from schemas.events import LOG_FIELD_CHARS, ArtifactName, GenerationEvent, LogLevel, LogRecord, LogValue
from schemas.ids import generation_ids
from schemas.tasks import PublicTask, Task
from workers.artifacts import ArtifactError, ArtifactStore
from workers.grading.grader import WorkspaceTaskError, refuse_workspace
from workers.handler import Done, InfrastructureError, InvalidEventError, Source
from workers.tasks.reader import TaskReader
from workers.tasks.registry import TaskNotFoundError
from workers.tasks.s3_access import RegistryAccessError

#: A run's figures and the trainer's tags (for search) a run's log line carries: with the ids, within
#: ``LogRecord.fields``' cap.
_RUN_FIELDS = 40
_TAGS_LOGGED = 20

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)
TEXT = "text/plain; charset=utf-8"
JSON = "application/json"


class UnknownTaskError(InvalidEventError):
    """The generation names a task the registry does not have."""


class TaskRegistryUnavailableError(InfrastructureError):
    """The S3 registry did not answer, or refused these credentials: the worker's fault, never the event's, so
    the loop retries it for as long as the worker runs (never dead-lettered)."""


class CodeUnavailableError(InvalidEventError):
    """The generation's ``code_ref`` cannot be read or does not match ``code_sha256``."""


class WorkspaceTaskEventError(InvalidEventError):
    """The generation names a workspace task, which the one-shot roles would grade wrong (DLQ, with why)."""


_T = TypeVar("_T", PublicTask, Task)


def one_shot(task: _T) -> _T:
    """``task``, if the one-shot roles can run it; a workspace or image task is an invalid event for them."""
    try:
        refuse_workspace(task)
    except WorkspaceTaskError as exc:
        raise WorkspaceTaskEventError(str(exc)) from exc
    if task.environment is not None:
        raise WorkspaceTaskEventError(
            f"task {task.task_id} is an image task: it is solved in episodes, and only an episode's submit (a "
            "generation naming workspace_ref) is graded"
        )
    return task


class Lru(Generic[K, T]):
    """``load()`` of a key, the last ``size`` keys kept (thread-safe): what a role reads again and again. Only
    for what a key names for ever (a task's version, never "the latest")."""

    def __init__(self, size: int = 4096) -> None:
        self._size = size
        self._items: OrderedDict[K, T] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K, load: Callable[[], T]) -> T:
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
                return found
        value = load()
        with self._lock:
            self._items[key] = value
            if len(self._items) > self._size:
                self._items.popitem(last=False)
        return value


@dataclass(frozen=True, slots=True)
class Versioned(Generic[_T]):
    """A task as a role read it, and its version (None only for a task stored before versions whose digest this
    role cannot compute: it may not read the hidden part)."""

    task: _T
    version: str | None


@contextmanager
def _unknown_task() -> Iterator[None]:
    try:
        yield
    except TaskNotFoundError as exc:
        raise UnknownTaskError(str(exc)) from exc
    except RegistryAccessError as exc:
        raise TaskRegistryUnavailableError(str(exc)) from exc


class TaskSource:
    """Reads of the registry, cached by (task id, version); an unknown task or version is an invalid event
    (DLQ, with why), not a crash."""

    def __init__(self, registry: TaskReader) -> None:
        self.registry = registry
        self._public: Lru[tuple[str, str], PublicTask] = Lru()
        self._full: Lru[tuple[str, str], Task] = Lru()

    def public(self, task_id: str, version: str | None = None) -> Versioned[PublicTask]:
        """The public view (executor, judge) of ``version``, or of the latest version now."""
        registry = self.registry
        with _unknown_task():
            chosen = version or registry.latest_version(task_id)
            if chosen is None:
                return Versioned(registry.public(task_id), None)
            return Versioned(self._public.get((task_id, chosen), lambda: registry.public(task_id, chosen)), chosen)

    def task(self, task_id: str, version: str | None = None) -> Versioned[Task]:
        """The full task with hidden tests (verifier only) of ``version``, or of the latest version now."""
        registry = self.registry
        with _unknown_task():
            chosen = version or registry.latest_version(task_id)
            if chosen is None:
                return Versioned(registry.task(task_id), None)
            return Versioned(self._full.get((task_id, chosen), lambda: registry.task(task_id, chosen)), chosen)

    def for_event(self, event: GenerationEvent) -> Versioned[PublicTask]:
        """The public view a generation is graded against: the version it names, else the latest now."""
        return self.public(event.task_id, event.task_version)

    def full_for_event(self, event: GenerationEvent) -> Versioned[Task]:
        """The full task a generation is graded against: the version it names, else the latest now."""
        return self.task(event.task_id, event.task_version)


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
            if exc.outage:
                raise  # an outage: retried by the runtime, never dead-lettered at once
            raise CodeUnavailableError(f"code_ref {event.code_ref}: {exc}") from exc
        if hashlib.sha256(data).hexdigest() != event.code_sha256:
            raise CodeUnavailableError(f"code_ref {event.code_ref} does not match code_sha256")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CodeUnavailableError(f"code_ref {event.code_ref} is not UTF-8") from exc

    def store(
        self, artifacts: dict[ArtifactName, str], name: ArtifactName, data: bytes, content_type: str = TEXT
    ) -> Future[object] | None:
        """Put ``data`` (content-addressed, skipped when already there) and record its URL in ``artifacts``.

        Without a store nothing happens (``artifacts`` stays as it is). With an uploader pool the upload runs
        there and the returned future finishes with it; an upload the worker's stop cut short never finishes
        (its result stays uncommitted and is re-run), a refusal S3 gives fails it.
        """
        store = self.artifacts
        if store is None:
            return None
        artifacts[name] = store.url_for(hashlib.sha256(data).hexdigest())
        if self.uploads is None:
            store.put(data, content_type)
            return None
        done: Future[object] = Future()

        def upload() -> None:
            try:
                done.set_result(store.put(data, content_type))
            except ArtifactError as exc:
                if not (exc.outage and store.stopping):
                    done.set_exception(exc)
            except Exception as exc:
                done.set_exception(exc)

        self.uploads.submit(upload)
        return done

    def store_json(
        self, artifacts: dict[ArtifactName, str], name: ArtifactName, value: object
    ) -> Future[object] | None:
        """``store`` a JSON value canonically (sorted keys: equal values share one object)."""
        if self.artifacts is None:
            return None
        import orjson

        return self.store(artifacts, name, orjson.dumps(value, option=orjson.OPT_SORT_KEYS), JSON)

    def store_code(
        self, artifacts: dict[ArtifactName, str], event: GenerationEvent, code: str
    ) -> Future[object] | None:
        """``store`` the generation's code, unless it came as a ``code_ref`` that already is our content key."""
        store = self.artifacts
        if store is None:
            return None
        if event.code_ref is not None and event.code_sha256 and event.code_ref == store.url_for(event.code_sha256):
            artifacts["code"] = event.code_ref  # read and checked against code_sha256 by code_of
            return None
        return self.store(artifacts, "code", code.encode("utf-8"))

    def image_task_skipped(self, event: GenerationEvent, source: Source, version: str | None) -> Done:
        """An image task's submit, which only the verifier grades: nothing published (the reward processor
        awaits its verdict alone, ``streams.reward.policy.awaited``), one log line saying so."""
        message = f"{self.role}: image task: graded by its verifier alone, nothing to publish"
        return Done((), self.log_record(event, source, "info", message, {"task_version": version}), "image_task")

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
            message=fit(LogRecord, "message", message),
            **generation_ids(event),
            topic=source.topic,
            partition=source.partition,
            offset=source.offset,
            fields={
                "turn": event.turn,
                "policy_version": event.policy_version,
                **dict(list(fields.items())[:_RUN_FIELDS]),
                **{f"meta.{k}"[:LOG_FIELD_CHARS]: v for k, v in list(event.metadata.items())[:_TAGS_LOGGED]},  # search
            },
        )
