"""A chaos test's own three-node Kafka cluster: started in a temp cache dir on ports nobody else uses
(19872-19877), its nodes told apart by id and pid, the leader of a partition found, a node killed, and the
cluster brought whole again (``rewardstream up --only kafka``) before the next scenario.

Only Kafka is ours: the pipeline's S3 and OpenSearch are the machine's shared services, which this module never
starts or stops (the CLI it runs sees other ports for them and ``--only kafka``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from tests.integration.platform_env import IsolatedPlatform, kafka_platform, ok

BASE_PORT = 19872
#: The first node's broker port: the others follow at +2 and +4 (each node's controller on the port after).
BOOTSTRAP = f"127.0.0.1:{BASE_PORT}"
#: What a client of the cluster (and every pipeline process started for the test) needs in its environment.
CLIENT_ENV = {"RS_KAFKA_BOOTSTRAP": BOOTSTRAP, "RS_KAFKA_BROKERS": "3"}
#: Kafka's own topic of the transaction coordinators' state.
TRANSACTION_STATE = "__transaction_state"
T = TypeVar("T")


def wait_for(probe: Callable[[], T | None], timeout_s: float, what: str | Callable[[], str]) -> T:
    """``probe()`` once it is neither None nor False, polled every 0.3 s; AssertionError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while (value := probe()) is None or value is False:
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out after {timeout_s:.0f}s waiting for {what if isinstance(what, str) else what()}"
            )
        time.sleep(0.3)
    return value


@dataclass
class ChaosCluster:
    """Three KRaft nodes of the test's own; the methods a scenario needs to hurt them and heal them."""

    platform: IsolatedPlatform

    @classmethod
    def in_dir(cls, tmp: Path) -> ChaosCluster:
        return cls(kafka_platform(tmp, BASE_PORT, brokers=3))

    @property
    def config(self) -> dict[str, str]:
        from schemas.settings import Settings

        return Settings(kafka_bootstrap=BOOTSTRAP, kafka_brokers=3).kafka_client_config()

    def up(self) -> float:
        """Start (or complete) the three nodes; seconds it took."""
        started = time.monotonic()
        ok(self.platform.cli("up", "--only", "kafka"))
        return time.monotonic() - started

    def down(self) -> None:
        """Stop every node this cache dir started (by their pid files), resuming a paused one first."""
        for node in self.nodes():
            if node["pid"] is not None:
                _signal(node["pid"], signal.SIGCONT)
        ok(self.platform.cli("down", "--only", "kafka"))

    def nodes(self) -> list[dict[str, Any]]:
        """``status --json``'s nodes: id, pid, endpoint, healthy, rss_mb."""
        result = self.platform.cli("status", "--json", "--only", "kafka")
        nodes: list[dict[str, Any]] = result.json()["services"]["kafka"]["nodes"]
        return nodes

    def pid(self, node_id: int) -> int:
        pids = {n["id"]: n["pid"] for n in self.nodes()}
        assert pids.get(node_id) is not None, f"node {node_id} is not running: {pids}"
        return int(pids[node_id])

    def leader(self, topic: str, partition: int = 0) -> int:
        """The node id leading ``topic``'s ``partition`` now."""
        partitions = self._admin().list_topics(topic, timeout=10).topics[topic].partitions
        return int(partitions[partition].leader)

    def coordinator(self, transactional_id_prefix: str) -> int:
        """The node id coordinating the transactions of the producer whose transactional id starts with
        ``transactional_id_prefix``: the leader of the ``__transaction_state`` partition its state is kept in (a
        record keyed by that id, found by reading the partitions; Kafka picks it by the id's Java hash)."""
        from bus.partition_reader import read_to_end

        wanted = transactional_id_prefix.encode()
        partitions = self._admin().list_topics(TRANSACTION_STATE, timeout=10).topics[TRANSACTION_STATE].partitions

        def holder() -> int | None:
            for partition in sorted(partitions):
                records, _end = read_to_end(self.config, TRANSACTION_STATE, partition, 0, group="unused", timeout_s=30)
                if any(wanted in (key or b"") for _offset, key, _value in records):
                    return int(partition)
            return None

        return self.leader(TRANSACTION_STATE, wait_for(holder, 30, f"a transaction of {transactional_id_prefix}*"))

    def replicas(self, topic: str) -> set[int]:
        """How many replicas each partition of ``topic`` has (one number, on a topic made right), once the
        broker asked knows the topic (each learns of a new one from the controllers in its own time)."""
        admin = self._admin()

        def counts() -> set[int] | None:
            partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions
            return {len(meta.replicas) for meta in partitions.values()} or None

        return wait_for(counts, 30, f"the brokers to know {topic}")

    def kill(self, node_id: int) -> float:
        """SIGKILL the node (no goodbye); the monotonic time it was sent."""
        pid = self.pid(node_id)
        os.kill(pid, signal.SIGKILL)
        return time.monotonic()

    def restart(self, node_id: int, topics: Iterable[str]) -> None:
        """Stop the node gracefully (SIGTERM: a controlled shutdown moves its leaders first), start it again
        with ``up``, and wait until every replica of ``topics`` is back in sync."""
        pid = self.pid(node_id)
        os.kill(pid, signal.SIGTERM)
        wait_for(lambda: not _alive(pid), 120, f"node {node_id} (pid {pid}) to stop")
        self.heal(topics)

    def stop(self, node_id: int) -> None:
        """Stop the node if it runs (SIGTERM, then SIGKILL if it will not) and wait until it is gone."""
        pids = {n["id"]: n["pid"] for n in self.nodes()}
        pid = pids.get(node_id)
        if pid is None or not _alive(pid):
            return
        _signal(pid, signal.SIGCONT)
        _signal(pid, signal.SIGTERM)
        try:
            wait_for(lambda: not _alive(pid), 90, f"node {node_id} (pid {pid}) to stop")
        except AssertionError:
            _signal(pid, signal.SIGKILL)
            wait_for(lambda: not _alive(pid), 30, f"node {node_id} (pid {pid}) to die")

    def log_dir(self, node_id: int) -> Path:
        """Where the node keeps its partitions and its metadata log (``infra.local.kafka_nodes``)."""
        return self.platform.cache_dir / "data" / "kafka-cluster" / f"node-{node_id}" / "log"

    @contextlib.contextmanager
    def small_disk(self, node_id: int, topics: Iterable[str], headroom_mb: int = 48) -> Iterator[SmallDisk]:
        """The node's log dir moved onto a tmpfs of its own with ``headroom_mb`` free (root mounts it), the node
        running on it with full ISRs; afterwards the node is stopped and its data copied back to the real disk,
        the tmpfs unmounted (in every case), and the node left stopped for ``heal``."""
        log_dir = self.log_dir(node_id)
        disk = log_dir.with_name("log.disk")
        self.stop(node_id)
        used_mb = _used_bytes(log_dir) // (1 << 20) + 1
        log_dir.rename(disk)
        log_dir.mkdir()
        mounted = False
        try:
            _run("mount", "-t", "tmpfs", "-o", f"size={used_mb + headroom_mb}m", "rs-chaos-kafka", str(log_dir))
            mounted = True
            _run("cp", "-a", f"{disk}/.", str(log_dir))
            self.heal(topics)
            yield SmallDisk(log_dir)
        finally:
            self.stop(node_id)
            if mounted:
                (log_dir / SmallDisk.FILLER).unlink(missing_ok=True)
                shutil.rmtree(disk)
                disk.mkdir()
                _run("cp", "-a", f"{log_dir}/.", str(disk))  # the newest data: the node comes back caught up
                _run("umount", str(log_dir))
            log_dir.rmdir()
            disk.rename(log_dir)

    def pause(self, node_id: int) -> float:
        """SIGSTOP the node: its sockets stay open but it answers nothing; the monotonic time it was sent."""
        os.kill(self.pid(node_id), signal.SIGSTOP)
        return time.monotonic()

    def resume(self, node_id: int) -> None:
        _signal(self.pid(node_id), signal.SIGCONT)

    def leads_none_of(self, node_id: int, topic: str) -> bool:
        """Whether no partition of ``topic`` is led by ``node_id`` (False while the cluster cannot tell)."""
        from confluent_kafka import KafkaException

        try:
            partitions = self._admin().list_topics(topic, timeout=5).topics[topic].partitions
        except KafkaException:
            return False
        return bool(partitions) and all(meta.leader not in (node_id, -1) for meta in partitions.values())

    def serving(self, node_id: int, topic: str) -> bool:
        """Whether the node runs and holds an in-sync replica of some partition of ``topic`` (a node whose log
        dir went offline drops out of every ISR; True while the cluster cannot tell)."""
        from confluent_kafka import KafkaException

        pid = {n["id"]: n["pid"] for n in self.nodes()}.get(node_id)
        if pid is None or not _alive(pid):
            return False
        try:
            partitions = self._admin().list_topics(topic, timeout=5).topics[topic].partitions
        except KafkaException:
            return True
        return any(node_id in meta.isrs for meta in partitions.values())

    def heal(self, topics: Iterable[str] = ()) -> float:
        """``up`` restarts whatever node is down; then wait until every partition of ``topics`` and of Kafka's
        own topics has all three replicas in sync again. Seconds it took."""
        started = time.monotonic()
        self.up()
        wait_for(lambda: all(n["healthy"] for n in self.nodes()), 60, "every node healthy")
        names = [*topics, "__consumer_offsets", TRANSACTION_STATE]
        wait_for(lambda: not self.under_replicated(names), 120, lambda: f"full ISRs: {self.under_replicated(names)}")
        return time.monotonic() - started

    def under_replicated(self, topics: Iterable[str]) -> list[str]:
        """``topic/partition`` of every partition of ``topics`` with fewer than three replicas in sync."""
        metadata = self._admin().list_topics(timeout=10)
        short = []
        for name in topics:
            topic = metadata.topics.get(name)
            if topic is None:
                continue
            short += [f"{name}/{p}" for p, meta in topic.partitions.items() if len(meta.isrs) < 3]
        return short

    def _admin(self) -> Any:
        from confluent_kafka.admin import AdminClient

        return AdminClient({**self.config, "log_level": 0})


@dataclass
class SmallDisk:
    """A node's log dir on a small tmpfs: ``fill`` it to the last byte, ``free`` it again."""

    FILLER = "rs-chaos-filler"
    path: Path

    def fill(self) -> float:
        """Write a file until the tmpfs is full (the node's next append fails); the monotonic time it was."""
        fd = os.open(self.path / self.FILLER, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            for chunk in (1 << 20, 1 << 12):
                block = b"\0" * chunk
                while True:
                    try:
                        os.write(fd, block)
                    except OSError as exc:
                        if exc.errno != errno.ENOSPC:
                            raise
                        break
        finally:
            os.close(fd)
        return time.monotonic()

    def free(self) -> None:
        (self.path / self.FILLER).unlink(missing_ok=True)


def _used_bytes(path: Path) -> int:
    """Bytes ``path``'s files take on disk (sparse index files count what they hold)."""
    return sum(entry.stat().st_blocks * 512 for entry in path.rglob("*") if entry.is_file())


def _run(*argv: str) -> None:
    result = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)
    assert result.returncode == 0, f"{' '.join(argv)}: {result.stderr.strip()}"


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
