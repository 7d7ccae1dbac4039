"""A smoke run of the local platform: one real round trip through each service, timed.

This is the main job until the pipeline exists: it proves Kafka, OpenSearch, S3 and the sandbox image
work end to end through the same client libraries the pipeline uses, and cleans up after itself.
"""

from __future__ import annotations

import io
import time
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from schemas.errors import PlatformError
from schemas.settings import Settings


@dataclass(frozen=True)
class SmokeResult:
    service: str
    what: str
    ok: bool
    seconds: float
    detail: str


def run_smoke(settings: Settings) -> list[SmokeResult]:
    """Run every check; a failing check is reported, never raised, so all four always run."""
    checks: list[tuple[str, str, Callable[[Settings, str], str]]] = [
        ("kafka", "produce 100 events, consume them back (confluent-kafka)", _kafka),
        ("opensearch", "index 3 log records, full-text search them (opensearch-py)", _opensearch),
        ("s3", "put an artifact, get it, fetch its presigned URL (minio)", _s3),
        ("docker", "run python3 in the sandbox image with network_mode=none (docker-py)", _docker),
    ]
    results = []
    for service, what, check in checks:
        name = f"rs-smoke-{uuid.uuid4().hex[:10]}"
        started = time.monotonic()
        try:
            detail, ok = check(settings, name), True
        except Exception as exc:
            detail, ok = f"{type(exc).__name__}: {exc}", False
        results.append(SmokeResult(service, what, ok, time.monotonic() - started, detail))
    return results


def _kafka(settings: Settings, name: str) -> str:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    config: dict[str, str | int | float | bool] = {**settings.kafka_client_config(), "log_level": 3}
    admin = AdminClient(config)
    # Replicated as the catalog is: a three-broker cluster refuses acks=all writes one broker alone holds.
    replicas = settings.kafka.replication_factor()
    admin.create_topics([NewTopic(name, num_partitions=2, replication_factor=replicas)])[name].result(timeout=30)
    try:
        producer = Producer({**config, "enable.idempotence": True, "linger.ms": 5})
        for i in range(100):
            producer.produce(name, key=f"episode-{i % 10}".encode(), value=f"generation-{i}".encode())
        if producer.flush(30):
            raise PlatformError("Kafka did not acknowledge every event within 30s")
        consumer = Consumer({**config, "group.id": name, "auto.offset.reset": "earliest"})
        consumer.subscribe([name])
        seen: set[bytes] = set()
        deadline = time.monotonic() + 30
        try:
            while len(seen) < 100 and time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is not None and not msg.error() and (value := msg.value()) is not None:
                    seen.add(value)
        finally:
            consumer.close()
        if len(seen) != 100:
            raise PlatformError(f"consumed {len(seen)} of 100 events")
        return "100/100 events back"
    finally:
        admin.delete_topics([name])[name].result(timeout=30)


def _opensearch(settings: Settings, name: str) -> str:
    from opensearchpy import OpenSearch

    client = OpenSearch(hosts=[settings.opensearch.url], timeout=30)
    try:
        for i, status in enumerate(("ok", "timeout", "memory_limit")):
            client.index(index=name, id=f"g{i}", body={"status": status, "stdout": f"run {i} ended {status}"})
        client.indices.refresh(index=name)
        hits = client.search(index=name, body={"query": {"match": {"stdout": "timeout"}}})["hits"]["hits"]
        if [hit["_id"] for hit in hits] != ["g1"]:
            raise PlatformError(f"search returned {hits!r}")
        return "3 indexed, search found the timeout"
    finally:
        client.indices.delete(index=name, ignore_unavailable=True)
        client.close()


def _s3(settings: Settings, name: str) -> str:
    from minio import Minio

    client = Minio(
        settings.s3.endpoint,
        access_key=settings.s3.access_key,
        secret_key=settings.s3.secret_key.get_secret_value(),
        secure=settings.s3.secure,
        region=settings.s3.region,
    )
    body = b"print('hello from an artifact')\n" * 64
    client.make_bucket(name)
    try:
        client.put_object(name, "code/hello.py", io.BytesIO(body), len(body))
        response = client.get_object(name, "code/hello.py")
        try:
            if response.read() != body:
                raise PlatformError("S3 returned different bytes")
        finally:
            response.close()
            response.release_conn()
        with urllib.request.urlopen(client.presigned_get_object(name, "code/hello.py"), timeout=10) as fetched:  # noqa: S310
            if fetched.read() != body:
                raise PlatformError("presigned URL returned different bytes")
        return f"{len(body)} bytes round-tripped, presigned URL works"
    finally:
        for obj in client.list_objects(name, recursive=True):
            client.remove_object(name, obj.object_name)
        client.remove_bucket(name)


def _docker(settings: Settings, name: str) -> str:
    import docker

    client = docker.DockerClient(base_url=settings.sandbox.docker_host or "unix:///var/run/docker.sock")
    script = "import socket; print(sorted(n for _, n in socket.if_nameindex()))"
    try:
        out = client.containers.run(
            settings.sandbox.image,
            ["python3", "-c", script],
            name=name,
            network_mode="none",
            user="65534:65534",
            read_only=True,
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            remove=True,
        )
    finally:
        client.close()
    interfaces = out.decode().strip()
    if interfaces != "['lo']":
        raise PlatformError(f"sandbox sees network interfaces {interfaces}")
    return "python3 ran; only loopback visible"
