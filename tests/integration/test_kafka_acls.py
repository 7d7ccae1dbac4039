"""`RS_KAFKA_AUTH=scram`: a broker of our own (own cache dir, ports 19592-19593) behind SASL/SCRAM over TLS with
the repo's ACL table, and what each principal may and may not do.

The trainer publishes generations and reads rewards, and is refused verdicts and writing rewards; the executor
consumes generations in its group and commits executions in a transaction, and is refused another role's group
and topic; a wrong password and each refusal is one line naming what to fix; no password appears in any output
(`up`'s, the clients' logs, the errors). Kafka only (`--only kafka`), sharing the main cache's jars.
"""

from __future__ import annotations

import json
import logging
import os
import stat
import threading
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from bus.access import access_problem
from bus.clients import make_consumer, make_producer, make_reader, make_transactional_producer
from bus.metrics import WorkerMetrics
from schemas.events import GenerationEvent
from schemas.kafka_acls import ROLES
from schemas.runs import RunRequest
from schemas.settings import Settings
from streams.sdk.client import TrainerClient
from streams.sdk.config import SdkError, TrainerConfig
from tests.integration.platform_env import CliResult, IsolatedPlatform, shared_cache
from workers.handler import Done, Outcome, Output, Source
from workers.loop_config import WorkerStats
from workers.roles.service import loop_clients, worker_config
from workers.transactional_loop import TransactionalWorker

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PORT = 19592
PRINCIPALS = ("admin", *ROLES, "trainer")


def _ok(result: CliResult) -> CliResult:
    assert result.returncode == 0, result.stdout + result.stderr
    return result


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[IsolatedPlatform, str]]:
    """Kafka with auth on, in a cache dir of its own; ``up``'s output comes along (checked for secrets). Stopped
    afterwards by its pid file."""
    cache = shared_cache(tmp_path_factory.mktemp("acls"))
    env = {
        **{key: value for key, value in os.environ.items() if not key.startswith("RS_KAFKA_")},
        "RS_CACHE_DIR": str(cache),
        "RS_KAFKA_BOOTSTRAP": f"127.0.0.1:{PORT}",
        "RS_KAFKA_AUTH": "scram",
        "RS_OPENSEARCH_URL": f"http://127.0.0.1:{PORT + 100}",
        "RS_S3_ENDPOINT": f"127.0.0.1:{PORT + 110}",
    }
    platform = IsolatedPlatform(cache, env)
    try:
        result = _ok(platform.cli("up", "--only", "kafka"))
        yield platform, result.stdout + result.stderr
    finally:
        platform.cli("down", "--only", "kafka")


def _client_env(platform: IsolatedPlatform, principal: str) -> dict[str, str]:
    path = platform.cache_dir / "kafka-auth" / "clients" / f"{principal}.env"
    return dict(line.split("=", 1) for line in path.read_text().splitlines())


def _settings(platform: IsolatedPlatform, principal: str, **changes: str) -> Settings:
    """The settings a client of ``principal`` runs with: its env file, as an operator would source it."""
    env = {**_client_env(platform, principal), **changes}
    return Settings(kafka_bootstrap=f"127.0.0.1:{PORT}", kafka_security_protocol=env["RS_KAFKA_SECURITY_PROTOCOL"],
                    kafka_sasl_mechanism=env["RS_KAFKA_SASL_MECHANISM"],
                    kafka_sasl_username=env["RS_KAFKA_SASL_USERNAME"],
                    kafka_sasl_password=env["RS_KAFKA_SASL_PASSWORD"],
                    kafka_ssl_ca_location=env["RS_KAFKA_SSL_CA_LOCATION"])  # fmt: skip


def _passwords(platform: IsolatedPlatform) -> list[str]:
    kept: dict[str, str] = json.loads((platform.cache_dir / "kafka-auth" / "credentials.json").read_text())
    return list(kept.values())


def _trainer_config(settings: Settings, **changes: str) -> TrainerConfig:
    config = TrainerConfig.from_settings(settings, run_id=f"acl-{uuid.uuid4().hex[:8]}", task_versions=None)
    return TrainerConfig(**{**config.__dict__, **changes})


def _no_secret_in(text: str, platform: IsolatedPlatform) -> None:
    for password in _passwords(platform):
        assert password not in text


def test_up_makes_a_principal_each_with_private_credentials(secured: tuple[IsolatedPlatform, str]) -> None:
    platform, said = secured
    root = platform.cache_dir / "kafka-auth"
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    for private in [root / "credentials.json", root / "broker.pem", *(root / "clients").glob("*.env")]:
        assert stat.S_IMODE(private.stat().st_mode) == 0o600, private
    assert sorted(path.stem for path in (root / "clients").glob("*.env")) == sorted(PRINCIPALS)
    assert "SASL/SCRAM over TLS" in said
    _no_secret_in(said, platform)
    server = platform.cache_dir / "data" / "kafka" / "server.properties"
    assert stat.S_IMODE(server.stat().st_mode) == 0o600  # it holds the admin's password


@pytest.mark.timeout(120)
def test_the_trainer_publishes_generations_and_reads_rewards(
    secured: tuple[IsolatedPlatform, str], caplog: pytest.LogCaptureFixture
) -> None:
    platform, _ = secured
    trainer = _settings(platform, "trainer")
    caplog.set_level(logging.DEBUG)
    with TrainerClient(_trainer_config(trainer)) as client:  # reads rewards: assigns them, commits to its group
        client.send(client.generation("acl-task", "print(1)"))
        client.flush(30)
    # A reward the processor's principal wrote, read back by the trainer's.
    rewards_writer = make_producer(_settings(platform, "rewards").kafka_client_config())
    marker = uuid.uuid4().hex.encode()
    rewards_writer.produce("rs.rewards", key=b"k", value=marker, partition=0)
    assert rewards_writer.flush(30) == 0
    reader = make_reader(trainer.kafka_client_config(), "rewardstream-trainer.acl-read")
    try:
        reader.assign([TopicPartition("rs.rewards", 0, 0)])
        assert _read_until(reader, marker, 30)
    finally:
        reader.close()
    _no_secret_in(caplog.text, platform)


def test_the_trainer_may_not_read_verdicts(
    secured: tuple[IsolatedPlatform, str], caplog: pytest.LogCaptureFixture
) -> None:
    platform, _ = secured
    config = _trainer_config(_settings(platform, "trainer"), rewards_topic="rs.verdicts")
    with pytest.raises(SdkError) as refused:
        TrainerClient(config, start_timeout_s=30)
    line = str(refused.value)
    assert line == (
        "principal User:trainer may not read topic rs.verdicts: add an ACL allowing it (the table in "
        "docs/operations.md#kafka-authentication) or use the credentials of a principal that may"
    )
    _no_secret_in(line + caplog.text, platform)


def test_the_trainer_may_not_write_rewards(
    secured: tuple[IsolatedPlatform, str], caplog: pytest.LogCaptureFixture
) -> None:
    platform, _ = secured
    config = _trainer_config(_settings(platform, "trainer"), generations_topic="rs.rewards")
    with TrainerClient(config, consume=False) as client:
        client.send(client.generation("acl-task", "print(1)"))
        with pytest.raises(SdkError) as refused:
            client.flush(30)
    line = str(refused.value)
    assert line.startswith("principal User:trainer may not write topic rs.rewards: add an ACL")
    _no_secret_in(line + caplog.text, platform)


@pytest.mark.timeout(120)
def test_the_executor_consumes_in_its_group_and_commits_executions(secured: tuple[IsolatedPlatform, str]) -> None:
    platform, _ = secured
    marker = uuid.uuid4().hex.encode()
    trainer = make_producer(_settings(platform, "trainer").kafka_client_config())
    trainer.produce("rs.generations", key=b"k", value=marker)
    assert trainer.flush(30) == 0
    executor = _settings(platform, "executor").kafka_client_config()
    consumer = make_consumer(executor, "rs.executor")
    producer = make_transactional_producer(executor, f"rs.executor.acl-{uuid.uuid4().hex[:6]}", 15_000)
    try:
        consumer.subscribe(["rs.generations"])
        message = _read_until(consumer, marker, 60)
        assert message is not None
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce("rs.executions", key=b"k", value=b"result of " + marker)
        offsets = [TopicPartition(str(message.topic()), message.partition() or 0, (message.offset() or 0) + 1)]
        producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 30)
        producer.commit_transaction(30)
    finally:
        consumer.close()
    # Another role's topic aborts the transaction with the line that names the missing ACL.
    refusals: list[KafkaError | None] = []
    producer.begin_transaction()
    producer.produce("rs.verdicts", key=b"k", value=b"not mine", on_delivery=lambda err, _msg: refusals.append(err))
    with pytest.raises(KafkaException):
        producer.commit_transaction(30)
    line = access_problem(refusals[0], executor, operation="write", resource="rs.verdicts")
    assert line is not None
    assert line.startswith("principal User:executor may not write topic rs.verdicts")


@pytest.mark.timeout(60)
def test_a_worker_may_not_use_another_roles_group(secured: tuple[IsolatedPlatform, str]) -> None:
    platform, _ = secured
    executor = _settings(platform, "executor").kafka_client_config()
    consumer = make_consumer(executor, "rs.verifier")
    try:
        consumer.subscribe(["rs.generations"])
        deadline = time.monotonic() + 30
        error = None
        while error is None and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            error = message.error() if message is not None else None
    finally:
        consumer.close()
    line = access_problem(error, executor, operation="read", resource="rs.verifier")
    assert line is not None
    assert line.startswith("principal User:executor may not read consumer group rs.verifier")


@pytest.mark.timeout(60)
def test_a_wrong_password_is_one_line_naming_the_user_and_settings(
    secured: tuple[IsolatedPlatform, str], caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    platform, _ = secured
    wrong = _settings(platform, "trainer", RS_KAFKA_SASL_PASSWORD="not-" + uuid.uuid4().hex)
    with pytest.raises(SdkError) as refused:
        TrainerClient(_trainer_config(wrong), start_timeout_s=20)
    line = str(refused.value)
    assert line.startswith(
        "Kafka refused the credentials of user trainer (RS_KAFKA_SASL_USERNAME/RS_KAFKA_SASL_PASSWORD)"
    ), line
    assert "\n" not in line
    out, err = capfd.readouterr()
    shown = line + caplog.text + out + err
    assert wrong.kafka.sasl_password is not None
    assert wrong.kafka.sasl_password.get_secret_value() not in shown
    _no_secret_in(shown, platform)


class _Echo:
    """Stands in for the executor's grading: echoes each generation's id to ``out_topic``."""

    def __init__(self, out_topic: str) -> None:
        self.out_topic = out_topic
        self.seen: list[str] = []

    def handle(self, event: GenerationEvent, source: Source) -> Outcome:
        self.seen.append(event.generation_id)
        return Done((Output(self.out_topic, event.key(), event.generation_id.encode()),))


def _run_executor_loop(platform: IsolatedPlatform, out_topic: str, generation_id: str) -> tuple[WorkerStats, str]:
    """The production loop as User:executor (its group, its transactional ids) over one published generation,
    until it commits or stops; its stats and the error it stopped on ('' for none)."""
    trainer = _settings(platform, "trainer")
    with TrainerClient(_trainer_config(trainer), consume=False) as client:
        client.send(client.generation("acl-task", "print(1)", generation_id=generation_id))
        client.flush(30)
    settings = _settings(platform, "executor").model_copy(update={"worker_commit_interval_s": 0.1})
    config = worker_config(settings, "executor")
    clients = loop_clients(settings, config, "acl-test")
    producer, consumer, shipper = clients.producer, clients.consumer, clients.shipper
    stop = threading.Event()
    worker = TransactionalWorker(config, _Echo(out_topic), consumer=consumer, producer=producer,
                                 metrics=WorkerMetrics("executor"), stop=stop, shipper=shipper,
                                 models={"rs.run_requests": RunRequest})  # fmt: skip
    outcome: list[WorkerStats | BaseException] = []
    thread = threading.Thread(target=lambda: outcome.append(_stats_or_error(worker.run)), daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not outcome and worker.stats.committed == 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    stop.set()
    thread.join(60)
    assert outcome, "the worker did not stop within 60s"
    result = outcome[0]
    if isinstance(result, BaseException):
        return worker.stats, str(result)
    return result, ""


def _stats_or_error(run: Callable[[], WorkerStats]) -> WorkerStats | BaseException:
    try:
        return run()
    except Exception as exc:
        return exc


@pytest.mark.timeout(180)
def test_the_executor_loop_commits_its_results_and_stops_on_a_missing_acl(
    secured: tuple[IsolatedPlatform, str], caplog: pytest.LogCaptureFixture
) -> None:
    platform, _ = secured
    stats, error = _run_executor_loop(platform, "rs.executions", uuid.uuid4().hex)
    assert error == ""
    assert stats.committed >= 1
    # A handler writing another role's topic: the loop stops on the one line, not retrying forever.
    _stats, error = _run_executor_loop(platform, "rs.verdicts", uuid.uuid4().hex)
    assert error.startswith("principal User:executor may not write topic rs.verdicts: add an ACL"), error
    _no_secret_in(error + caplog.text, platform)


@pytest.mark.timeout(90)
def test_a_worker_with_a_wrong_password_says_so_once(
    secured: tuple[IsolatedPlatform, str], caplog: pytest.LogCaptureFixture
) -> None:
    platform, _ = secured
    wrong = "not-" + uuid.uuid4().hex
    settings = _settings(platform, "executor", RS_KAFKA_SASL_PASSWORD=wrong)
    config = worker_config(settings, "executor")
    clients = loop_clients(settings, config, "acl-test")
    producer, consumer, shipper = clients.producer, clients.consumer, clients.shipper
    caplog.set_level(logging.INFO)
    expected = "Kafka refused the credentials of user executor (RS_KAFKA_SASL_USERNAME/RS_KAFKA_SASL_PASSWORD)"
    deadline = time.monotonic() + 30
    try:
        consumer.subscribe(["rs.generations"])
        while expected not in caplog.text and time.monotonic() < deadline:
            consumer.poll(0.2)
            producer.poll(0.2)
        for _ in range(10):  # librdkafka goes on retrying: the line stays one
            consumer.poll(0.2)
            producer.poll(0.2)
    finally:
        consumer.close()
    lines = [record.getMessage() for record in caplog.records if expected in record.getMessage()]
    assert len(lines) == 1, lines  # once for the worker (its producer and consumer share one watch)
    shown = caplog.text
    assert wrong not in shown
    _no_secret_in(shown, platform)
    del shipper


def _read_until(consumer: Consumer, value: bytes, timeout_s: float) -> Message | None:
    """The message whose value is ``value``, read within ``timeout_s`` (None if it never came)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None and message.value() == value:
            return message
    return None
