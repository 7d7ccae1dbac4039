"""One round trip per service, through the library the pipeline uses, against the real local services."""

from __future__ import annotations

import asyncio
import time
import urllib.error
import urllib.request
import uuid
from io import BytesIO
from typing import Any

import pytest

pytestmark = pytest.mark.integration


def test_confluent_kafka_round_trip(kafka_config: dict[str, str], kafka_topic: str) -> None:
    from confluent_kafka import Consumer, Producer

    producer = Producer({**kafka_config, "enable.idempotence": True})
    sent = {f"ep-{i}".encode(): f"payload-{i}".encode() for i in range(20)}
    for key, value in sent.items():
        producer.produce(kafka_topic, key=key, value=value)
    assert producer.flush(30) == 0

    consumer = Consumer(
        {**kafka_config, "group.id": f"g-{uuid.uuid4().hex}", "auto.offset.reset": "earliest",
         "isolation.level": "read_committed"}
    )  # fmt: skip
    consumer.subscribe([kafka_topic])
    received: dict[bytes | None, bytes | None] = {}
    deadline = time.monotonic() + 30
    try:
        while len(received) < len(sent) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            received[msg.key()] = msg.value()
    finally:
        consumer.close()
    assert received == sent


def test_aiokafka_round_trip(kafka_config: dict[str, str], kafka_topic: str) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    bootstrap = kafka_config["bootstrap.servers"]

    async def scenario() -> list[tuple[bytes, bytes]]:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True)
        await producer.start()
        try:
            for i in range(10):
                await producer.send_and_wait(kafka_topic, key=b"episode-1", value=f"turn-{i}".encode())
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            kafka_topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
            group_id=f"g-{uuid.uuid4().hex}",
        )  # fmt: skip
        await consumer.start()
        got: list[tuple[bytes, bytes]] = []
        try:
            async with asyncio.timeout(30):
                async for msg in consumer:
                    got.append((msg.key, msg.value))
                    if len(got) == 10:
                        break
        finally:
            await consumer.stop()
        return got

    got = asyncio.run(scenario())
    # One key -> one partition -> per-episode order preserved.
    assert got == [(b"episode-1", f"turn-{i}".encode()) for i in range(10)]


def test_opensearch_index_and_search(opensearch_client: Any, opensearch_index: str) -> None:
    docs = [
        {"generation_id": "g1", "status": "timeout", "stdout": "spinning forever"},
        {"generation_id": "g2", "status": "ok", "stdout": "all tests passed"},
    ]
    for doc in docs:
        opensearch_client.index(index=opensearch_index, id=doc["generation_id"], body=doc)
    opensearch_client.indices.refresh(index=opensearch_index)
    hits = opensearch_client.search(index=opensearch_index, body={"query": {"match": {"stdout": "forever"}}})["hits"][
        "hits"
    ]
    assert [hit["_id"] for hit in hits] == ["g1"]
    assert hits[0]["_source"]["status"] == "timeout"


def test_minio_put_get_and_presigned_url(minio_client: Any, s3_bucket: str) -> None:
    body = b"def solution():\n    return 42\n" * 100
    minio_client.put_object(s3_bucket, "code/abc.py", BytesIO(body), len(body), content_type="text/x-python")
    response = minio_client.get_object(s3_bucket, "code/abc.py")
    try:
        assert response.read() == body
    finally:
        response.close()
        response.release_conn()
    url = minio_client.presigned_get_object(s3_bucket, "code/abc.py")
    with urllib.request.urlopen(url, timeout=10) as fetched:  # noqa: S310 (loopback URL we just signed)
        assert fetched.read() == body


def test_minio_rejects_tampered_presigned_url(minio_client: Any, s3_bucket: str) -> None:
    minio_client.put_object(s3_bucket, "secret.txt", BytesIO(b"x"), 1)
    url = minio_client.presigned_get_object(s3_bucket, "secret.txt").replace("secret.txt", "other.txt")
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(url, timeout=10)  # noqa: S310
    info.value.close()
    assert info.value.code == 403


def test_docker_runs_sandbox_image_without_network(docker_client: Any, settings: Any) -> None:
    script = (
        "import socket, sys\n"
        "names = sorted(n for _, n in socket.if_nameindex())\n"
        "print(sys.version_info[:2], names)\n"
        "try:\n"
        "    socket.create_connection(('1.1.1.1', 53), timeout=2)\n"
        "    print('NETWORK')\n"
        "except OSError as exc:\n"
        "    print('no network:', exc.errno)\n"
    )
    output = docker_client.containers.run(
        settings.sandbox.image, ["python3", "-c", script], network_mode="none", remove=True,
        user="65534:65534", read_only=True, cap_drop=["ALL"], security_opt=["no-new-privileges"],
    ).decode()  # fmt: skip
    assert "(3, 11) ['lo']" in output
    assert "no network" in output
    assert "NETWORK\n" not in output


def test_testcontainers_drives_the_local_sandbox_image(
    docker_client: Any, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """testcontainers against the locally built image; Ryuk is off because nothing can be pulled here."""
    monkeypatch.setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.wait_strategies import LogMessageWaitStrategy

    container = (
        DockerContainer(settings.sandbox.image)
        .with_command(["python3", "-c", "import os, time; print('uid', os.getuid(), flush=True); time.sleep(60)"])
        .with_kwargs(network_mode="none", user="65534:65534", read_only=True, cap_drop=["ALL"])
        .waiting_for(LogMessageWaitStrategy("uid 65534").with_startup_timeout(30))
    )
    with container:
        wrapped = container.get_wrapped_container()
        wrapped.reload()
        assert wrapped.attrs["HostConfig"]["NetworkMode"] == "none"
        assert wrapped.attrs["HostConfig"]["ReadonlyRootfs"] is True
        name = wrapped.name
    assert not docker_client.containers.list(all=True, filters={"name": name})


@pytest.mark.usefixtures("kafka_config", "opensearch_client", "minio_client", "docker_client")
def test_smoke_command_round_trips_every_service() -> None:
    """The README's main job (until the pipeline exists) passes against the running platform."""
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-m", "rewardstream", "smoke"], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count(" ok ") == 4, result.stdout
