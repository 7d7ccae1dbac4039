"""One frozen settings object, read from the environment (prefix ``RS_``) in one place.

Defaults point at the local embedded services started by ``rewardstream up``; production points the same
fields at real clusters (see docs/operations.md, "Pointing at production").

The settings are grouped by what they configure (``settings.kafka``, ``.s3``, ``.opensearch``, ``.sandbox``,
``.worker``, ``.judge``, ``.gateway``, ``.local``), so a part can be handed only its own. Each setting is
declared once, as a field of its group (name, type, default, description); its one flat ``RS_*`` environment
name is derived from it (the group's ``flat_prefix`` and the field's name: ``RS_KAFKA_BOOTSTRAP`` is
``kafka.bootstrap``). That flat name is also a keyword of ``Settings(...)`` and of ``model_copy(update=...)``,
an attribute at run time (``settings.kafka_bootstrap``; typed code reads ``settings.kafka.bootstrap``), and
what a bad value's error names. Components built from the settings take their defaults from ``defaults``.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, Self, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, SecretStr
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from schemas.backends import Backend
from schemas.kafka_cluster import broker_addresses, check_cluster_size

ENV_PREFIX = "RS_"

#: The toolchain family of the original sandbox image and rootfs (python, pytest, git): what runs when a run
#: names no other family.
PYTHON_TOOLCHAIN = "python"


def _default_cache_dir() -> Path:
    return Path.home() / ".cache" / "rewardstream"


class _Group(BaseModel):
    """A group of settings. Each field's flat ``RS_*`` name is the group's ``flat_prefix`` and the field's name,
    but for the fields in ``unprefixed`` (their name alone: ``RS_TOPIC_PREFIX`` is ``kafka.topic_prefix``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    flat_prefix: ClassVar[str] = ""
    unprefixed: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        if unknown := cls.unprefixed - set(cls.model_fields):
            raise TypeError(f"{cls.__name__}.unprefixed names no field: {sorted(unknown)}")

    @classmethod
    def flat_name(cls, field: str) -> str:
        """The flat name of ``field`` (``RS_`` + its upper case is its environment variable)."""
        return field if field in cls.unprefixed else cls.flat_prefix + field


class LocalPlatformSettings(_Group):
    """The local embedded platform: where it keeps downloads and data, where it downloads from, how long it waits."""

    cache_dir: Path = Field(default_factory=_default_cache_dir, description="downloads, data and logs")
    maven_url: str = Field("https://repo1.maven.org/maven2", description="Maven repository for service jars")
    java_home: Path | None = Field(None, description="JDK for Kafka/OpenSearch/S3 (default: java on PATH)")
    debian_mirror: str = Field("http://deb.debian.org/debian", description="mirror for the sandbox image")
    ca_certificates_dir: Path = Field(
        Path("/usr/local/share/ca-certificates"),
        description="its *.crt are trusted in the local base images (TLS-intercepting egress)",
    )
    startup_timeout_s: float = 180.0
    health_timeout_s: float = 3.0
    prometheus_url: str = Field(
        "http://127.0.0.1:9490", description="Prometheus that `up --pipeline` starts (loopback) or an existing one: "
        "`status` reads its alerts (not 9090: Debian's own prometheus service may hold it)",
    )  # fmt: skip
    alertmanager_url: str = Field("http://127.0.0.1:9493", description="Alertmanager that `up --pipeline` starts")
    kafka_auth: Literal["none", "scram"] = Field("none", description="the local Kafka: none (open), or scram (SASL/"
        "SCRAM over TLS, a principal per role and trainer with ACLs; credentials in <cache>/kafka-auth)")  # fmt: skip
    kafka_trainers: str = Field("trainer", description="kafka_auth=scram: the trainer principals, comma-separated")


class KafkaSettings(_Group):
    """The Kafka cluster and the topic catalog on it."""

    flat_prefix: ClassVar[str] = "kafka_"
    unprefixed: ClassVar[frozenset[str]] = frozenset({"topic_prefix", "topic_partitions", "topic_replication_factor"})

    bootstrap: str = Field("127.0.0.1:9092", description="host:port, comma-separated (brokers=3: one is port, +2, +4)")
    brokers: Annotated[int, AfterValidator(check_cluster_size)] = Field(
        1, description="1, or 3: `up` runs three KRaft nodes; catalog topics get 3 replicas, 2 in sync"
    )
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    ssl_ca_location: Path | None = Field(None, description="PEM file of the CA that signed the brokers' certificates")
    topic_prefix: str = "rs."
    topic_partitions: int = Field(6, ge=1, le=10_000, description="partitions of every catalog topic")
    topic_replication_factor: int | None = Field(
        None, ge=1, le=16, description="replicas of every catalog topic (default: 3 with brokers=3, else 1)"
    )

    def replication_factor(self) -> int:
        """Replicas of every catalog topic: the setting, else one per broker (1 or 3)."""
        return self.topic_replication_factor or self.brokers

    def broker_addresses(self) -> tuple[str, ...]:
        """Every broker's ``host:port`` (``schemas.kafka_cluster``): what clients bootstrap from."""
        return broker_addresses(self.bootstrap, self.brokers)

    def client_config(self) -> dict[str, str]:
        """confluent-kafka/librdkafka config for the common connection settings."""
        bootstrap = ",".join(self.broker_addresses())
        config = {"bootstrap.servers": bootstrap, "security.protocol": self.security_protocol}
        if self.sasl_mechanism:
            config["sasl.mechanism"] = self.sasl_mechanism
        if self.sasl_username:
            config["sasl.username"] = self.sasl_username
        if self.sasl_password is not None:
            config["sasl.password"] = self.sasl_password.get_secret_value()
        if self.ssl_ca_location is not None:
            config["ssl.ca.location"] = str(self.ssl_ca_location)
        return config


class OpenSearchSettings(_Group):
    """OpenSearch, where the log indexer writes and ``logs search``/``explain`` read."""

    flat_prefix: ClassVar[str] = "opensearch_"
    unprefixed: ClassVar[frozenset[str]] = frozenset({"log_retention_days", "log_retention_gb", "indexer_batch_size"})

    url: str = "http://127.0.0.1:9200"
    username: str | None = None
    password: SecretStr | None = None
    verify_certs: bool = True
    index_prefix: str = "rewardstream-logs"
    replicas: int = Field(1, ge=0, le=16, description="replicas of each daily log index")
    log_retention_days: int = Field(14, ge=1, le=3650, description="daily log indices older than this are deleted")
    log_retention_gb: float = Field(
        0.0, ge=0, le=1_000_000,
        description="the log indices' total store size (replicas included) above which the oldest daily indices "
        "are deleted, never today's; 0: no size cap",
    )  # fmt: skip
    indexer_batch_size: int = Field(500, ge=1, le=10_000, description="log records per OpenSearch bulk request")


class S3Settings(_Group):
    """The S3 store (MinIO in production) of artifacts and workspace snapshots."""

    flat_prefix: ClassVar[str] = "s3_"

    endpoint: str = "127.0.0.1:9000"
    access_key: str = "rewardstream"
    secret_key: SecretStr = SecretStr("rewardstream-local-secret")
    secure: bool = False
    region: str = "us-east-1"
    bucket: str = "rewardstream-artifacts"
    artifact_expiry_days: int = Field(
        45, ge=0, le=36_500,
        description="content-addressed objects (sha256/: code, outputs, snapshots, transcripts, claims) expire "
        "this long after written or refreshed (a lifecycle rule set by `up` and the workers); 0: never",
    )  # fmt: skip


class SandboxSettings(_Group):
    """The sandbox backends: which one, their image or root filesystem, and their isolation knobs."""

    flat_prefix: ClassVar[str] = "sandbox_"
    unprefixed: ClassVar[frozenset[str]] = frozenset({"docker_host"})

    docker_host: str | None = Field(None, description="DOCKER_HOST-style URL; default: local socket")
    backend: Backend = "process"
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
    fleet_start_rate: float = Field(
        0.0, ge=0, le=100_000,
        description="sandbox starts per second of each sandboxed role's whole fleet (executor, verifier, episode "
        "worker; 0: no fleet cap): a worker paces its starts at this times the share of its group's partitions it "
        "owns, on top of the host's pace",
    )  # fmt: skip
    slots_dir: Path | None = Field(
        None, description="where the host's slot locks live, shared by every worker on it; default <run_dir>/slots"
    )
    task_images: Literal["local", "registry"] = Field(
        "local",
        description="where image tasks' base and prebuilt images come from: local (the known bases built here from "
        "Debian packages, nothing pulled) or registry (pulled as usual)",
    )

    def image_version(self) -> str:
        """The tag of ``image`` (``latest`` when untagged); it versions the rootfs too."""
        name = self.image.rsplit("/", 1)[-1]
        return name.split(":", 1)[1] if ":" in name else "latest"


class WorkerSettings(_Group):
    """Every consumer process (the roles' and episode workers, the indexer, the reward processor)."""

    flat_prefix: ClassVar[str] = "worker_"
    unprefixed: ClassVar[frozenset[str]] = frozenset(
        {"crash_attempts", "metrics_host", "metrics_port", "episode_retention_s", "audit_rate"}
    )

    concurrency: int = Field(2, ge=1, le=256, description="sandbox runs (or judge calls) at once per worker")
    max_in_flight: int = Field(0, ge=0, le=100_000, description="buffered events before pausing (0: 16x, >= 64)")
    drain_timeout_s: float = Field(30.0, ge=0, description="SIGTERM: finish in-flight runs within this")
    rebalance_drain_s: float = Field(
        5.0, ge=0, le=60,
        description="a pod joined or left: the started runs of partitions moving away get this long to finish "
        "and commit, the rest is re-run by the new owner (well below max.poll.interval.ms, 300 s)",
    )  # fmt: skip
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
    audit_rate: float = Field(
        0.01, ge=0, le=1,
        description="share of verdicts the auditor re-grades on the other sandbox backend (by a hash of the "
        "generation id: the same ones everywhere); 0: no audits",
    )  # fmt: skip


class GatewaySettings(_Group):
    """The HTTP gateway (``rewardstream serve``): a stateless door onto the same topics."""

    flat_prefix: ClassVar[str] = "gateway_"

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

    flat_prefix: ClassVar[str] = "judge_"

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


def shared_fields(group: _Group, config: type) -> dict[str, Any]:
    """``group``'s values of the fields ``config`` (a dataclass a component is built with) has too, by name: a
    component config built from its group repeats no list of settings."""
    names = {field.name for field in dataclasses.fields(config)}
    return {name: getattr(group, name) for name in type(group).model_fields if name in names}


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
    tasks_registry: str | None = Field(
        None,
        description="the task registry in S3, s3://bucket/prefix (public/ for every worker, hidden/ for verifiers "
        "only, through the s3 endpoint and credentials); unset: the directory tasks_dir",
    )
    tasks_cache_mb: int = Field(
        256, ge=1, le=1_048_576, description="local disk a worker keeps task versions fetched from S3 in"
    )

    if not TYPE_CHECKING:  # typed code reads the group (settings.kafka.bootstrap); the flat name is for the rest

        def __getattr__(self, name: str) -> Any:
            """A flat name (``settings.kafka_bootstrap``) is its group's field."""
            where = flat_names().get(name)
            if where is None:
                return super().__getattr__(name)
            return getattr(getattr(self, where[0]), where[1])

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
    """Every flat setting name (``RS_`` + its upper case is its environment variable) -> (group, field), derived
    from the groups' fields: a setting is declared once, in its group."""
    names: dict[str, tuple[str, str]] = {}
    for group, info in Settings.model_fields.items():
        kind = info.annotation
        if isinstance(kind, type) and issubclass(kind, _Group):
            names.update({kind.flat_name(field): (group, field) for field in kind.model_fields})
    return names


#: ``RS_`` variables the product reads that are no setting: the debug switch, the VM tests', the examples'.
NOT_SETTINGS = frozenset({"RS_DEBUG", "RS_VM", "RS_VM_ACCEL", "RS_RUN_ID"})


def unknown_variables(environ: Mapping[str, str]) -> list[str]:
    """What to say of each ``RS_*`` variable of ``environ`` that is no setting: a misspelt setting is otherwise
    ignored without a word, and its default used."""
    names = [*flat_names(), *Settings.model_fields]
    known = {ENV_PREFIX + name.upper() for name in names} | NOT_SETTINGS
    said: list[str] = []
    for key in sorted(environ):
        upper = key.upper()
        if upper.startswith(ENV_PREFIX) and upper not in known:
            near = difflib.get_close_matches(upper, sorted(known), n=1, cutoff=0.6)
            said.append(
                f"{key} is no setting of rewardstream and is ignored" + (f" (did you mean {near[0]}?)" if near else "")
            )
    return said


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
