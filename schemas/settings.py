"""One frozen settings object, read from the environment (prefix ``RS_``) in one place.

Defaults point at the local embedded services started by ``rewardstream up``; production points the same
fields at real clusters (see README, "Pointing at production").
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

#: The toolchain family of the original sandbox image and rootfs (python, pytest, git): what runs when a run
#: names no other family.
PYTHON_TOOLCHAIN = "python"


def _default_cache_dir() -> Path:
    return Path.home() / ".cache" / "rewardstream"


class Settings(BaseSettings):
    """Every endpoint, credential and knob of rewardstream. Immutable once built."""

    model_config = SettingsConfigDict(env_prefix="RS_", frozen=True, extra="ignore")

    # Local platform
    cache_dir: Path = Field(default_factory=_default_cache_dir, description="downloads, data and logs")
    maven_url: str = Field("https://repo1.maven.org/maven2", description="Maven repository for service jars")
    java_home: Path | None = Field(None, description="JDK for Kafka/OpenSearch/S3 (default: java on PATH)")
    debian_mirror: str = Field("http://deb.debian.org/debian", description="mirror for the sandbox image")

    # Kafka
    kafka_bootstrap: str = "127.0.0.1:9092"
    kafka_security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    kafka_sasl_mechanism: str | None = None
    kafka_sasl_username: str | None = None
    kafka_sasl_password: SecretStr | None = None
    topic_prefix: str = "rs."
    topic_partitions: int = Field(6, ge=1, le=10_000, description="partitions of every catalog topic")
    topic_replication_factor: int = Field(1, ge=1, le=16, description="replicas of every catalog topic")

    # Task registry
    tasks_dir: Path = Field(
        default_factory=lambda data: Path(data["cache_dir"]) / "tasks",
        description="task registry: public/ readable by trainers, hidden/ by verifiers only",
    )

    # OpenSearch
    opensearch_url: str = "http://127.0.0.1:9200"
    opensearch_username: str | None = None
    opensearch_password: SecretStr | None = None
    opensearch_verify_certs: bool = True
    opensearch_index_prefix: str = "rewardstream-logs"
    opensearch_replicas: int = Field(1, ge=0, le=16, description="replicas of each daily log index")
    log_retention_days: int = Field(14, ge=1, le=3650, description="daily log indices older than this are deleted")
    indexer_batch_size: int = Field(500, ge=1, le=10_000, description="log records per OpenSearch bulk request")

    # Worker metrics (Prometheus)
    metrics_host: str = Field("127.0.0.1", description="address the worker's /metrics endpoint binds to")
    metrics_port: int = Field(9464, ge=0, le=65535, description="port of /metrics; 0 picks a free one")

    # Every consumer (workers, indexer, reward processor)
    crash_attempts: int = Field(
        3, ge=1, le=100, description="deaths of a consumer while one message ran alone before it is dead-lettered"
    )

    # Executor/verifier/judge workers
    worker_concurrency: int = Field(2, ge=1, le=256, description="sandbox runs (or judge calls) at once per worker")
    worker_max_in_flight: int = Field(0, ge=0, le=100_000, description="buffered events before pausing (0: 16x, >= 64)")
    worker_drain_timeout_s: float = Field(30.0, ge=0, description="SIGTERM: finish in-flight runs within this")
    worker_commit_interval_s: float = Field(0.5, gt=0, le=60, description="max delay before results are committed")
    worker_transaction_timeout_ms: int = Field(15_000, ge=1000, description="a dead worker's open transaction aborts")
    worker_instance_id: str | None = Field(None, description="transactional.id suffix; default host-pid-random")
    worker_store_artifacts: bool = Field(True, description="store code and per-case results in S3")

    # Episode workers
    episode_retention_s: float = Field(
        86_400.0, gt=0, le=90 * 86_400,
        description="an ended episode's state is kept this long after its last action (forks from it, late "
        "duplicates answered), then deleted from the worker's table and its changelog",
    )  # fmt: skip

    # HTTP gateway (`rewardstream serve`): a stateless door onto the same topics
    gateway_host: str = Field("127.0.0.1", description="address the gateway binds to (not loopback: tokens needed)")
    gateway_port: int = Field(8080, ge=0, le=65535, description="port of the gateway; 0 picks a free one")
    gateway_tokens: SecretStr | None = Field(
        None, description="bearer tokens the gateway accepts, comma-separated; required on a non-loopback bind"
    )
    gateway_token_concurrency: int = Field(
        64, ge=1, le=100_000, description="requests in flight per token (or per anonymous loopback client): 429 past it"
    )
    gateway_max_body_bytes: int = Field(
        4 << 20, ge=1024, le=256 << 20, description="largest request body the gateway reads: 413 past it"
    )
    gateway_max_batch: int = Field(256, ge=1, le=10_000, description="generations in one POST /v1/rewards")
    gateway_reward_wait_s: float = Field(
        600.0, gt=0, le=3600, description="longest a rewards request waits for its rewards (wait=true, /get_reward)"
    )
    gateway_run_queue_s: float = Field(
        60.0, gt=0, le=3600,
        description="how long a /run_code request may wait for an executor on top of its own timeouts (504 past it)",
    )  # fmt: skip
    gateway_reward_cache: int = Field(
        100_000, ge=100, le=10_000_000, description="rewards each gateway keeps for polling (the most recent)"
    )
    gateway_reward_lookback: int = Field(
        10_000, ge=0, le=10_000_000, description="rewards per partition a starting gateway reads below the end"
    )
    gateway_kafka_timeout_s: float = Field(
        10.0, gt=0, le=300, description="a produce not acknowledged within this is a 503 (Kafka unreachable)"
    )
    gateway_instance_id: str | None = Field(
        None, description="this replica's id in run requests; default host-pid-random"
    )

    # Judge
    judge_backend: Literal["rubric", "openai"] = Field("rubric", description="built-in rubric or a chat server")
    judge_base_url: str = Field("http://127.0.0.1:8000/v1", description="OpenAI-compatible API base URL")
    judge_model: str = Field("judge", description="model name sent to the judge server")
    judge_api_key: SecretStr | None = Field(None, description="bearer token for the judge server")
    judge_timeout_s: float = Field(30.0, gt=0, description="per-request timeout of the judge server")
    judge_retries: int = Field(3, ge=0, le=20, description="retries of a failed judge request")
    judge_concurrency: int = Field(8, ge=1, le=1024, description="judge requests at once per worker")
    judge_cache_size: int = Field(65_536, ge=0, description="judge results cached by code hash (0: off)")

    # S3 / MinIO
    s3_endpoint: str = "127.0.0.1:9000"
    s3_access_key: str = "rewardstream"
    s3_secret_key: SecretStr = SecretStr("rewardstream-local-secret")
    s3_secure: bool = False
    s3_region: str = "us-east-1"
    s3_bucket: str = "rewardstream-artifacts"

    # Docker / sandboxes
    docker_host: str | None = Field(None, description="DOCKER_HOST-style URL; default: local socket")
    sandbox_backend: Literal["process", "docker"] = "process"
    sandbox_image: str = "rewardstream-sandbox-python:1"
    sandbox_rootfs: Path | None = Field(
        None, description="process backend root filesystem; default <cache>/sandbox/rootfs-<image tag> (`up` builds it)"
    )
    sandbox_toolchains_dir: Path | None = Field(
        None,
        description="where the process backend finds the toolchain families' root filesystems, "
        "rootfs-<family>-<image tag>; default <cache>/sandbox (built on first use)",
    )
    sandbox_uid: int = Field(60123, description="unprivileged host uid/gid that runs candidate code")
    sandbox_run_dir: Path = Field(Path("/run/rewardstream-sandbox"), description="process backend mounts")
    sandbox_cgroup_parent: Path | None = Field(None, description="delegated cgroup for runs (default: own)")
    sandbox_pool_size: int = Field(4, description="warm containers kept ready by the docker backend")

    # Timeouts
    startup_timeout_s: float = 180.0
    health_timeout_s: float = 3.0

    def sandbox_image_version(self) -> str:
        """The tag of ``sandbox_image`` (``latest`` when untagged); it versions the rootfs too."""
        name = self.sandbox_image.rsplit("/", 1)[-1]
        return name.split(":", 1)[1] if ":" in name else "latest"

    def sandbox_rootfs_path(self) -> Path:
        """The process backend's root filesystem: ``sandbox_rootfs``, else where the local platform builds it."""
        return self.sandbox_rootfs or self.cache_dir / "sandbox" / f"rootfs-{self.sandbox_image_version()}"

    def toolchain_rootfs_path(self, family: str) -> Path:
        """The root filesystem of a toolchain family (``python`` is ``sandbox_rootfs_path``): each family is a
        tree of its own, so the python one stays as small and as quick to build as it is."""
        if family == PYTHON_TOOLCHAIN:
            return self.sandbox_rootfs_path()
        base = self.sandbox_toolchains_dir or self.cache_dir / "sandbox"
        return base / f"rootfs-{family}-{self.sandbox_image_version()}"

    def toolchain_image(self, family: str) -> str:
        """The docker image of a toolchain family (``python`` is ``sandbox_image``): the sandbox image's
        repository with its ``-python`` suffix (if any) replaced by ``-<family>``, same tag."""
        if family == PYTHON_TOOLCHAIN:
            return self.sandbox_image
        head, _, name = self.sandbox_image.rpartition("/")
        repo = name.split(":", 1)[0]
        repo = repo.removesuffix("-python") + f"-{family}"
        tagged = f"{repo}:{self.sandbox_image_version()}"
        return f"{head}/{tagged}" if head else tagged

    def kafka_client_config(self) -> dict[str, str]:
        """confluent-kafka/librdkafka config for the common connection settings."""
        config = {
            "bootstrap.servers": self.kafka_bootstrap,
            "security.protocol": self.kafka_security_protocol,
        }
        if self.kafka_sasl_mechanism:
            config["sasl.mechanism"] = self.kafka_sasl_mechanism
        if self.kafka_sasl_username:
            config["sasl.username"] = self.kafka_sasl_username
        if self.kafka_sasl_password is not None:
            config["sasl.password"] = self.kafka_sasl_password.get_secret_value()
        return config
