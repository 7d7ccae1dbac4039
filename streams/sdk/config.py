"""What a trainer configures, and the errors the SDK raises: apart from the client, which is the machinery."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from bus.config import producer_config as bus_producer_config
from schemas.errors import RewardstreamError
from schemas.registry_layout import LatestVersions
from schemas.settings import Settings
from schemas.topics import catalog_for, topic_for


class SdkError(RewardstreamError):
    """The trainer SDK could not publish, consume or match a reward."""


class RewardTimeoutError(SdkError):
    """Rewards did not arrive in time; ``missing`` lists the generation ids still without one."""

    def __init__(self, missing: list[str], timeout_s: float) -> None:
        self.missing = missing
        shown = ", ".join(missing[:10]) + (f" and {len(missing) - 10} more" if len(missing) > 10 else "")
        super().__init__(f"{len(missing)} reward(s) missing after {timeout_s:g}s: {shown}")


@dataclass(frozen=True)
class TrainerConfig:
    """Where to publish, where rewards come back, and how this trainer is identified across restarts."""

    kafka: Mapping[str, str]
    generations_topic: str
    rewards_topic: str
    run_id: str
    trainer_id: str | None = None  # consumer group suffix; default: run_id (one trainer per run)
    policy_version: str = "0"
    compression: Literal["lz4", "zstd"] = "lz4"
    linger_ms: int = 20
    batch_bytes: int = 1_000_000
    auto_commit: bool = True  # False: offsets move only on checkpoint() (trainers that checkpoint models)
    commit_interval_s: float = 1.0
    dedup_lookback: int = 200_000  # messages per partition re-read below the committed offset on start
    group_prefix: str = "rewardstream-trainer."
    producer_overrides: Mapping[str, str | int | bool] = field(default_factory=dict)
    #: task_id -> its latest version (None: cannot tell). A generation that names no ``task_version`` is pinned
    #: to it when published, so every role grades it against that one version; None: generations go unpinned
    #: (each role grades against the latest when it reads the task).
    task_versions: Callable[[str], str | None] | None = None

    @classmethod
    def from_settings(cls, settings: Settings, run_id: str, **overrides: Any) -> TrainerConfig:
        """Topic names and Kafka connection from the one settings object; generations are pinned to the latest
        version in the workers' task registry: the bucket ``settings.tasks_registry`` names (read through
        ``settings.s3``, each task's pointer at most once a second: ``streams.sdk.task_pins``), else the
        directory ``settings.tasks_dir`` (or a copy of it). Pass ``task_versions=None`` to publish unpinned."""
        specs = catalog_for(settings)
        if "task_versions" not in overrides:
            overrides["task_versions"] = latest_versions(settings)
        return cls(
            kafka=settings.kafka_client_config(),
            generations_topic=topic_for("generations", specs).name,
            rewards_topic=topic_for("rewards", specs).name,
            run_id=run_id,
            **overrides,
        )

    @property
    def group_id(self) -> str:
        """The consumer group whose committed offsets say which rewards this trainer already has."""
        return f"{self.group_prefix}{self.trainer_id or self.run_id}"


def latest_versions(settings: Settings) -> Callable[[str], str | None]:
    """``task_id -> its latest version`` in the registry the workers read (``registry_from_settings``'s rule:
    S3 when ``tasks_registry`` is set, else the directory)."""
    if settings.tasks_registry:
        from streams.sdk.task_pins import S3LatestVersions

        return S3LatestVersions.open(settings.tasks_registry, settings.s3)
    return LatestVersions(settings.tasks_dir)


def producer_config(config: TrainerConfig) -> dict[str, str | int | bool]:
    """Idempotent (no duplicates on retry), compressed, batching: the fast and safe way to publish."""
    return bus_producer_config(
        config.kafka,
        **{
            "compression.type": config.compression,
            "linger.ms": config.linger_ms,
            "batch.size": config.batch_bytes,
            "queue.buffering.max.messages": 1_000_000,
            "queue.buffering.max.kbytes": 2_097_151,
            "delivery.report.only.error": True,
            **config.producer_overrides,
        },
    )
