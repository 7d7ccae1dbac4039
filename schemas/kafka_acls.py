"""Who may do what on Kafka: one principal per role and per trainer, and the ACLs each needs, as data.

Why derived here: the topics a role reads and writes are already said by the catalog (``schemas.topics``) and
the signal table (``schemas.signals``); the ACLs are computed from them (and the group and transactional id
names the roles use), so a renamed topic or a new signal cannot leave an ACL behind. ``rewardstream up`` with
``RS_KAFKA_AUTH=scram`` writes exactly this table (``infra.local.kafka_auth``); a production cluster's operator
writes the same rows (docs/operations.md prints them). Pure: no Kafka here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from schemas.signals import SIGNAL_TOPIC, SIGNAL_TOPICS, SIGNAL_WRITER
from schemas.topics import Role, catalog

#: The principal ``up`` makes the cluster's super user: brokers between themselves, topic creation, ACLs.
ADMIN = "admin"
#: The replay and explain CLI's principal (``rewardstream replay``/``explain``): reads every live topic, owns the
#: replay namespaces ``<prefix>replay.*`` (their topics, groups and transactional ids) and runs their pipeline.
OPERATOR = "operator"
#: The reward processor's principal; its app id (consumer group, changelog and transactional ids) is
#: ``<prefix>rewards`` as ``up --pipeline`` runs it.
REWARDS = "rewards"
#: The worker roles of the transactional loop (``workers.roles.service.loop_config``): group ``<prefix><role>``,
#: transactional ids ``<prefix><role>.<instance>``.
EPISODE, AUDITOR, INDEXER, GATEWAY = "episode", "auditor", "indexer", "gateway"
#: Where a trainer's reward reader and episode reader keep their consumer group (``streams.sdk``).
TRAINER_GROUP_PREFIXES = ("rewardstream-trainer.", "rewardstream-episodes-")
#: The gateway replicas' readers of rewards and run replies (``streams.gateway.server``): one group each.
GATEWAY_GROUP_PREFIX = "rewardstream-gateway."
#: The reward processor's fixed-name readers: the generations' ends (``streams.reward.liveness``), the probe of
#: its inputs' ends and the scan of the rewards log after a crash (``streams.reward.rewards_log``).
LIVENESS_GROUP = "rewardstream-liveness"
PROBE_GROUP = "rewardstream-rewards-probe"
SCAN_GROUP = "rewardstream-rewards-scan"
#: The replay and explain CLI's reader of the live topics (``bus.scan``).
REPLAY_SCAN_GROUP = "rewardstream-replay-scan"

Resource = Literal["topic", "group", "transactional_id"]
Pattern = Literal["literal", "prefixed"]
Operation = Literal["read", "write", "create", "describe", "describe_configs", "delete"]


@dataclass(frozen=True, slots=True)
class Grant:
    """One ALLOW ACL: ``principal`` may ``operation`` the ``resource`` named ``name`` (or every name that starts
    with it, ``prefixed``)."""

    principal: str
    resource: Resource
    name: str
    operation: Operation
    pattern: Pattern = "literal"

    def row(self) -> str:
        """The grant as the docs' table prints it."""
        star = "*" if self.pattern == "prefixed" else ""
        return f"| `User:{self.principal}` | {self.operation} | {self.resource} | `{self.name}{star}` |"


def _topics(principal: str, prefix: str, roles: tuple[Role, ...], operation: Operation) -> list[Grant]:
    return [Grant(principal, "topic", f"{prefix}{role}", operation) for role in roles]


def _owned(principal: str, name: str) -> list[Grant]:
    """Topics and groups named ``<name>*`` that ``principal`` makes for itself (a changelog, a probe topic, the
    readers that restore them): created, compared with their spec, read and written by it alone."""
    return [
        *(Grant(principal, "topic", name, op, "prefixed") for op in ("create", "describe_configs", "read", "write")),
        Grant(principal, "group", name, "read", "prefixed"),
    ]


def worker_grants(prefix: str, role: str, reads: tuple[Role, ...], writes: tuple[Role, ...]) -> list[Grant]:
    """A transactional worker role: reads ``reads`` in its group ``<prefix><role>``, writes ``writes`` (its logs
    and dead letters too) under transactional ids ``<prefix><role>.*`` (``workers.roles.service``)."""
    return [
        *_topics(role, prefix, reads, "read"),
        *_topics(role, prefix, (*writes, "logs", "dlq"), "write"),
        Grant(role, "group", f"{prefix}{role}", "read"),
        Grant(role, "transactional_id", f"{prefix}{role}.", "write", "prefixed"),
    ]


def episode_grants(prefix: str) -> list[Grant]:
    """The episode worker: actions in, observations and the generations a submit makes out; its state
    changelog and broker-clock topic ``<prefix>episode-*`` (``workers.roles.episode_worker``), which it creates
    and restores in groups of the same prefix."""
    return [*worker_grants(prefix, EPISODE, ("actions",), ("observations", "generations")),
            *_owned(EPISODE, f"{prefix}{EPISODE}-")]  # fmt: skip


def indexer_grants(prefix: str) -> list[Grant]:
    """The indexer: reads logs and dead letters in its group, writes what OpenSearch rejects to the dead letters
    (an idempotent producer, no transaction)."""
    return [
        *_topics(INDEXER, prefix, ("logs", "dlq"), "read"),
        *_topics(INDEXER, prefix, ("dlq",), "write"),
        Grant(INDEXER, "group", f"{prefix}{INDEXER}", "read"),
    ]


def gateway_grants(prefix: str) -> list[Grant]:
    """The HTTP gateway publishes like a trainer (generations) and asks the executors to run programs; it reads
    rewards and run replies in one group per replica. Like a trainer it never sees a verdict."""
    return [
        *_topics(GATEWAY, prefix, ("generations", "run_requests"), "write"),
        *_topics(GATEWAY, prefix, ("rewards", "run_replies"), "read"),
        Grant(GATEWAY, "group", GATEWAY_GROUP_PREFIX, "read", "prefixed"),
    ]


def trainer_grants(prefix: str, trainer: str) -> list[Grant]:
    """A trainer: publishes generations and agent actions, reads rewards and observations, in its own groups,
    and the actions back (``EpisodeClient.resume`` finds the turns it sent). Nothing else: it never reads a
    verdict (hidden tests' results) nor writes a reward."""
    return [
        *_topics(trainer, prefix, ("generations", "actions"), "write"),
        *_topics(trainer, prefix, ("rewards", "observations", "actions"), "read"),
        *(Grant(trainer, "group", group, "read", "prefixed") for group in TRAINER_GROUP_PREFIXES),
    ]


def reward_grants(prefix: str, app: str | None = None) -> list[Grant]:
    """The reward processor (app ``<prefix>rewards``, or ``app``: the chart's is per release): joins the signals
    in its group, writes rewards under transactional ids ``<app>-*``, keeps its changelog ``<app>-*`` (which it
    creates and restores), reads back its rewards after a crash, and for its liveness check the generations' ends
    and the writer roles' committed offsets (DESCRIBE on their groups and on the generations topic, no READ)."""
    app = app or f"{prefix}{REWARDS}"
    return [
        *_topics(REWARDS, prefix, SIGNAL_TOPICS, "read"),
        *_topics(REWARDS, prefix, ("rewards",), "read"),
        *_topics(REWARDS, prefix, ("rewards", "logs", "dlq"), "write"),
        *_topics(REWARDS, prefix, ("generations",), "describe"),
        Grant(REWARDS, "group", app, "read"),
        *_owned(REWARDS, f"{app}-"),
        *(Grant(REWARDS, "group", reader, "read") for reader in (LIVENESS_GROUP, PROBE_GROUP, SCAN_GROUP)),
        *(Grant(REWARDS, "group", f"{prefix}{writer}", "describe") for writer in SIGNAL_WRITER.values()),
        Grant(REWARDS, "transactional_id", f"{app}-", "write", "prefixed"),
    ]


def operator_grants(prefix: str) -> list[Grant]:
    """The replay and explain CLI: reads every live topic (never writes one) with its scan reader; owns the
    replay namespaces ``<prefix>replay.*``, where it creates, fills, runs a pipeline on (whose processes run
    as this principal: its groups, transactional ids and the processor's fixed-name readers) and deletes."""
    namespace = f"{prefix}replay."
    every: tuple[Role, ...] = tuple(spec.role for spec in catalog(prefix))
    owned: tuple[Operation, ...] = ("create", "describe_configs", "read", "write", "delete")
    return [
        *_topics(OPERATOR, prefix, every, "read"),
        Grant(OPERATOR, "group", REPLAY_SCAN_GROUP, "read"),
        *(Grant(OPERATOR, "topic", namespace, op, "prefixed") for op in owned),
        *(Grant(OPERATOR, "group", namespace, op, "prefixed") for op in ("read", "delete")),
        Grant(OPERATOR, "transactional_id", namespace, "write", "prefixed"),
        *(Grant(OPERATOR, "group", reader, "read") for reader in (LIVENESS_GROUP, PROBE_GROUP, SCAN_GROUP)),
    ]


#: Every role principal, in the table's order (each runs one kind of pipeline process, or the operator's CLI).
ROLES: tuple[str, ...] = (*SIGNAL_WRITER.values(), REWARDS, EPISODE, AUDITOR, INDEXER, GATEWAY, OPERATOR)


def acl_table(prefix: str, trainers: tuple[str, ...], reward_app: str | None = None) -> tuple[Grant, ...]:
    """Every grant of every principal but the super user: the three signal writers (executor also answers the
    gateway's run requests), the reward processor, the episode worker, the auditor (re-grades verdicts into
    audits), the indexer, the gateway, the operator, and each trainer. ``reward_app``: the reward processor's app
    id when it is not ``<prefix>rewards`` (a Helm release's, ``roles.rewardProcessor.appId``)."""
    grants: list[Grant] = []
    for signal, writer in SIGNAL_WRITER.items():
        reads: tuple[Role, ...] = ("generations", "run_requests") if writer == "executor" else ("generations",)
        writes: tuple[Role, ...] = (
            (SIGNAL_TOPIC[signal], "run_replies") if writer == "executor" else (SIGNAL_TOPIC[signal],)
        )
        grants += worker_grants(prefix, writer, reads, writes)
    grants += reward_grants(prefix, reward_app)
    grants += episode_grants(prefix)
    grants += worker_grants(prefix, AUDITOR, ("verdicts",), ("audits",))
    grants += indexer_grants(prefix)
    grants += gateway_grants(prefix)
    grants += operator_grants(prefix)
    for trainer in trainers:
        grants += trainer_grants(prefix, trainer)
    return tuple(grants)


def principals(trainers: tuple[str, ...]) -> tuple[str, ...]:
    """Every principal ``up`` gives credentials: the super user, each role of the table, each trainer."""
    return (ADMIN, *ROLES, *trainers)


def trainer_names(setting: str) -> tuple[str, ...]:
    """The trainer principals of ``RS_KAFKA_TRAINERS`` (comma-separated); a name clashing with a role's is
    refused (it would get the role's rights too)."""
    names = tuple(dict.fromkeys(part.strip() for part in setting.split(",") if part.strip()))
    taken = set(principals(()))
    for name in names:
        if name in taken or not name.replace("-", "").replace("_", "").isalnum():
            raise ValueError(
                f"RS_KAFKA_TRAINERS: {name!r} is no trainer name (letters, digits, - and _; not one of {sorted(taken)})"
            )
    return names


def markdown_table(prefix: str, trainers: tuple[str, ...], reward_app: str | None = None) -> str:
    """The table as docs/operations.md prints it."""
    rows = ["| principal | may | resource | name |", "|---|---|---|---|"]
    rows += [grant.row() for grant in acl_table(prefix, trainers, reward_app)]
    return "\n".join(rows) + "\n"
