"""Wire one executor/verifier/judge worker from Settings: topics from the catalog, group per role, a
transactional id per instance, the sandbox, the grader or judge, the artifact store and the log shipper.

Kept apart from the handlers so tests can build a worker with their own registry, sandbox or judge.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from confluent_kafka import Consumer, Producer

from bus.access import AccessWatch
from bus.config import RANGE, consumer_config, producer_config
from bus.instance import new_instance_id
from bus.metrics import WorkerMetrics
from schemas.errors import ConfigError
from schemas.events import GenerationEvent
from schemas.runs import RunRequest
from schemas.settings import Settings
from schemas.signals import WriterRole
from schemas.topics import WRITER_ROLE, catalog_for, group_for, topic_for
from schemas.topics import Role as TopicRole
from workers.artifacts import ArtifactStore, RetryPolicy, minio_client
from workers.containers.task_host import ImageTaskHost, NoImageTaskHost
from workers.handler import Handler
from workers.judge.cache import CachedJudge
from workers.logs.shipper import LogShipper, worker_name
from workers.loop_config import WorkerConfig, WorkerStats
from workers.roles.common import RoleContext, TaskSource
from workers.roles.run_code import ExecutorRouter, RunHandler
from workers.sandbox.api import Sandbox
from workers.sandbox.fleet_pace import FleetPace, fleet_pace
from workers.tasks.reader import TaskReader, registry_from_settings
from workers.transactional_loop import TransactionalWorker

RoleName = WriterRole
OUTPUT_ROLE: dict[RoleName, TopicRole] = {role: topic for topic, role in WRITER_ROLE.items()}


@dataclass(frozen=True)
class Dependencies:
    """What a worker may be given instead of building it from Settings (tests, benchmarks)."""

    sandbox: Sandbox | None = None
    judge: CachedJudge | None = None
    registry: TaskReader | None = None
    artifacts: ArtifactStore | None = None
    #: How the verifier runs image tasks here (their images and a docker daemon, wired by the CLI), or why it
    #: cannot (their verdicts are then sandbox_error: withheld, never a 0).
    image_tasks: ImageTaskHost | NoImageTaskHost | None = None


def instance_id(settings: Settings) -> str:
    """This process's instance id: settings, else host-pid-random (a restart is a new instance)."""
    if settings.worker.instance_id:
        return settings.worker.instance_id
    return new_instance_id()


def worker_config(settings: Settings, role: RoleName, *, concurrency: int | None = None) -> WorkerConfig:
    """Topics, group and transactional id of ``role`` from Settings."""
    if role not in OUTPUT_ROLE:
        raise ConfigError(f"unknown worker role {role!r}; expected executor, verifier or judge")
    config = loop_config(settings, role, "generations", concurrency=concurrency)
    if role == "executor":  # it reads the gateway's run requests too: each member needs a share of both topics
        return replace(config, assignment=RANGE)
    return config


def loop_config(settings: Settings, role: str, source: TopicRole, *, concurrency: int | None = None) -> WorkerConfig:
    """The transactional loop's config of any role that consumes ``source``: its group, its transactional id."""
    specs = catalog_for(settings)
    return WorkerConfig(
        role=role,
        source_topic=topic_for(source, specs).name,
        dlq_topic=topic_for("dlq", specs).name,
        group_id=group_for(settings, role),
        transactional_id=f"{settings.kafka.topic_prefix}{role}.{instance_id(settings)}",
        concurrency=concurrency or settings.worker.concurrency,
        max_in_flight=settings.worker.max_in_flight,
        commit_interval_s=settings.worker.commit_interval_s,
        drain_timeout_s=settings.worker.drain_timeout_s,
        rebalance_drain_s=settings.worker.rebalance_drain_s,
        kafka_user=settings.kafka.sasl_username,
    )


@contextmanager
def build_worker(
    settings: Settings,
    role: RoleName,
    stop: threading.Event,
    metrics: WorkerMetrics,
    *,
    concurrency: int | None = None,
    deps: Dependencies | None = None,
) -> Iterator[TransactionalWorker[Any]]:
    """A ready worker (the executor's also answers the gateway's run requests); everything it owns (sandbox,
    judge, clients) is released on exit."""
    deps = deps or Dependencies()
    config = worker_config(settings, role, concurrency=concurrency)
    specs = catalog_for(settings)
    with ExitStack() as stack:
        artifacts = deps.artifacts
        if artifacts is None and settings.worker.store_artifacts:
            artifacts = artifact_store(settings, stop, metrics)
        uploads = None
        if artifacts is not None:
            uploads = ThreadPoolExecutor(max_workers=max(2, config.concurrency), thread_name_prefix=f"{role}-upload")
            stack.callback(uploads.shutdown, wait=True)
        context = RoleContext(
            role=role,
            worker=worker_name(),
            tasks=TaskSource(deps.registry or registry_from_settings(settings)),
            artifacts=artifacts,
            output_topic=topic_for(OUTPUT_ROLE[role], specs).name,
            uploads=uploads,
        )
        fleet = None if role == "judge" else fleet_pace(settings)  # the judge starts no sandbox
        handler = _handler(settings, role, context, deps, stack, fleet=fleet)
        if fleet is not None:  # closed first (LIFO): a run still waiting for a token gives up, never starts
            stack.callback(fleet.close)
        clients = loop_clients(settings, config, context.worker)
        producer, consumer, shipper, renew = clients.producer, clients.consumer, clients.shipper, clients.renew
        if role == "executor":  # the gateway's runs take the same slots and the same share: one scheduling plane
            runs = topic_for("run_requests", specs)
            router = ExecutorRouter(handler, _run_handler(settings, handler, context))
            yield TransactionalWorker(config, router, consumer=consumer, producer=producer, metrics=metrics,
                                      stop=stop, shipper=shipper, models={runs.name: RunRequest},
                                      shares=fleet, renew=renew)  # fmt: skip
            return
        yield TransactionalWorker(config, handler, consumer=consumer, producer=producer, metrics=metrics, stop=stop,
                                  shipper=shipper, shares=fleet, renew=renew)  # fmt: skip


def _run_handler(settings: Settings, grading: Handler[GenerationEvent], context: RoleContext) -> RunHandler:
    """The executor's run handler, on the grading handler's sandbox (one pool of slots for both)."""
    from workers.roles.executor import ExecutorHandler

    if not isinstance(grading, ExecutorHandler):
        raise ConfigError("the run handler needs the executor's grading handler")
    replies = topic_for("run_replies", catalog_for(settings))
    return RunHandler(grading.grader.sandbox, replies_topic=replies.name, partitions=replies.partitions,
                      worker=context.worker)  # fmt: skip


def artifact_store(settings: Settings, stop: threading.Event, metrics: WorkerMetrics) -> ArtifactStore:
    """The worker's S3 store, started. An outage is retried until the worker stops (results wait, uncommitted;
    never lost), and the bucket is created on start (that too waits for S3), with its expiry rule."""
    from schemas.content import refresh_after_s
    from workers.lifecycle import ensure_on_start

    client, days = minio_client(settings), settings.s3.artifact_expiry_days
    store = ArtifactStore(client, settings.s3.bucket, stop=stop, retry=RetryPolicy.until_stopped(),
                          on_retry=lambda _exc: metrics.retry("s3"), refresh_after_s=refresh_after_s(days))  # fmt: skip
    store.start()
    ensure_on_start(client, settings.s3.bucket, days)
    return store


@dataclass(frozen=True, slots=True)
class LoopClients:
    """One worker's Kafka clients: its transactional producer (not initialised), its group's consumer, its log
    shipper, and ``renew`` making the replacement of a producer a broker fault left unusable (the same
    transactional id: ``TransactionalWorker``'s ``renew``). All of them report to one refusal watch, so a
    refused login is said once between them (librdkafka retries it forever, on every client)."""

    producer: Producer
    consumer: Consumer
    shipper: LogShipper
    renew: Callable[[], Producer]


def loop_clients(settings: Settings, config: WorkerConfig, worker: str) -> LoopClients:
    """The clients of one worker of ``config``'s group."""
    kafka = settings.kafka_client_config()
    watch = AccessWatch(kafka, logging.getLogger(f"rewardstream.{config.role}"), logging.DEBUG)
    renew = partial(_loop_producer, settings, config, watch)
    producer = renew()
    group: dict[str, str | int | bool] = {"max.poll.interval.ms": 300_000,
                                          "partition.assignment.strategy": config.assignment}  # fmt: skip
    consumer = Consumer({**consumer_config(kafka, config.group_id, **group), "error_cb": watch.on_error})
    shipper = LogShipper(producer, topic_for("logs", catalog_for(settings)).name, config.role, worker=worker)
    return LoopClients(producer, consumer, shipper, renew)


def _loop_producer(settings: Settings, config: WorkerConfig, watch: AccessWatch) -> Producer:
    """One worker's transactional producer (not initialised): the loop's first, and each replacement."""
    overrides: dict[str, str | int | bool] = {
        "transactional.id": config.transactional_id,
        "transaction.timeout.ms": settings.worker.transaction_timeout_ms,
    }
    return Producer({**producer_config(settings.kafka_client_config(), **overrides), "error_cb": watch.on_error})


def _handler(
    settings: Settings,
    role: RoleName,
    context: RoleContext,
    deps: Dependencies,
    stack: ExitStack,
    *,
    fleet: FleetPace | None = None,
) -> Handler[GenerationEvent]:
    if role == "judge":
        from workers.judge.factory import make_judge
        from workers.roles.judging import JudgeHandler

        judge = deps.judge
        if judge is None:
            judge = make_judge(settings)
            stack.callback(judge.close)
        return JudgeHandler(context, judge)
    from workers.grading import Grader
    from workers.roles.executor import ExecutorHandler
    from workers.roles.verifier import VerifierHandler

    sandbox = deps.sandbox
    if sandbox is None:
        from workers.sandbox.factory import make_sandbox

        sandbox = make_sandbox(settings, fleet=fleet)
        stack.callback(sandbox.close)
    grader = Grader(sandbox)
    if role == "executor":
        return ExecutorHandler(context, grader)
    return VerifierHandler(context, grader, deps.image_tasks)


def run_worker(
    settings: Settings,
    role: RoleName,
    stop: threading.Event,
    metrics: WorkerMetrics,
    *,
    concurrency: int | None = None,
    deps: Dependencies | None = None,
) -> WorkerStats:
    """Build and run one worker until ``stop``; cleanup in every case."""
    with build_worker(settings, role, stop, metrics, concurrency=concurrency, deps=deps) as worker:
        return worker.run()
