"""Kafka, single node in KRaft mode, from the Apache Kafka jars on Maven Central (Java 17).

The jars and their dependencies are resolved by Maven with strict checksum checking (``mvn -C``), so every
file is verified against the checksum Maven Central publishes.
"""

from __future__ import annotations

import base64
import logging
import os
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any

from infra.local.download import require_free_space
from infra.local.java import find_java
from infra.local.paths import PlatformPaths
from infra.local.process import tail
from infra.local.service import (
    Health,
    PortClaim,
    ProcessService,
    split_host_port,
    unreachable_reason,
)
from infra.local.versions import (
    KAFKA_PORT_CONTROLLER_OFFSET,
    KAFKA_SCALA_VERSION,
    KAFKA_VERSION,
    SLF4J_RELOAD4J_VERSION,
)
from schemas.errors import PlatformError
from schemas.settings import Settings

#: Characters of kafka-storage's stdout and of its stderr, their ends, that say why formatting failed.
_FORMAT_OUTPUT_CHARS = 500

_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.rewardstream</groupId>
  <artifactId>kafka-server-libs</artifactId>
  <version>1</version>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_{scala}</artifactId>
      <version>{kafka}</version>
      <exclusions>
        <exclusion><groupId>ch.qos.logback</groupId><artifactId>*</artifactId></exclusion>
      </exclusions>
    </dependency>
    <dependency>
      <groupId>org.slf4j</groupId>
      <artifactId>slf4j-reload4j</artifactId>
      <version>{slf4j}</version>
    </dependency>
  </dependencies>
</project>
"""

_MAVEN_SETTINGS = """<settings>
  <mirrors>
    <mirror><id>rs-mirror</id><mirrorOf>*</mirrorOf><url>{url}</url></mirror>
  </mirrors>
</settings>
"""

_LOG4J = """log4j.rootLogger=WARN, stdout
log4j.logger.kafka=INFO
log4j.logger.org.apache.kafka=WARN
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
"""


def new_cluster_id() -> str:
    """A KRaft cluster id as Kafka's ``Uuid.randomUuid`` makes one: 22 url-safe base64 characters, never starting
    with ``-`` (the storage tool's argument parser would read such an id as an option: 1 start in 64 failed)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


class KafkaService(ProcessService):
    """Kafka broker+controller on loopback; data under the cache dir."""

    name = "kafka"

    def __init__(self, settings: Settings, paths: PlatformPaths) -> None:
        super().__init__(settings, paths, *split_host_port(settings.kafka.bootstrap.split(",")[0], 9092))
        self._home = paths.dist / f"kafka_{KAFKA_SCALA_VERSION}-{KAFKA_VERSION}"
        self._data = paths.data / "kafka"
        self._config = self._data / "server.properties"

    @property
    def endpoint(self) -> str:
        return self._settings.kafka.bootstrap

    def ports(self) -> list[PortClaim]:
        return [
            PortClaim("Kafka", self._host, self._port, "RS_KAFKA_BOOTSTRAP"),
            PortClaim(
                "Kafka's controller", self._host, self._port + KAFKA_PORT_CONTROLLER_OFFSET, "RS_KAFKA_BOOTSTRAP"
            ),
        ]

    def installed(self) -> bool:
        return (self._home / ".complete").exists()

    def install(self) -> None:
        libs = self._home / "libs"
        done = self._home / ".complete"
        if done.exists():
            return
        mvn = shutil.which("mvn")
        if mvn is None:
            raise PlatformError("Maven (mvn) not found, needed to fetch the Kafka jars: apt-get install maven")
        require_free_space(self._paths.root, 300)
        self._home.mkdir(parents=True, exist_ok=True)
        pom = self._home / "pom.xml"
        pom.write_text(_POM.format(scala=KAFKA_SCALA_VERSION, kafka=KAFKA_VERSION, slf4j=SLF4J_RELOAD4J_VERSION))
        maven_settings = self._home / "maven-settings.xml"
        maven_settings.write_text(_MAVEN_SETTINGS.format(url=self._settings.local.maven_url))
        java = find_java(self._settings.local.java_home)
        env = {**os.environ, "JAVA_HOME": str(java.resolve().parent.parent)}
        log = self._paths.logs / "kafka-install.log"
        argv = [
            mvn, "-B", "-q", "-C",
            f"-Dmaven.repo.local={self._paths.maven_repo}",
            "-s", str(maven_settings), "-f", str(pom),
            "dependency:copy-dependencies",
            f"-DoutputDirectory={libs}", "-DincludeScope=runtime",
        ]  # fmt: skip
        with log.open("wb") as out:
            result = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, env=env, check=False)
        if result.returncode != 0:
            raise PlatformError(f"fetching the Kafka jars with Maven failed (see {log}): {tail(log, 3)}")
        done.write_text(KAFKA_VERSION)

    def _write_config(self) -> None:
        self._data.mkdir(parents=True, exist_ok=True)
        controller = self._port + KAFKA_PORT_CONTROLLER_OFFSET
        host = self._host
        lines = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@{host}:{controller}",
            "listeners": f"PLAINTEXT://{host}:{self._port},CONTROLLER://{host}:{controller}",
            "advertised.listeners": f"PLAINTEXT://{host}:{self._port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self._data / "log"),
            "num.partitions": "1",
            "auto.create.topics.enable": "false",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "8",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "8",
            "group.initial.rebalance.delay.ms": "0",
            "log.retention.hours": "24",
            "log.segment.bytes": str(64 << 20),
        }
        self._config.write_text("".join(f"{k}={v}\n" for k, v in lines.items()))
        (self._data / "log4j.properties").write_text(_LOG4J)

    def _java_argv(self, java: Path, main: str, *args: str) -> list[str]:
        return [
            str(java), "-Xms256m", "-Xmx512m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
            "-Djava.awt.headless=true",
            f"-Dlog4j.configuration=file:{self._data / 'log4j.properties'}",
            f"-Dkafka.logs.dir={self._paths.logs}",
            "-cp", f"{self._home / 'libs'}/*", main, *args,
        ]  # fmt: skip

    def _format_storage(self, java: Path) -> None:
        if (self._data / "log" / "meta.properties").exists():
            return
        cluster_id = new_cluster_id()
        argv = self._java_argv(
            java, "kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id}", "-c", str(self._config)
        )
        result = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)
        if result.returncode != 0:
            out, err = result.stdout[-_FORMAT_OUTPUT_CHARS:], result.stderr[-_FORMAT_OUTPUT_CHARS:]
            raise PlatformError(f"formatting Kafka storage failed: {out}{err}")

    def start(self) -> None:
        java = self._java_to_start()
        if java is None:
            return
        self._write_config()
        self._format_storage(java)
        argv = self._java_argv(java, "kafka.Kafka", str(self._config))
        self._process.start(argv, env=_java_env(java), cwd=self._data)

    def health(self) -> Health:
        from confluent_kafka.admin import AdminClient

        details: dict[str, Any] = {"managed_pid": self._process.pid(), "version": KAFKA_VERSION}
        if self.is_local() and (reason := unreachable_reason("Kafka", self._host, self._port)):
            return Health(False, self.endpoint, reason, details)
        quiet = logging.getLogger("rewardstream.kafka.health")
        quiet.addHandler(logging.NullHandler())
        quiet.propagate = False
        config: dict[str, Any] = {**self._settings.kafka_client_config(), "socket.timeout.ms": 3000, "logger": quiet}
        client = AdminClient(config)
        try:
            metadata = client.list_topics(timeout=self._settings.local.health_timeout_s)
        except Exception as exc:
            return Health(False, self.endpoint, f"Kafka does not answer at {self.endpoint}: {exc}", details)
        details["brokers"] = len(metadata.brokers)
        if not metadata.brokers:
            return Health(False, self.endpoint, "Kafka answered but reports no broker", details)
        return Health(True, self.endpoint, None, details)


def _java_env(java: Path) -> dict[str, str]:
    """A minimal environment for a Java service: no secrets of the caller leak into it."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "JAVA_HOME": str(java.resolve().parent.parent),
        "LANG": "C.UTF-8",
        "HOME": os.environ.get("HOME", "/tmp"),  # noqa: S108
    }
