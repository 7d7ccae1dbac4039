"""One frozen settings object, read from the environment (prefix ``RS_``) in one place.

Defaults point at the local embedded services started by ``rewardstream up``; production points the same
fields at real clusters (see docs/operations.md, "Pointing at production").

The settings are grouped by what they configure (``settings.kafka``, ``.s3``, ``.opensearch``, ``.sandbox``,
``.worker``, ``.judge``, ``.gateway``, ``.local``), so a part can be handed only its own. Every setting keeps
its one flat ``RS_*`` environment name, declared once below with ``Flat`` (``RS_KAFKA_BOOTSTRAP`` is
``kafka.bootstrap``): that name is also an attribute (``settings.kafka_bootstrap``), a keyword of
``Settings(...)`` and of ``model_copy(update=...)``, and what a bad value's error names.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any, ClassVar, Generic, Literal, Self, TypeVar, cast, overload

from pydantic import BaseModel, ConfigDict, Field, SecretStr
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

ENV_PREFIX = "RS_"
T = TypeVar("T")

#: The toolchain family of the original sandbox image and rootfs (python, pytest, git): what runs when a run
#: names no other family.
PYTHON_TOOLCHAIN = "python"


def _default_cache_dir() -> Path:
    return Path.home() / ".cache" / "rewardstream"


class _Group(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class LocalPlatformSettings(_Group):
    """The local embedded platform: where it keeps downloads and data, where it downloads from, how long it waits."""

    cache_dir: Path = Field(default_factory=_default_cache_dir, description="downloads, data and logs")
    maven_url: str = Field("https://repo1.maven.org/maven2", description="Maven repository for service jars")
    java_home: Path | None = Field(None, description="JDK for Kafka/OpenSearch/S3 (default: java on PATH)")
    debian_mirror: str = Field("http://deb.debian.org/debian", description="mirror for the sandbox image")
    startup_timeout_s: float = 180.0
    health_timeout_s: float = 3.0


class KafkaSettings(_Group):
    """The Kafka cluster and the topic catalog on it."""

    bootstrap: str = "127.0.0.1:9092"
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    topic_prefix: str = "rs."
    topic_partitions: int = Field(6, ge=1, le=10_000, description="partitions of every catalog topic")
    topic_replication_factor: int = Field(1, ge=1, le=16, description="replicas of every catalog topic")

    def client_config(self) -> dict[str, str]:
        """confluent-kafka/librdkafka config for the common connection settings."""
        config = {"bootstrap.servers": self.bootstrap, "security.protocol": self.security_protocol}
        if self.sasl_mechanism:
            config["sasl.mechanism"] = self.sasl_mechanism
        if self.sasl_username:
            config["sasl.username"] = self.sasl_username
        if self.sasl_password is not None:
            config["sasl.password"] = self.sasl_password.get_secret_value()
        return config


class OpenSearchSettings(_Group):
    """OpenSearch, where the log indexer writes and ``logs search``/``explain`` read."""

    url: str = "http://127.0.0.1:9200"
    username: str | None = None
    password: SecretStr | None = None
    verify_certs: bool = True
    index_prefix: str = "rewardstream-logs"
    replicas: int = Field(1, ge=0, le=16, description="replicas of each daily log index")
    log_retention_days: int = Field(14, ge=1, le=3650, description="daily log indices older than this are deleted")
    indexer_batch_size: int = Field(500, ge=1, le=10_000, description="log records per OpenSearch bulk request")


class S3Settings(_Group):
    """The S3 store (MinIO in production) of artifacts and workspace snapshots."""

    endpoint: str = "127.0.0.1:9000"
    access_key: str = "rewardstream"
    secret_key: SecretStr = SecretStr("rewardstream-local-secret")
    secure: bool = False
    region: str = "us-east-1"
    bucket: str = "rewardstream-artifacts"


class SandboxSettings(_Group):
    """The sandbox backends: which one, their image or root filesystem, and their isolation knobs."""

    docker_host: str | None = Field(None, description="DOCKER_HOST-style URL; default: local socket")
    backend: Literal["process", "docker"] = "process"
    image: str = "rewardstream-sandbox-python:1"
    rootfs: Path | None = Field(
        None, description="process backend root filesystem; default <cache>/sandbox/rootfs-<image tag> (`up` builds it)"
    )
    toolchains_dir: Path | None = Field(
        None,
        description="where the process backend finds the toolchain families' root filesystems, "
        "rootfs-<family>-<image tag>; default <cache>/sandbox (built on first use)",
    )
    uid: int = Field(60123, description="unprivileged host uid/gid that runs candidate code")
    run_dir: Path = Field(Path("/run/rewardstream-sandbox"), description="process backend mounts")
    cgroup_parent: Path | None = Field(None, description="delegated cgroup for runs (default: own)")
    pool_size: int = Field(4, description="warm containers kept ready by the docker backend")
    slots: int = Field(
        0,
        ge=0,
        le=4096,
        description="sandbox runs a host runs at once, all workers together (0: 2 per core, "
        "fewer if memory is short); a run waits for a slot, and its limits never count the wait",
    )
    start_rate: float = Field(
        0.0, ge=0, le=100_000, description="sandbox starts per second a host paces (0: 25 per core), jittered"
    )
    slots_dir: Path | None = Field(
        None, description="where the host's slot locks live, shared by every worker on it; default <run_dir>/slots"
    )

    def image_version(self) -> str:
        """The tag of ``image`` (``latest`` when untagged); it versions the rootfs too."""
        name = self.image.rsplit("/", 1)[-1]
        return name.split(":", 1)[1] if ":" in name else "latest"


class WorkerSettings(_Group):
    """Every consumer process (the roles' and episode workers, the indexer, the reward processor)."""

    concurrency: int = Field(2, ge=1, le=256, description="sandbox runs (or judge calls) at once per worker")
    max_in_flight: int = Field(0, ge=0, le=100_000, description="buffered events before pausing (0: 16x, >= 64)")
    drain_timeout_s: float = Field(30.0, ge=0, description="SIGTERM: finish in-flight runs within this")
    commit_interval_s: float = Field(0.5, gt=0, le=60, description="max delay before results are committed")
    transaction_timeout_ms: int = Field(15_000, ge=1000, description="a dead worker's open transaction aborts")
    instance_id: str | None = Field(None, description="transactional.id suffix; default host-pid-random")
    store_artifacts: bool = Field(True, description="store code and per-case results in S3")
    crash_attempts: int = Field(
        3, ge=1, le=100, description="deaths of a consumer while one message ran alone before it is dead-lettered"
    )
    metrics_host: str = Field("127.0.0.1", description="address the worker's /metrics endpoint binds to")
    metrics_port: int = Field(9464, ge=0, le=65535, description="port of /metrics; 0 picks a free one")
    episode_retention_s: float = Field(
        86_400.0, gt=0, le=90 * 86_400,
        description="an ended episode's state is kept this long after its last action (forks from it, late "
        "duplicates answered), then deleted from the worker's table and its changelog",
    )  # fmt: skip


class GatewaySettings(_Group):
    """The HTTP gateway (``rewardstream serve``): a stateless door onto the same topics."""

    host: str = Field("127.0.0.1", description="address the gateway binds to (not loopback: tokens needed)")
    port: int = Field(8080, ge=0, le=65535, description="port of the gateway; 0 picks a free one")
    tokens: SecretStr | None = Field(
        None, description="bearer tokens the gateway accepts, comma-separated; required on a non-loopback bind"
    )
    token_concurrency: int = Field(
        64, ge=1, le=100_000, description="requests in flight per token (or per anonymous loopback client): 429 past it"
    )
    max_body_bytes: int = Field(
        4 << 20, ge=1024, le=256 << 20, description="largest request body the gateway reads: 413 past it"
    )
    body_timeout_s: float = Field(
        10.0, gt=0, le=600,
        description="longest a request may take to send its whole body, from its headers: 408 past it (a stalled "
        "body holds no slot of its token meanwhile)",
    )  # fmt: skip
    peer_body_reads: int = Field(
        64, ge=1, le=100_000, description="requests one peer address may have sending their bodies at once: 429 past it"
    )
    max_batch: int = Field(256, ge=1, le=10_000, description="generations in one POST /v1/rewards")
    reward_wait_s: float = Field(
        600.0, gt=0, le=3600, description="longest a rewards request waits for its rewards (wait=true, /get_reward)"
    )
    run_queue_s: float = Field(
        60.0, gt=0, le=3600,
        description="how long a /run_code request may wait for an executor on top of its own timeouts (504 past it)",
    )  # fmt: skip
    reward_cache: int = Field(
        100_000, ge=100, le=10_000_000, description="rewards each gateway keeps for polling (the most recent)"
    )
    reward_lookback: int = Field(
        10_000, ge=0, le=10_000_000, description="rewards per partition a starting gateway reads below the end"
    )
    kafka_timeout_s: float = Field(
        10.0, gt=0, le=300, description="a produce not acknowledged within this is a 503 (Kafka unreachable)"
    )
    instance_id: str | None = Field(None, description="this replica's id in run requests; default host-pid-random")


class JudgeSettings(_Group):
    """The judge workers' model: the built-in rubric, or an OpenAI-compatible server."""

    backend: Literal["rubric", "openai"] = Field("rubric", description="built-in rubric or a chat server")
    base_url: str = Field("http://127.0.0.1:8000/v1", description="OpenAI-compatible API base URL")
    model: str = Field("judge", description="model name sent to the judge server")
    api_key: SecretStr | None = Field(None, description="bearer token for the judge server")
    timeout_s: float = Field(30.0, gt=0, description="per-request timeout of the judge server")
    retries: int = Field(3, ge=0, le=20, description="retries of a failed judge request")
    concurrency: int = Field(8, ge=1, le=1024, description="judge requests at once per worker")
    cache_size: int = Field(65_536, ge=0, description="judge results cached by code hash (0: off)")


G = TypeVar("G", bound=_Group)


def defaults(group: type[G]) -> G:
    """``group`` with every field at its default: where a component's own config (a dataclass the worker loop,
    the judge client or the gateway's guard is built with) takes its defaults, so each is written once, here."""
    return group()


class Flat(Generic[T]):
    """A flat ``RS_*`` name of a grouped setting: ``kafka_bootstrap = Flat[str]("kafka", "bootstrap")`` reads
    ``RS_KAFKA_BOOTSTRAP`` into ``settings.kafka.bootstrap`` and is that value as ``settings.kafka_bootstrap``."""

    def __init__(self, group: str, field: str) -> None:
        self.group = group
        self.field = field

    @overload
    def __get__(self, obj: None, owner: type) -> Flat[T]: ...
    @overload
    def __get__(self, obj: object, owner: type) -> T: ...
    def __get__(self, obj: object | None, owner: type) -> Flat[T] | T:
        if obj is None:
            return self
        return cast("T", getattr(getattr(obj, self.group), self.field))


class Settings(BaseSettings):
    """Every endpoint, credential and knob of rewardstream, by group. Immutable once built."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, frozen=True, extra="ignore")

    local: LocalPlatformSettings = Field(default_factory=LocalPlatformSettings)
    kafka: KafkaSettings = Field(default_factory=KafkaSettings)
    opensearch: OpenSearchSettings = Field(default_factory=OpenSearchSettings)
    s3: S3Settings = Field(default_factory=S3Settings)
    sandbox: SandboxSettings = Field(default_factory=SandboxSettings)
    worker: WorkerSettings = Field(default_factory=WorkerSettings)
    judge: JudgeSettings = Field(default_factory=JudgeSettings)
    gateway: GatewaySettings = Field(default_factory=GatewaySettings)
    # Task registry
    tasks_dir: Path = Field(
        default_factory=lambda data: Path(data["local"].cache_dir) / "tasks",
        description="task registry: public/ readable by trainers, hidden/ by verifiers only",
    )

    # The RS_* names: RS_<NAME> is the group's field, and settings.<name> its value.
    cache_dir: ClassVar[Flat[Path]] = Flat("local", "cache_dir")
    maven_url: ClassVar[Flat[str]] = Flat("local", "maven_url")
    java_home: ClassVar[Flat[Path | None]] = Flat("local", "java_home")
    debian_mirror: ClassVar[Flat[str]] = Flat("local", "debian_mirror")
    startup_timeout_s: ClassVar[Flat[float]] = Flat("local", "startup_timeout_s")
    health_timeout_s: ClassVar[Flat[float]] = Flat("local", "health_timeout_s")
    kafka_bootstrap: ClassVar[Flat[str]] = Flat("kafka", "bootstrap")
    kafka_security_protocol: ClassVar[Flat[str]] = Flat("kafka", "security_protocol")
    kafka_sasl_mechanism: ClassVar[Flat[str | None]] = Flat("kafka", "sasl_mechanism")
    kafka_sasl_username: ClassVar[Flat[str | None]] = Flat("kafka", "sasl_username")
    kafka_sasl_password: ClassVar[Flat[SecretStr | None]] = Flat("kafka", "sasl_password")
    topic_prefix: ClassVar[Flat[str]] = Flat("kafka", "topic_prefix")
    topic_partitions: ClassVar[Flat[int]] = Flat("kafka", "topic_partitions")
    topic_replication_factor: ClassVar[Flat[int]] = Flat("kafka", "topic_replication_factor")
    opensearch_url: ClassVar[Flat[str]] = Flat("opensearch", "url")
    opensearch_username: ClassVar[Flat[str | None]] = Flat("opensearch", "username")
    opensearch_password: ClassVar[Flat[SecretStr | None]] = Flat("opensearch", "password")
    opensearch_verify_certs: ClassVar[Flat[bool]] = Flat("opensearch", "verify_certs")
    opensearch_index_prefix: ClassVar[Flat[str]] = Flat("opensearch", "index_prefix")
    opensearch_replicas: ClassVar[Flat[int]] = Flat("opensearch", "replicas")
    log_retention_days: ClassVar[Flat[int]] = Flat("opensearch", "log_retention_days")
    indexer_batch_size: ClassVar[Flat[int]] = Flat("opensearch", "indexer_batch_size")
    s3_endpoint: ClassVar[Flat[str]] = Flat("s3", "endpoint")
    s3_access_key: ClassVar[Flat[str]] = Flat("s3", "access_key")
    s3_secret_key: ClassVar[Flat[SecretStr]] = Flat("s3", "secret_key")
    s3_secure: ClassVar[Flat[bool]] = Flat("s3", "secure")
    s3_region: ClassVar[Flat[str]] = Flat("s3", "region")
    s3_bucket: ClassVar[Flat[str]] = Flat("s3", "bucket")
    docker_host: ClassVar[Flat[str | None]] = Flat("sandbox", "docker_host")
    sandbox_backend: ClassVar[Flat[Literal["process", "docker"]]] = Flat("sandbox", "backend")
    sandbox_image: ClassVar[Flat[str]] = Flat("sandbox", "image")
    sandbox_rootfs: ClassVar[Flat[Path | None]] = Flat("sandbox", "rootfs")
    sandbox_toolchains_dir: ClassVar[Flat[Path | None]] = Flat("sandbox", "toolchains_dir")
    sandbox_uid: ClassVar[Flat[int]] = Flat("sandbox", "uid")
    sandbox_run_dir: ClassVar[Flat[Path]] = Flat("sandbox", "run_dir")
    sandbox_cgroup_parent: ClassVar[Flat[Path | None]] = Flat("sandbox", "cgroup_parent")
    sandbox_pool_size: ClassVar[Flat[int]] = Flat("sandbox", "pool_size")
    sandbox_slots: ClassVar[Flat[int]] = Flat("sandbox", "slots")
    sandbox_start_rate: ClassVar[Flat[float]] = Flat("sandbox", "start_rate")
    sandbox_slots_dir: ClassVar[Flat[Path | None]] = Flat("sandbox", "slots_dir")
    worker_concurrency: ClassVar[Flat[int]] = Flat("worker", "concurrency")
    worker_max_in_flight: ClassVar[Flat[int]] = Flat("worker", "max_in_flight")
    worker_drain_timeout_s: ClassVar[Flat[float]] = Flat("worker", "drain_timeout_s")
    worker_commit_interval_s: ClassVar[Flat[float]] = Flat("worker", "commit_interval_s")
    worker_transaction_timeout_ms: ClassVar[Flat[int]] = Flat("worker", "transaction_timeout_ms")
    worker_instance_id: ClassVar[Flat[str | None]] = Flat("worker", "instance_id")
    worker_store_artifacts: ClassVar[Flat[bool]] = Flat("worker", "store_artifacts")
    crash_attempts: ClassVar[Flat[int]] = Flat("worker", "crash_attempts")
    metrics_host: ClassVar[Flat[str]] = Flat("worker", "metrics_host")
    metrics_port: ClassVar[Flat[int]] = Flat("worker", "metrics_port")
    episode_retention_s: ClassVar[Flat[float]] = Flat("worker", "episode_retention_s")
    judge_backend: ClassVar[Flat[Literal["rubric", "openai"]]] = Flat("judge", "backend")
    judge_base_url: ClassVar[Flat[str]] = Flat("judge", "base_url")
    judge_model: ClassVar[Flat[str]] = Flat("judge", "model")
    judge_api_key: ClassVar[Flat[SecretStr | None]] = Flat("judge", "api_key")
    judge_timeout_s: ClassVar[Flat[float]] = Flat("judge", "timeout_s")
    judge_retries: ClassVar[Flat[int]] = Flat("judge", "retries")
    judge_concurrency: ClassVar[Flat[int]] = Flat("judge", "concurrency")
    judge_cache_size: ClassVar[Flat[int]] = Flat("judge", "cache_size")
    gateway_host: ClassVar[Flat[str]] = Flat("gateway", "host")
    gateway_port: ClassVar[Flat[int]] = Flat("gateway", "port")
    gateway_tokens: ClassVar[Flat[SecretStr | None]] = Flat("gateway", "tokens")
    gateway_token_concurrency: ClassVar[Flat[int]] = Flat("gateway", "token_concurrency")
    gateway_max_body_bytes: ClassVar[Flat[int]] = Flat("gateway", "max_body_bytes")
    gateway_body_timeout_s: ClassVar[Flat[float]] = Flat("gateway", "body_timeout_s")
    gateway_peer_body_reads: ClassVar[Flat[int]] = Flat("gateway", "peer_body_reads")
    gateway_max_batch: ClassVar[Flat[int]] = Flat("gateway", "max_batch")
    gateway_reward_wait_s: ClassVar[Flat[float]] = Flat("gateway", "reward_wait_s")
    gateway_run_queue_s: ClassVar[Flat[float]] = Flat("gateway", "run_queue_s")
    gateway_reward_cache: ClassVar[Flat[int]] = Flat("gateway", "reward_cache")
    gateway_reward_lookback: ClassVar[Flat[int]] = Flat("gateway", "reward_lookback")
    gateway_kafka_timeout_s: ClassVar[Flat[float]] = Flat("gateway", "kafka_timeout_s")
    gateway_instance_id: ClassVar[Flat[str | None]] = Flat("gateway", "instance_id")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Keyword arguments, then the ``RS_*`` environment; flat names go to their groups in both."""
        return _Nested(settings_cls, init_settings), _Nested(settings_cls, _FlatEnvironment(settings_cls))

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy with ``update`` applied; a flat name (``topic_prefix``) updates its group."""
        if not update:
            return super().model_copy(update=update, deep=deep)
        nested = dict(update)
        for group, fields in _grouped(nested).items():
            current = nested.get(group, getattr(self, group))
            nested[group] = current.model_copy(update=fields)
        return super().model_copy(update=nested, deep=deep)

    def sandbox_image_version(self) -> str:
        """The tag of ``sandbox_image`` (``latest`` when untagged); it versions the rootfs too."""
        return self.sandbox.image_version()

    def sandbox_rootfs_path(self) -> Path:
        """The process backend's root filesystem: ``sandbox_rootfs``, else where the local platform builds it."""
        return self.sandbox.rootfs or self.local.cache_dir / "sandbox" / f"rootfs-{self.sandbox.image_version()}"

    def toolchain_rootfs_path(self, family: str) -> Path:
        """The root filesystem of a toolchain family (``python`` is ``sandbox_rootfs_path``): each family is a
        tree of its own, so the python one stays as small and as quick to build as it is."""
        if family == PYTHON_TOOLCHAIN:
            return self.sandbox_rootfs_path()
        base = self.sandbox.toolchains_dir or self.local.cache_dir / "sandbox"
        return base / f"rootfs-{family}-{self.sandbox.image_version()}"

    def toolchain_image(self, family: str) -> str:
        """The docker image of a toolchain family (``python`` is ``sandbox_image``): the sandbox image's
        repository with its ``-python`` suffix (if any) replaced by ``-<family>``, same tag."""
        if family == PYTHON_TOOLCHAIN:
            return self.sandbox.image
        head, _, name = self.sandbox.image.rpartition("/")
        repo = name.split(":", 1)[0]
        repo = repo.removesuffix("-python") + f"-{family}"
        tagged = f"{repo}:{self.sandbox.image_version()}"
        return f"{head}/{tagged}" if head else tagged

    def kafka_client_config(self) -> dict[str, str]:
        """confluent-kafka/librdkafka config for the common connection settings."""
        return self.kafka.client_config()


@cache
def flat_names() -> dict[str, tuple[str, str]]:
    """Every flat setting name (``RS_`` + its upper case is its environment variable) -> (group, field)."""
    return {name: (v.group, v.field) for name, v in vars(Settings).items() if isinstance(v, Flat)}


def env_name(path: str) -> str:
    """The environment variable of a setting's path (``kafka.topic_partitions`` -> ``RS_TOPIC_PARTITIONS``)."""
    by_path = {f"{group}.{field}": name for name, (group, field) in flat_names().items()}
    return ENV_PREFIX + by_path.get(path, path).upper()


def _grouped(values: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Pop every flat name out of ``values``: {group: {field: value}}."""
    groups: dict[str, dict[str, Any]] = {}
    for name, (group, field) in flat_names().items():
        if name in values:
            groups.setdefault(group, {})[field] = values.pop(name)
    return groups


class _FlatEnvironment(PydanticBaseSettingsSource):
    """The ``RS_*`` variables of the environment (any case, as pydantic-settings reads them), by flat name."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        environ = {key.lower(): value for key, value in os.environ.items()}
        groups = {group for group, _ in flat_names().values()}
        names = [*flat_names(), *(name for name in Settings.model_fields if name not in groups)]
        return {name: environ[key] for name in names if (key := f"{ENV_PREFIX}{name}".lower()) in environ}


class _Nested(PydanticBaseSettingsSource):
    """``source``'s values with the flat names moved into their groups (a group given whole keeps its values)."""

    def __init__(self, settings_cls: type[BaseSettings], source: PydanticBaseSettingsSource) -> None:
        super().__init__(settings_cls)
        self.source = source

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        values = dict(self.source())
        for group, fields in _grouped(values).items():
            given = values.get(group)
            values[group] = {**(given.model_dump() if isinstance(given, BaseModel) else given or {}), **fields}
        return values
