"""Create the catalog's topics idempotently and report how existing topics differ from the catalog.

Why report instead of fix: a wrong partition count cannot be repaired in place (adding partitions moves
keys between partitions and breaks the episode-to-partition join; removing them is impossible), and
silently living with it corrupts the reward join. So differences are reported, loudly, for a human.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from confluent_kafka import KafkaError as LibKafkaError
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import ConfigResource
from confluent_kafka.admin._resource import ResourceType
from confluent_kafka.cimpl import NewTopic

from schemas.errors import KafkaError, KafkaUnavailableError
from schemas.topics import TopicSpec

Status = Literal["created", "exists", "differs"]


@dataclass(frozen=True, slots=True)
class TopicState:
    """What ``ensure_topics`` found or did for one topic."""

    role: str
    name: str
    status: Status
    differences: tuple[str, ...] = ()

    def as_json(self) -> dict[str, object]:
        """JSON form for ``rewardstream topics create --json``."""
        return {"role": self.role, "name": self.name, "status": self.status, "differences": list(self.differences)}


@dataclass(frozen=True, slots=True)
class EnsureReport:
    """Per-topic outcome of ``ensure_topics``."""

    topics: tuple[TopicState, ...] = field(default_factory=tuple)

    @property
    def differing(self) -> tuple[TopicState, ...]:
        """Topics that exist but do not match the catalog."""
        return tuple(t for t in self.topics if t.status == "differs")

    def as_json(self) -> dict[str, object]:
        """JSON form for ``rewardstream topics create --json``."""
        return {"topics": [t.as_json() for t in self.topics], "ok": not self.differing}


@dataclass(frozen=True, slots=True)
class ExistingTopic:
    """The parts of an existing topic the catalog manages."""

    partitions: int
    replication_factor: int
    config: Mapping[str, str]


def _admin(client_config: Mapping[str, str]) -> AdminClient:
    return AdminClient({**client_config, "log_level": 3})


#: Codes of a cluster that did not answer (yet), beside what librdkafka calls retriable.
UNAVAILABLE = frozenset({
    LibKafkaError._TIMED_OUT, LibKafkaError._TRANSPORT, LibKafkaError._ALL_BROKERS_DOWN,
    LibKafkaError.REQUEST_TIMED_OUT, LibKafkaError.NOT_CONTROLLER, LibKafkaError.LEADER_NOT_AVAILABLE,
})  # fmt: skip


def _fail(what: str, exc: BaseException, bootstrap: str) -> KafkaError:
    """The error naming ``what`` failed; ``KafkaUnavailableError`` when the cluster only did not answer."""
    detail = exc.args[0] if exc.args else exc
    unavailable = isinstance(detail, LibKafkaError) and (detail.code() in UNAVAILABLE or detail.retriable())
    if isinstance(detail, LibKafkaError):
        detail = f"{detail.name()}: {detail.str()}"
    kind = KafkaUnavailableError if unavailable else KafkaError
    return kind(f"{what} failed (Kafka at {bootstrap}): {detail}")


def describe_topics(
    names: Iterable[str], client_config: Mapping[str, str], timeout_s: float = 30.0
) -> dict[str, ExistingTopic]:
    """Partitions, replication factor and configs of those ``names`` that exist."""
    admin = _admin(client_config)
    bootstrap = client_config.get("bootstrap.servers", "?")
    try:
        metadata = admin.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        raise _fail("listing topics", exc, bootstrap) from exc
    present = [n for n in names if n in metadata.topics]
    if not present:
        return {}
    resources = [ConfigResource(ResourceType.TOPIC, n) for n in present]
    try:
        futures = admin.describe_configs(resources, request_timeout=timeout_s)
        configs = {res.name: {k: str(v.value) for k, v in fut.result().items()} for res, fut in futures.items()}
    except KafkaException as exc:
        raise _fail("describing topic configs", exc, bootstrap) from exc
    out: dict[str, ExistingTopic] = {}
    for name in present:
        partitions = metadata.topics[name].partitions
        replicas = max((len(p.replicas) for p in partitions.values()), default=0)
        out[name] = ExistingTopic(len(partitions), replicas, configs.get(name, {}))
    return out


def differences(spec: TopicSpec, existing: ExistingTopic) -> tuple[str, ...]:
    """Human-readable ways ``existing`` differs from ``spec`` (empty if it matches)."""
    found: list[str] = []
    if existing.partitions != spec.partitions:
        found.append(f"has {existing.partitions} partitions, catalog says {spec.partitions}")
    if existing.replication_factor != spec.replication_factor:
        found.append(f"has replication factor {existing.replication_factor}, catalog says {spec.replication_factor}")
    for key, want in spec.topic_config().items():
        have = existing.config.get(key)
        if have != want:
            found.append(f"{key} is {have}, catalog says {want}")
    return tuple(found)


def ensure_topics(
    specs: Sequence[TopicSpec], client_config: Mapping[str, str], timeout_s: float = 30.0
) -> EnsureReport:
    """Create missing topics; compare existing ones with the catalog. Safe to run any number of times."""
    admin = _admin(client_config)
    bootstrap = client_config.get("bootstrap.servers", "?")
    existing = describe_topics([s.name for s in specs], client_config, timeout_s)
    created: set[str] = set()
    missing = [s for s in specs if s.name not in existing]
    if missing:
        new = [
            NewTopic(
                s.name, num_partitions=s.partitions, replication_factor=s.replication_factor, config=s.topic_config()
            )
            for s in missing
        ]
        futures = admin.create_topics(new, operation_timeout=timeout_s, request_timeout=timeout_s)
        for name, fut in futures.items():
            try:
                fut.result()
                created.add(name)
            except KafkaException as exc:
                err = exc.args[0] if exc.args else None
                if isinstance(err, LibKafkaError) and err.code() == LibKafkaError.TOPIC_ALREADY_EXISTS:
                    continue  # created concurrently by someone else: compare it below
                raise _fail(f"creating topic {name}", exc, bootstrap) from exc
        raced = [s.name for s in missing if s.name not in created]
        if raced:
            existing.update(describe_topics(raced, client_config, timeout_s))
    states: list[TopicState] = []
    for spec in specs:
        if spec.name in created:
            states.append(TopicState(spec.role, spec.name, "created"))
            continue
        diffs = differences(spec, existing[spec.name])
        states.append(TopicState(spec.role, spec.name, "differs" if diffs else "exists", diffs))
    _wait_visible(admin, created, timeout_s, bootstrap)
    return EnsureReport(tuple(states))


def _wait_visible(admin: Any, names: set[str], timeout_s: float, bootstrap: str) -> None:
    """Wait until newly created topics appear in metadata, so callers can produce right away."""
    deadline = time.monotonic() + timeout_s
    while names:
        try:
            topics = admin.list_topics(timeout=timeout_s).topics
        except KafkaException as exc:
            raise _fail("listing topics", exc, bootstrap) from exc
        if all(n in topics and topics[n].error is None for n in names):
            return
        if time.monotonic() > deadline:
            raise KafkaError(f"created topics not visible after {timeout_s}s: {sorted(names)}")
        time.sleep(0.1)


def delete_topics(names: Sequence[str], client_config: Mapping[str, str], timeout_s: float = 30.0) -> None:
    """Delete ``names`` (missing ones are ignored); used by tests to clean up what they created."""
    if not names:
        return
    admin = _admin(client_config)
    bootstrap = client_config.get("bootstrap.servers", "?")
    futures = admin.delete_topics(list(names), operation_timeout=timeout_s, request_timeout=timeout_s)
    for name, fut in futures.items():
        try:
            fut.result()
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if isinstance(err, LibKafkaError) and err.code() == LibKafkaError.UNKNOWN_TOPIC_OR_PART:
                continue
            raise _fail(f"deleting topic {name}", exc, bootstrap) from exc


def delete_groups_with_prefix(prefix: str, client_config: Mapping[str, str], timeout_s: float = 30.0) -> list[str]:
    """Delete every consumer group whose id starts with ``prefix``; return their ids.

    A group can vanish between the listing and the deletion (an empty one expires, a short-lived reader's
    group is dropped): that is what was asked, not an error.
    """
    admin = _admin(client_config)
    bootstrap = client_config.get("bootstrap.servers", "?")
    try:
        listed = admin.list_consumer_groups(request_timeout=timeout_s).result().valid
    except KafkaException as exc:
        raise _fail("listing consumer groups", exc, bootstrap) from exc
    ours = sorted(g.group_id for g in listed if g.group_id.startswith(prefix))
    if not ours:
        return []
    for name, fut in admin.delete_consumer_groups(ours, request_timeout=timeout_s).items():
        try:
            fut.result()
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if isinstance(err, LibKafkaError) and err.code() == LibKafkaError.GROUP_ID_NOT_FOUND:
                continue
            raise _fail(f"deleting consumer group {name}", exc, bootstrap) from exc
    return ours


def group_members(client_config: Mapping[str, str], group: str, timeout_s: float = 10.0) -> int | None:
    """How many members consumer group ``group`` has now; None when the cluster cannot tell (a broker fault:
    the caller decides what unknown means)."""
    admin = _admin(client_config)
    try:
        described = admin.describe_consumer_groups([group], request_timeout=timeout_s)[group].result()
    except KafkaException:
        return None
    return len(described.members)
