"""The topic catalog: one entry per role, the single source of topic names and their settings.

Pure (no Kafka here): callers pass the prefix and partition count from settings, so tests and tools can
build a catalog for any prefix. Every topic has the same partition count and all are keyed by ``episode_id``
(the DLQ by the original key, the gateway's run requests and replies by ``request_id``), so one episode lands
on the same partition number everywhere: the Faust join needs no repartitioning, and an agent episode's
actions, observations and the generation its submit makes share one partition number.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from schemas.audits import AuditEvent
from schemas.codec import MAX_MESSAGE_BYTES, Contract
from schemas.episodes import ActionEvent, ObservationEvent
from schemas.errors import ConfigError
from schemas.events import (
    DeadLetter,
    ExecutionResult,
    GenerationEvent,
    HiddenVerdict,
    JudgeScore,
    LogRecord,
    RewardEvent,
)
from schemas.runs import RunReply, RunRequest
from schemas.signals import SIGNAL_TOPIC, SIGNAL_WRITER, SIGNALS, SignalTopic, WriterRole

if TYPE_CHECKING:
    from schemas.settings import Settings

Role = Literal[
    "generations",
    SignalTopic,
    "rewards",
    "actions",
    "observations",
    "run_requests",
    "run_replies",
    "audits",
    "logs",
    "dlq",
]

_DAY_MS = 24 * 60 * 60 * 1000
_PREFIX_RE = re.compile(r"^[A-Za-z0-9._-]{0,200}$")
#: Broker-side cap per message: our codec cap plus room for Kafka's record overhead.
TOPIC_MAX_MESSAGE_BYTES = MAX_MESSAGE_BYTES + 48 * 1024


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """What one topic must look like."""

    role: Role
    name: str
    partitions: int
    replication_factor: int
    retention_ms: int
    cleanup_policy: Literal["delete", "compact"]
    model: type[Contract]
    joined: bool
    description: str
    extra_config: dict[str, str] = field(default_factory=dict)
    min_insync_replicas: int = 1

    def config(self) -> dict[str, str]:
        """Topic-level Kafka configs the catalog declares whatever the cluster (the chart's KafkaTopics too)."""
        return {
            "cleanup.policy": self.cleanup_policy,
            "retention.ms": str(self.retention_ms),
            "max.message.bytes": str(TOPIC_MAX_MESSAGE_BYTES),
            **self.extra_config,
        }

    def topic_config(self) -> dict[str, str]:
        """What a topic is created with and compared against: ``config`` and what follows from its replicas."""
        return {**self.config(), "min.insync.replicas": str(self.min_insync_replicas)}

    def as_json(self) -> dict[str, object]:
        """The ``rewardstream topics --json`` form."""
        return {
            "role": self.role,
            "name": self.name,
            "partitions": self.partitions,
            "replication_factor": self.replication_factor,
            "min_insync_replicas": self.min_insync_replicas,
            "retention_ms": self.retention_ms,
            "cleanup_policy": self.cleanup_policy,
            "key": _KEYS.get(self.role, "episode_id"),
            "value": self.model.__name__,
            "joined": self.joined,
            "config": self.config(),
            "description": self.description,
        }


_ROLES: tuple[tuple[Role, type[Contract], int, bool, str], ...] = (
    ("generations", GenerationEvent, 7, True, "code published by trainers"),
    ("executions", ExecutionResult, 7, True, "public-test results and feedback from executors"),
    ("verdicts", HiddenVerdict, 7, True, "hidden-test and static-analysis verdicts from verifiers"),
    ("judgements", JudgeScore, 7, True, "judge-model scores"),
    ("rewards", RewardEvent, 30, True, "one reward per generation, back to the trainer"),
    ("actions", ActionEvent, 7, False, "agent episodes: each turn's action (exec, write, read, submit, open, fork)"),
    ("observations", ObservationEvent, 7, False, "agent episodes: what each step did, back to the trainer"),
    ("run_requests", RunRequest, 1, False, "programs HTTP clients ask the executors to run (POST /run_code)"),
    ("run_replies", RunReply, 1, False, "what each run did, on the partition its gateway replica reads"),
    ("audits", AuditEvent, 30, False, "sampled verdicts re-graded on the other sandbox backend; never read by rewards"),
    ("logs", LogRecord, 3, False, "structured logs of every worker, indexed into OpenSearch"),
    ("dlq", DeadLetter, 30, False, "messages that could not be decoded or processed, with the reason"),
)


#: What a topic is keyed by when it is not ``episode_id``.
_KEYS: dict[Role, str] = {"dlq": "original key", "run_requests": "request_id", "run_replies": "request_id"}

#: Topic configs beyond the common ones. Actions carry the broker's clock: the episode worker's time limits run
#: on it, and a producer's own timestamp (``CreateTime``) is whatever the trainer says.
_EXTRA_CONFIG: dict[Role, dict[str, str]] = {"actions": {"message.timestamp.type": "LogAppendTime"}}


#: Replicas from which a topic asks two of them to be in sync.
MIN_REPLICAS_FOR_TWO_IN_SYNC = 3


def min_insync_replicas(replication_factor: int) -> int:
    """Replicas that must have a write before an ``acks=all`` producer hears it landed: 2 once there are 3 or
    more (one broker may be down and every acknowledged write still lives on two), else 1 (a single broker, or
    two replicas, where 2 would stop every write while one is down)."""
    return 2 if replication_factor >= MIN_REPLICAS_FOR_TWO_IN_SYNC else 1


def catalog(prefix: str = "rs.", partitions: int = 6, replication_factor: int = 1) -> tuple[TopicSpec, ...]:
    """Every topic rewardstream uses, named ``<prefix><role>``; its min.insync.replicas follows from
    ``replication_factor`` (``min_insync_replicas``)."""
    if not _PREFIX_RE.match(prefix):
        raise ConfigError(f"topic prefix {prefix!r} may only contain letters, digits, '.', '_' and '-'")
    if partitions < 1 or replication_factor < 1:
        raise ConfigError("partitions and replication factor must be at least 1")
    in_sync = min_insync_replicas(replication_factor)
    return tuple(
        TopicSpec(
            role=role,
            name=f"{prefix}{role}",
            partitions=partitions,
            replication_factor=replication_factor,
            retention_ms=days * _DAY_MS,
            cleanup_policy="delete",
            model=model,
            joined=joined,
            description=description,
            extra_config=dict(_EXTRA_CONFIG.get(role, {})),
            min_insync_replicas=in_sync,
        )
        for role, model, days, joined, description in _ROLES
    )


def catalog_for(settings: Settings) -> tuple[TopicSpec, ...]:
    """The catalog these settings describe (prefix, partitions, replication): what every component uses."""
    return catalog(settings.kafka.topic_prefix, settings.kafka.topic_partitions, settings.kafka.replication_factor())


def topic_for(role: Role, specs: tuple[TopicSpec, ...]) -> TopicSpec:
    """The spec of ``role`` in ``specs``."""
    for spec in specs:
        if spec.role == role:
            return spec
    raise ConfigError(f"no topic with role {role!r} in the catalog")


#: The worker role whose transactions write each joined topic (its consumer group reads the generations).
WRITER_ROLE: dict[Role, WriterRole] = {SIGNAL_TOPIC[signal]: SIGNAL_WRITER[signal] for signal in SIGNALS}


#: The lines around the catalog's table in docs/tasks.md (``markdown_table`` writes what is between them).
TABLE_BEGIN = "<!-- topic catalog: generated by `rewardstream topics --markdown`, checked by a unit test -->"
TABLE_END = "<!-- end of the topic catalog -->"


def markdown_table(specs: tuple[TopicSpec, ...]) -> str:
    """The catalog as the docs' table: retention per topic, so what Kafka keeps is written where people read."""
    rows = [
        "| topic | retention | cleanup | key | value | what it holds |",
        "|---|---|---|---|---|---|",
    ]
    for spec in specs:
        days = spec.retention_ms / _DAY_MS
        retention = f"{days:g} day{'' if days == 1 else 's'}"
        key = _KEYS.get(spec.role, "episode_id")
        rows.append(
            f"| `{spec.name}` | {retention} | {spec.cleanup_policy} | {key} | `{spec.model.__name__}` "
            f"| {spec.description} |"
        )
    return "\n".join(rows) + "\n"


def group_for(settings: Settings, role: str) -> str:
    """The consumer group of a worker role (executor, verifier, judge, indexer): one name, everywhere."""
    return f"{settings.kafka.topic_prefix}{role}"
