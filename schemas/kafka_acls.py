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
from schemas.topics import Role

#: The principal ``up`` makes the cluster's super user: brokers between themselves, topic creation, ACLs.
ADMIN = "admin"
#: Where a trainer's reward reader and episode reader keep their consumer group (``streams.sdk``).
TRAINER_GROUP_PREFIXES = ("rewardstream-trainer.", "rewardstream-episodes-")

Resource = Literal["topic", "group", "transactional_id"]
Pattern = Literal["literal", "prefixed"]
Operation = Literal["read", "write", "create", "describe"]


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


def worker_grants(prefix: str, role: str, reads: tuple[Role, ...], writes: tuple[Role, ...]) -> list[Grant]:
    """A transactional worker role: reads ``reads`` in its group ``<prefix><role>``, writes ``writes`` (its logs
    and dead letters too) under transactional ids ``<prefix><role>.*`` (``workers.roles.service``)."""
    return [
        *_topics(role, prefix, reads, "read"),
        *_topics(role, prefix, (*writes, "logs", "dlq"), "write"),
        Grant(role, "group", f"{prefix}{role}", "read"),
        Grant(role, "transactional_id", f"{prefix}{role}.", "write", "prefixed"),
    ]


def trainer_grants(prefix: str, trainer: str) -> list[Grant]:
    """A trainer: publishes generations and agent actions, reads rewards and observations, in its own groups.
    Nothing else: it never reads a verdict (hidden tests' results) nor writes a reward."""
    return [
        *_topics(trainer, prefix, ("generations", "actions"), "write"),
        *_topics(trainer, prefix, ("rewards", "observations"), "read"),
        *(Grant(trainer, "group", group, "read", "prefixed") for group in TRAINER_GROUP_PREFIXES),
    ]


def reward_grants(prefix: str) -> list[Grant]:
    """The reward processor (app ``<prefix>rewards``): joins the signals, writes rewards, keeps its changelog
    ``<prefix>rewards-*`` (which it creates), reads the writer roles' committed offsets (its liveness)."""
    role, app = "rewards", f"{prefix}rewards"
    return [
        *_topics(role, prefix, SIGNAL_TOPICS, "read"),
        *_topics(role, prefix, ("rewards", "logs", "dlq"), "write"),
        *(Grant(role, "topic", f"{app}-", op, "prefixed") for op in ("create", "read", "write")),
        Grant(role, "group", app, "read"),
        *(Grant(role, "group", reader, "read") for reader in ("rewardstream-liveness", "rewardstream-rewards-probe")),
        *(Grant(role, "group", f"{prefix}{writer}", "describe") for writer in SIGNAL_WRITER.values()),
        Grant(role, "transactional_id", f"{app}-", "write", "prefixed"),
    ]


def acl_table(prefix: str, trainers: tuple[str, ...]) -> tuple[Grant, ...]:
    """Every grant of every principal but the super user: the three signal writers (executor also answers the
    gateway's run requests), the reward processor, and each trainer."""
    grants: list[Grant] = []
    for signal, writer in SIGNAL_WRITER.items():
        reads: tuple[Role, ...] = ("generations", "run_requests") if writer == "executor" else ("generations",)
        writes: tuple[Role, ...] = (
            (SIGNAL_TOPIC[signal], "run_replies") if writer == "executor" else (SIGNAL_TOPIC[signal],)
        )
        grants += worker_grants(prefix, writer, reads, writes)
    grants += reward_grants(prefix)
    for trainer in trainers:
        grants += trainer_grants(prefix, trainer)
    return tuple(grants)


def principals(trainers: tuple[str, ...]) -> tuple[str, ...]:
    """Every principal ``up`` gives credentials: the super user, each role of the table, each trainer."""
    return (ADMIN, *SIGNAL_WRITER.values(), "rewards", *trainers)


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


def markdown_table(prefix: str, trainers: tuple[str, ...]) -> str:
    """The table as docs/operations.md prints it."""
    rows = ["| principal | may | resource | name |", "|---|---|---|---|"]
    rows += [grant.row() for grant in acl_table(prefix, trainers)]
    return "\n".join(rows) + "\n"
