"""Kafka in KRaft mode, one node or three (``kafka_nodes``), from the Apache Kafka jars on Maven Central (Java 17).

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
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bus.admin import ensure_topics
from infra.local.download import require_free_space
from infra.local.java import find_java
from infra.local.kafka_auth import KafkaAuth
from infra.local.kafka_nodes import (
    MAX_NODES,
    KafkaNode,
    cluster_dir,
    every_process,
    kafka_nodes,
    server_properties,
)
from infra.local.paths import PlatformPaths
from infra.local.process import group_rss_kb, tail
from infra.local.service import Health, PortClaim, ProcessService, port_is_open, require_port_free
from infra.local.versions import KAFKA_SCALA_VERSION, KAFKA_VERSION, SLF4J_RELOAD4J_VERSION
from schemas.errors import PlatformError
from schemas.kafka_acls import ADMIN
from schemas.settings import Settings
from schemas.topics import catalog_for

#: The heap of each node of a three-node cluster (the single broker keeps its 512 MB): three fit a small host.
CLUSTER_NODE_HEAP = "-Xmx384m"
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
    """Kafka on loopback: one broker+controller, or three (``RS_KAFKA_BROKERS``); data under the cache dir."""

    name = "kafka"

    def __init__(self, settings: Settings, paths: PlatformPaths) -> None:
        self._nodes = kafka_nodes(settings, paths)
        first = self._nodes[0]
        super().__init__(settings, paths, first.host, first.port)
        self._process = first.process
        self._home = paths.dist / f"kafka_{KAFKA_SCALA_VERSION}-{KAFKA_VERSION}"
        #: SASL/SCRAM over TLS with ACLs (``RS_KAFKA_AUTH=scram``), else None: open PLAINTEXT listeners.
        self.auth = KafkaAuth(settings, paths) if settings.local.kafka_auth == "scram" else None

    @property
    def nodes(self) -> tuple[KafkaNode, ...]:
        return self._nodes

    @property
    def endpoint(self) -> str:
        if len(self._nodes) == 1:
            return self._settings.kafka.bootstrap
        return ",".join(node.address for node in self._nodes)

    def ports(self) -> list[PortClaim]:
        """The ports of every node that is not running (a running one holds its own)."""
        claims = []
        for node in self._nodes:
            if node.process.pid() is not None:
                continue
            which = "" if len(self._nodes) == 1 else f" node {node.node_id}"
            claims += [
                PortClaim(f"Kafka{which}", node.host, node.port, "RS_KAFKA_BOOTSTRAP"),
                PortClaim(f"Kafka{which}'s controller", node.host, node.controller_port, "RS_KAFKA_BOOTSTRAP"),
            ]
        return claims

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

    def _write_config(self, node: KafkaNode) -> None:
        node.data.mkdir(parents=True, exist_ok=True)
        lines = server_properties(node, self._nodes)
        if self.auth is not None:
            lines |= self.auth.server_properties(node.host, node.port, node.controller_port)
        node.config.touch(mode=0o600)  # it holds the admin's password in auth mode
        node.config.chmod(0o600)
        node.config.write_text("".join(f"{k}={v}\n" for k, v in lines.items()))
        (node.data / "log4j.properties").write_text(_LOG4J)

    def _java_argv(self, java: Path, node: KafkaNode, main: str, *args: str) -> list[str]:
        # Three brokers share the host: a smaller heap each (what an idle or test cluster needs).
        heap = ["-Xms256m", "-Xmx512m"] if len(self._nodes) == 1 else ["-Xms128m", CLUSTER_NODE_HEAP]
        return [
            str(java), *heap, "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
            "-Djava.awt.headless=true",
            f"-Dlog4j.configuration=file:{node.data / 'log4j.properties'}",
            f"-Dkafka.logs.dir={self._paths.logs}",
            "-cp", f"{self._home / 'libs'}/*", main, *args,
        ]  # fmt: skip

    def _cluster_id(self) -> str:
        """A new id for the single broker; the one id all three nodes share (kept beside their data dirs)."""
        if len(self._nodes) == 1:
            return new_cluster_id()
        kept = cluster_dir(self._paths) / "cluster.id"
        if kept.exists():
            return kept.read_text().strip()
        kept.parent.mkdir(parents=True, exist_ok=True)
        cluster_id = new_cluster_id()
        kept.write_text(cluster_id + "\n")
        return cluster_id

    def _format_storage(self, java: Path, node: KafkaNode) -> None:
        mode = self._settings.local.kafka_auth
        kept = node.data / "auth-mode"
        if (node.log_dir / "meta.properties").exists():
            formatted = kept.read_text().strip() if kept.exists() else "none"
            if formatted != mode:  # the super user's credential is written at format time, or not at all
                raise PlatformError(
                    f"the Kafka storage in {node.data} was formatted with RS_KAFKA_AUTH={formatted}, not {mode}: "
                    f"`down --only kafka`, remove {node.data} (its topics are lost) and `up` again, or set it back"
                )
            return
        argv = self._java_argv(
            java,
            node,
            "kafka.tools.StorageTool",
            "format",
            f"--cluster-id={self._cluster_id()}",
            "-c",
            str(node.config),
            *(self.auth.format_arguments() if self.auth is not None else ()),
        )
        result = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)
        if result.returncode != 0:
            out, err = result.stdout[-_FORMAT_OUTPUT_CHARS:], result.stderr[-_FORMAT_OUTPUT_CHARS:]
            said = f"{out}{err}" if self.auth is None else self.auth.redact(f"{out}{err}")
            raise PlatformError(f"formatting Kafka storage failed: {said}")
        kept.write_text(mode + "\n")

    def start(self) -> None:
        """Start every node that is not running (the others go on as they are)."""
        down = [node for node in self._nodes if node.process.pid() is None]
        if not down:
            return
        if (other := self._other_size_running()) is not None:
            raise PlatformError(other)
        for claim in self.ports():
            require_port_free(claim.label, claim.host, claim.port, claim.setting)
        java = find_java(self._settings.local.java_home)
        if self.auth is not None:
            self.auth.ensure(node.host for node in self._nodes)
        for node in down:
            self._write_config(node)
            self._format_storage(java, node)
        for node in down:
            node.process.start(self._java_argv(java, node, "kafka.Kafka", str(node.config)), env=_java_env(java),
                               cwd=node.data)  # fmt: skip

    def started_by_us(self) -> int | None:
        """The first node's pid while every node runs; None when any is not running (``up`` starts it)."""
        pids = [node.process.pid() for node in self._nodes]
        return None if None in pids else pids[0]

    def startup_failure(self) -> str | None:
        """The log tail of the first node that is not running."""
        for node in self._nodes:
            if (failure := node.process.exited_early()) is not None:
                return failure if len(self._nodes) == 1 else f"node {node.node_id}: {failure}"
        return None

    def stop(self) -> bool:
        """Stop every Kafka process ``up`` started in this cache dir, one node or three, all at once (a node
        that stops alone would wait for a quorum the others' stopping takes away)."""
        with ThreadPoolExecutor(max_workers=MAX_NODES + 1) as pool:
            stopped = list(pool.map(lambda process: process.stop(), every_process(self._paths)))
        return any(stopped)

    def health(self) -> Health:
        """Healthy when every node listens and is a broker the cluster's metadata lists; ``nodes`` says which."""
        cluster = len(self._nodes) > 1
        pids = [node.process.pid() for node in self._nodes]
        listening = [not self.is_local() or port_is_open(node.host, node.port) for node in self._nodes]
        details: dict[str, Any] = {"version": KAFKA_VERSION}
        if not cluster:
            details["managed_pid"] = pids[0]
        healthy = [False] * len(self._nodes)
        reason: str | None = None
        if (other := self._other_size_running()) is not None:
            reason = other
        elif not any(listening):
            reason = f"nothing listens on {self.endpoint}: Kafka is not running (start it with `rewardstream up`)"
        else:
            try:
                registered = self._registered_brokers()
            except Exception as exc:
                registered, reason = set(), f"Kafka does not answer at {self.endpoint}: {exc}"
            details["brokers"] = len(registered)
            if reason is None and not registered:
                reason = "Kafka answered but reports no broker"
            healthy = [up and bool(registered) and (not cluster or node.node_id in registered)
                       for node, up in zip(self._nodes, listening, strict=True)]  # fmt: skip
            down = [f"node {node.node_id} ({node.address})" for node, ok in zip(self._nodes, healthy, strict=True)
                    if not ok]  # fmt: skip
            if reason is None and down:
                reason = f"{', '.join(down)}: not running or not in the cluster (start it with `rewardstream up`)"
        details["nodes"] = [
            _node_json(node, pid, ok, with_rss=cluster)
            for node, pid, ok in zip(self._nodes, pids, healthy, strict=True)
        ]
        if cluster:
            details["rss_mb"] = round(sum(entry.get("rss_mb") or 0.0 for entry in details["nodes"]), 1)
        return Health(reason is None, self.endpoint, reason, details)

    def _other_size_running(self) -> str | None:
        """Why the brokers running in this cache dir are not the ones the settings describe (a three-node cluster
        started by ``up --kafka-brokers 3`` seen by a ``status`` without ``RS_KAFKA_BROKERS=3``), or None."""
        ours = {node.process.pidfile for node in self._nodes}
        others = [p for p in every_process(self._paths) if p.pidfile not in ours and p.pid() is not None]
        if not others:
            return None
        size = 1 if any(p.name == "kafka" for p in others) else len(others)
        running = "a single broker" if size == 1 else f"a cluster ({len(others)} live nodes)"
        wanted = 1 if size == 1 else MAX_NODES
        return (
            f"{running} runs in this cache dir but RS_KAFKA_BROKERS is {len(self._nodes)}: export "
            f"RS_KAFKA_BROKERS={wanted} (status, clients and roles must agree with `up`), or `rewardstream down` first"
        )

    def admin_config(self) -> dict[str, str]:
        """The client config of the platform's own admin work (health, provisioning): the settings' connection,
        or in auth mode the super user's, at every node."""
        if self.auth is not None:
            return self.auth.client_config(ADMIN, self.endpoint)
        return {**self._settings.kafka_client_config(), "bootstrap.servers": self.endpoint}

    def provision(self, report: Callable[[str], None]) -> None:
        """In auth mode, after the cluster is healthy: every principal's credential, the ACL table and the
        catalog topics (no role may create them). Idempotent; nothing in the open mode."""
        if self.auth is None or not self.is_local():
            return
        self.auth.provision(self.endpoint, report)
        ensure_topics(catalog_for(self._settings), self.admin_config())

    def _registered_brokers(self) -> set[int]:
        """The ids of the brokers the cluster's metadata lists (a fenced or dead one is not among them)."""
        from confluent_kafka.admin import AdminClient

        quiet = logging.getLogger("rewardstream.kafka.health")
        quiet.addHandler(logging.NullHandler())
        quiet.propagate = False
        config: dict[str, Any] = {**self.admin_config(), "socket.timeout.ms": 3000, "logger": quiet}
        metadata = AdminClient(config).list_topics(timeout=self._settings.local.health_timeout_s)
        return set(metadata.brokers)


def _node_json(node: KafkaNode, pid: int | None, healthy: bool, *, with_rss: bool) -> dict[str, Any]:
    """One node as ``status --json`` lists it (a cluster's nodes with their resident memory: the platform
    measures the single broker's from ``managed_pid``)."""
    entry: dict[str, Any] = {"id": node.node_id, "pid": pid, "endpoint": node.address, "healthy": healthy}
    if with_rss:
        entry["rss_mb"] = round(group_rss_kb(pid) / 1024, 1) if pid is not None else None
    return entry


def _java_env(java: Path) -> dict[str, str]:
    """A minimal environment for a Java service: no secrets of the caller leak into it."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "JAVA_HOME": str(java.resolve().parent.parent),
        "LANG": "C.UTF-8",
        "HOME": os.environ.get("HOME", "/tmp"),  # noqa: S108
    }
