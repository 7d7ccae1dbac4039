"""`RS_KAFKA_AUTH=scram RS_KAFKA_BROKERS=3`: three KRaft nodes of our own (own cache dir, ports 19594-19599)
behind SASL/SCRAM over TLS with the repo's ACL table: the brokers replicate as the super user, the trainer's
acks=all writes land on two replicas in sync, the executor commits a transaction (its state topic replicated
too), the trainer is refused the verdicts; no password in any file or output. Kafka only (`--only kafka`).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from bus.clients import make_consumer, make_producer, make_transactional_producer
from schemas.settings import Settings
from streams.sdk.client import TrainerClient
from streams.sdk.config import SdkError, TrainerConfig
from tests.integration.platform_env import IsolatedPlatform, shared_cache

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BASE_PORT = 19594
NODES = [f"127.0.0.1:{BASE_PORT + step}" for step in (0, 2, 4)]
MESSAGES = 20


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[IsolatedPlatform, str]]:
    """The three nodes started by ``up`` (what it printed comes along); stopped by their pid files."""
    cache = shared_cache(tmp_path)
    env = {
        **{key: value for key, value in os.environ.items() if not key.startswith("RS_KAFKA_")},
        "RS_CACHE_DIR": str(cache),
        "RS_KAFKA_BOOTSTRAP": NODES[0],
        "RS_KAFKA_BROKERS": "3",
        "RS_KAFKA_AUTH": "scram",
        "RS_OPENSEARCH_URL": f"http://127.0.0.1:{BASE_PORT + 100}",
        "RS_S3_ENDPOINT": f"127.0.0.1:{BASE_PORT + 110}",
    }
    platform = IsolatedPlatform(cache, env)
    said = ""
    try:
        up = platform.cli("up", "--only", "kafka", timeout=600)
        said = up.stdout + up.stderr
        assert up.returncode == 0, said
        yield platform, said
    finally:
        down = platform.cli("down", "--only", "kafka")
        _no_password_in(platform, said + down.stdout + down.stderr)


def _settings(platform: IsolatedPlatform, principal: str) -> Settings:
    path = platform.cache_dir / "kafka-auth" / "clients" / f"{principal}.env"
    env = dict(line.split("=", 1) for line in path.read_text().splitlines())
    return Settings(kafka_bootstrap=",".join(NODES), kafka_security_protocol=env["RS_KAFKA_SECURITY_PROTOCOL"],
                    kafka_sasl_mechanism=env["RS_KAFKA_SASL_MECHANISM"],
                    kafka_sasl_username=env["RS_KAFKA_SASL_USERNAME"],
                    kafka_sasl_password=env["RS_KAFKA_SASL_PASSWORD"],
                    kafka_ssl_ca_location=env["RS_KAFKA_SSL_CA_LOCATION"])  # fmt: skip


def _no_password_in(platform: IsolatedPlatform, printed: str) -> None:
    """Neither ``printed`` nor any file of the cache dir but the credentials' own and the nodes'
    server.properties (0600) holds a password."""
    kept: dict[str, str] = json.loads((platform.cache_dir / "kafka-auth" / "credentials.json").read_text())
    passwords = [password.encode() for password in kept.values()]
    assert not [p for p in passwords if p in printed.encode()]
    leaked = []
    for folder, dirs, files in os.walk(platform.cache_dir):
        dirs[:] = [d for d in dirs if d != "kafka-auth" and not Path(folder, d).is_symlink()]
        for name in files:
            path = Path(folder, name)
            if name != "server.properties" and not path.is_symlink():
                data = path.read_bytes()
                leaked += [str(path) for password in passwords if password in data]
    assert not leaked


@pytest.mark.timeout(600)
def test_three_brokers_with_auth_replicate_commit_and_refuse(
    cluster: tuple[IsolatedPlatform, str], capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    platform, said = cluster
    assert "SASL/SCRAM over TLS" in said
    trainer = _settings(platform, "trainer")
    producer = make_producer(trainer.kafka_client_config())  # acks=all: two of three replicas in sync
    marker = uuid.uuid4().hex
    for n in range(MESSAGES):
        producer.produce("rs.generations", key=f"k{n}".encode(), value=f"{marker}-{n}".encode())
    assert producer.flush(60) == 0
    admin = AdminClient({**_settings(platform, "admin").kafka_client_config(), "log_level": 3})
    partitions = admin.list_topics("rs.generations", timeout=30).topics["rs.generations"].partitions.values()
    assert all(len(p.replicas) == 3 and len(p.isrs) >= 2 for p in partitions)  # written as the admin, replicated

    executor = _settings(platform, "executor").kafka_client_config()
    consumer = make_consumer(executor, "rs.executor")
    txn = make_transactional_producer(executor, f"rs.executor.acl-{uuid.uuid4().hex[:6]}", 30_000)
    seen: set[str] = set()
    try:
        consumer.subscribe(["rs.generations"])
        deadline = time.monotonic() + 120
        while len(seen) < MESSAGES and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if (
                message is not None
                and message.error() is None
                and (message.value() or b"").startswith(b"%s-" % marker.encode())
            ):
                seen.add((message.value() or b"").decode())
        assert len(seen) == MESSAGES
        txn.init_transactions(60)
        txn.begin_transaction()
        txn.produce("rs.executions", key=b"k", value=marker.encode())
        positions = consumer.position(consumer.assignment())
        offsets = [TopicPartition(tp.topic, tp.partition, tp.offset) for tp in positions if tp.offset >= 0]
        txn.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 60)
        txn.commit_transaction(60)
    finally:
        consumer.close()

    config = TrainerConfig.from_settings(trainer, run_id=f"acl-{uuid.uuid4().hex[:8]}", task_versions=None)
    with pytest.raises(SdkError) as refused:
        TrainerClient(TrainerConfig(**{**config.__dict__, "rewards_topic": "rs.verdicts"}), start_timeout_s=30)
    assert str(refused.value).startswith("principal User:trainer may not read topic rs.verdicts: add an ACL")
    out, err = capfd.readouterr()
    _no_password_in(platform, str(refused.value) + out + err + caplog.text)
