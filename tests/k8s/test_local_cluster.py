"""The local Kubernetes the deployment's end-to-end test builds on (issue 27), proven on itself: a real control
plane and kubelet on a private containerd run a hostNetwork pod from an image imported with ``ctr``, KEDA scales
a Deployment 1 -> N on a real consumer group's lag on the local Kafka and back when it drains, and ``down``
leaves no process of ours and the host as it was.

The binaries cost ~60 CPU-minutes to build and CI does not build them, so without them (``make k8s-build``)
these tests skip, saying so. They run as root, with the local Kafka up (``rewardstream up``).
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from infra.k8s import host_state
from infra.k8s.__main__ import default_paths
from infra.k8s.build import missing_binaries
from infra.k8s.cluster import LocalCluster, UpReport, node_name
from infra.k8s.images import BUSYBOX_IMAGE, images
from infra.k8s.kubectl import Kubectl, wait_for
from infra.k8s.teardown import mount_prefixes, shim_pids
from infra.local.service import port_is_open
from schemas.settings import Settings

pytestmark = [pytest.mark.k8s, pytest.mark.slow, pytest.mark.timeout(1200)]

PARTITIONS = 4
PER_PARTITION = 50
LAG_THRESHOLD = 10
SCALE_DEADLINE_S = 240.0
HTTP_PORT = 18099
"""A port the hostNetwork pod serves on 127.0.0.1 (free: not in ``ClusterPorts`` nor the platform's)."""


@dataclass
class Running:
    cluster: LocalCluster
    up: UpReport
    host_before: host_state.HostState
    pids: dict[str, int]
    up_wall_s: float
    keda: bool

    @property
    def kubectl(self) -> Kubectl:
        return self.cluster.kubectl


@pytest.fixture(scope="module")
def running() -> Iterator[Running]:
    paths = default_paths()
    if missing := missing_binaries(paths, keda=False):
        pytest.skip(
            f"cluster binaries not built ({', '.join(missing)}): CI does not build them (~60 CPU-minutes); "
            "build them with `make k8s-build`"
        )
    if os.geteuid() != 0:
        pytest.skip("the local cluster runs a kubelet and containerd: it needs root")
    cluster = LocalCluster(paths)
    keda = not missing_binaries(paths)
    before = host_state.capture()
    start = time.monotonic()
    result = cluster.up(keda=keda, report=print)
    state = Running(cluster, result, before, cluster.running(), time.monotonic() - start, keda)
    try:
        yield state
    finally:
        if cluster.running() or paths.host_snapshot.exists():
            cluster.down(report=print)


def _pod(name: str, command: list[str], labels: dict[str, str]) -> dict[str, Any]:
    """A pod spec on the host's network running busybox (never pulled: it was imported)."""
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "hostNetwork": True,
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": BUSYBOX_IMAGE, "imagePullPolicy": "Never", "command": command}],
        },
    }


def test_node_is_ready_with_the_imported_image(running: Running) -> None:
    node = running.kubectl.get("node", node_name())
    assert node["status"]["nodeInfo"]["kubeletVersion"] == "v1.37.2"
    assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://")
    assert BUSYBOX_IMAGE in images(running.cluster.paths)
    expected = set(running.cluster.processes) - (set() if running.keda else {"keda-operator", "keda-adapter"})
    assert set(running.pids) == expected
    print(f"start-up: {running.up.seconds} (wall {running.up_wall_s:.1f}s), restored {running.up.restored}")


def test_kernel_tunables_are_as_before_while_it_runs(running: Running) -> None:
    assert host_state.read_sysctls() == running.host_before.sysctls


def _phase(kubectl: Kubectl, pod: str) -> str | None:
    found = kubectl.get("pod", pod) or {}
    phase: str | None = found.get("status", {}).get("phase")
    return phase


def test_a_host_network_pod_serves_on_loopback(running: Running) -> None:
    kubectl = running.kubectl
    serve = ["/bin/busybox", "httpd", "-f", "-p", f"127.0.0.1:{HTTP_PORT}", "-h", "/etc"]
    pod = {"apiVersion": "v1", "kind": "Pod", **_pod("hostnet", serve, {"app": "hostnet"})}
    assert not port_is_open("127.0.0.1", HTTP_PORT)
    kubectl.apply([pod])
    try:
        wait_for("the pod to run", lambda: _phase(kubectl, "hostnet") == "Running", 120)
        wait_for("the pod's server on the host's loopback", lambda: port_is_open("127.0.0.1", HTTP_PORT), 60)
        assert kubectl.run("exec", "hostnet", "--", "/bin/busybox", "hostname").strip() == node_name()
    finally:
        kubectl.run("delete", "pod", "hostnet", "--grace-period=1", "--wait=true", "--timeout=60s")
    assert not port_is_open("127.0.0.1", HTTP_PORT)


def _lag_topic(settings: Settings, topic: str, group: str) -> None:
    """A topic with ``PER_PARTITION`` messages in each partition and the group committed at 0: a lag KEDA reads."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    config = settings.kafka_client_config()
    admin = AdminClient({**config})  # held until the result is in: a collected client cancels it
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(timeout=30)
    producer = Producer(config)
    for partition in range(PARTITIONS):
        for i in range(PER_PARTITION):
            producer.produce(topic, value=b"work %d" % i, partition=partition)
    assert producer.flush(30) == 0
    _commit(settings, topic, group, {p: 0 for p in range(PARTITIONS)})


def _commit(settings: Settings, topic: str, group: str, offsets: dict[int, int]) -> None:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**settings.kafka_client_config(), "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
    finally:
        consumer.close()


#: Scale down as soon as the lag is gone (the HPA's default waits 300 s).
_FAST_SCALE_DOWN = {
    "stabilizationWindowSeconds": 0,
    "policies": [{"type": "Percent", "value": 100, "periodSeconds": 1}],
}


def _scaled_object(topic: str, group: str, bootstrap: str) -> dict[str, Any]:
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": "lag-worker"},
        "spec": {
            "scaleTargetRef": {"name": "lag-worker"},
            "pollingInterval": 2,
            "cooldownPeriod": 5,
            "minReplicaCount": 1,
            "maxReplicaCount": PARTITIONS,
            "advanced": {"horizontalPodAutoscalerConfig": {"behavior": {"scaleDown": _FAST_SCALE_DOWN}}},
            "triggers": [
                {
                    "type": "kafka",
                    "metadata": {
                        "bootstrapServers": bootstrap,
                        "consumerGroup": group,
                        "topic": topic,
                        "lagThreshold": str(LAG_THRESHOLD),
                        "offsetResetPolicy": "earliest",
                    },
                }
            ],
        },
    }


def _deployment() -> dict[str, Any]:
    labels = {"app": "lag-worker"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "lag-worker"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": _pod("lag-worker", ["/bin/busybox", "sleep", "3600"], labels)
            | {"metadata": {"labels": labels}},
        },
    }


def _ready_pods(kubectl: Kubectl) -> int:
    pods = (kubectl.get("pods", "-l", "app=lag-worker") or {}).get("items", [])
    ready = 0
    for pod in pods:
        if pod["metadata"].get("deletionTimestamp"):
            continue
        conditions = pod.get("status", {}).get("conditions", [])
        ready += any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
    return ready


def _replicas(kubectl: Kubectl) -> int:
    return int(kubectl.get("deployment", "lag-worker")["spec"]["replicas"])


def test_keda_scales_on_a_consumer_groups_lag_and_back(running: Running) -> None:
    from confluent_kafka.admin import AdminClient

    if not running.keda:
        pytest.skip("KEDA's binaries are not built (make k8s-build builds them; CI does not)")
    settings = Settings()
    kubectl = running.kubectl
    suffix = uuid.uuid4().hex[:8]
    topic, group = f"rs-k8s-test.lag-{suffix}", f"rs-k8s-test-{suffix}"
    _lag_topic(settings, topic, group)
    admin = AdminClient({**settings.kafka_client_config()})
    try:
        kubectl.apply([_deployment()])
        wait_for("one ready worker", lambda: _ready_pods(kubectl) == 1, 120)
        kubectl.apply([_scaled_object(topic, group, settings.kafka.bootstrap)])
        start = time.monotonic()
        wait_for(f"{PARTITIONS} ready workers under lag", lambda: _ready_pods(kubectl) == PARTITIONS, SCALE_DEADLINE_S)
        up_s = time.monotonic() - start
        hpa = kubectl.get("hpa", "keda-hpa-lag-worker")  # KEDA's HPA did it, on the lag KEDA read from Kafka
        assert hpa["spec"]["maxReplicas"] == PARTITIONS
        (metric,) = hpa["spec"]["metrics"]
        assert metric["type"] == "External"
        assert "kafka" in metric["external"]["metric"]["name"]
        assert hpa["status"]["desiredReplicas"] == PARTITIONS
        _commit(settings, topic, group, {p: PER_PARTITION for p in range(PARTITIONS)})
        start = time.monotonic()
        wait_for("one worker once drained", lambda: _replicas(kubectl) == 1 == _ready_pods(kubectl), SCALE_DEADLINE_S)
        print(f"KEDA: 1 -> {PARTITIONS} ready in {up_s:.1f}s, back to 1 in {time.monotonic() - start:.1f}s")
    finally:
        kubectl.run("delete", "scaledobject", "lag-worker", "--ignore-not-found", "--wait=true", "--timeout=60s")
        kubectl.run("delete", "deployment", "lag-worker", "--ignore-not-found", "--wait=true", "--timeout=60s")
        admin.delete_topics([topic])[topic].result(timeout=30)
        admin.delete_consumer_groups([group])[group].result(timeout=30)


def test_down_stops_every_process_and_restores_the_host(running: Running) -> None:
    cluster = running.cluster
    socket = cluster.paths.containerd_socket
    cluster.down(report=print)
    assert cluster.running() == {}
    for name, pid in running.pids.items():
        assert not os.path.exists(f"/proc/{pid}") or _is_zombie(pid), f"{name} (pid {pid}) still runs"
    assert shim_pids(socket) == []
    assert not cluster.paths.cluster.exists()
    assert not cluster.paths.host_snapshot.exists()
    after = host_state.capture()
    assert host_state.differences(running.host_before, after, mount_prefixes(cluster)) == []


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[-1].split()[0] == "Z"
    except OSError:
        return True
