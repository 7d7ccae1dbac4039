"""Wire one episode worker from Settings: ``rs.actions`` in, the transactional loop, the episode handler, its
state table's changelog, the sandbox and the snapshot store.

Kept apart from the handler so tests can build a worker with their own registry, sandbox or store. The
changelog (``<prefix>episode-episode-state-changelog``: compacted, partitioned like ``rs.actions``) is
created here when missing, like the reward processor's, and so is the probe topic of the broker's clock
(``<prefix>episode-clock``) that times idle episodes.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

from bus.admin import ensure_topics
from bus.broker_clock import BrokerClock, clock_spec
from bus.changelog import catch_up, changelog_spec, restore_partition
from bus.ends import EndOffsets
from bus.metrics import WorkerMetrics
from schemas.episodes import ActionEvent
from schemas.settings import Settings
from schemas.topics import TopicSpec, catalog_for, group_for, topic_for
from workers.episodes.sources import CommittedEpisodes
from workers.episodes.table import EpisodeTable
from workers.episodes.workspaces import Workspaces
from workers.logs.shipper import worker_name
from workers.roles.common import TaskSource
from workers.roles.episodes import EpisodeHandler, EpisodeTopics
from workers.roles.image_episodes import ImageEpisodes
from workers.roles.service import Dependencies, artifact_store, loop_clients, loop_config
from workers.sandbox.fleet_pace import fleet_pace
from workers.tasks.reader import registry_from_settings
from workers.transactional_loop import TransactionalWorker

ROLE = "episode"
TABLE = "episode-state"


def state_changelog(settings: Settings) -> TopicSpec:
    """The compacted topic of the episode states (episode_id -> state), co-partitioned with the actions."""
    actions = topic_for("actions", catalog_for(settings))
    return changelog_spec(group_for(settings, ROLE), actions, TABLE,
                          "the episode workers' state table (episode_id -> episode state); compacted")  # fmt: skip


def clock_topic(settings: Settings) -> TopicSpec:
    """The probe topic of the broker's clock (``bus.broker_clock``), what idle episodes are timed by."""
    return clock_spec(f"{group_for(settings, ROLE)}-clock", topic_for("actions", catalog_for(settings)))


@contextmanager
def build_episode_worker(
    settings: Settings,
    stop: threading.Event,
    metrics: WorkerMetrics,
    deps: Dependencies,
    concurrency: int | None = None,
) -> Iterator[TransactionalWorker[ActionEvent]]:
    """A ready episode worker (``with ... as worker: worker.run()``); everything it owns (sandbox, clients) is
    released on exit."""
    config = loop_config(settings, ROLE, "actions", concurrency=concurrency)
    specs = catalog_for(settings)
    kafka = settings.kafka_client_config()
    changelog = state_changelog(settings)
    clock = clock_topic(settings)
    ensure_topics([changelog, clock], kafka)
    with ExitStack() as stack:
        store = deps.artifacts or artifact_store(settings, stop, metrics)  # snapshots must be stored: always S3
        fleet = fleet_pace(settings)  # its share of the fleet's sandbox starts (RS_SANDBOX_FLEET_START_RATE)
        sandbox = deps.sandbox
        if sandbox is None:
            from workers.sandbox.factory import make_sandbox

            sandbox = make_sandbox(settings, fleet=fleet)
            stack.callback(sandbox.close)
        if fleet is not None:  # closed first (LIFO): a run still waiting for a token gives up, never starts
            stack.callback(fleet.close)
        table = EpisodeTable(lambda partition: restore_partition(kafka, changelog.name, partition))
        committed = CommittedEpisodes(
            changelog.partitions, lambda partition, rows, start: catch_up(kafka, changelog.name, partition, rows, start)
        )
        topics = EpisodeTopics(
            observations=topic_for("observations", specs).name,
            generations=topic_for("generations", specs).name,
            changelog=changelog.name,
        )
        tasks = TaskSource(deps.registry or registry_from_settings(settings))
        broker = BrokerClock(kafka, clock.name)
        stack.callback(broker.close)
        clients = loop_clients(settings, config, worker_name())
        shipper = clients.shipper
        images = None if deps.image_tasks is None else ImageEpisodes(deps.image_tasks)
        handler = EpisodeHandler(topics, tasks, sandbox=sandbox, workspaces=Workspaces(store), table=table,
                                 committed=committed, store=store, clock=broker.now_ms, images=images,
                                 shipper=shipper, retention_s=settings.worker.episode_retention_s)  # fmt: skip
        yield TransactionalWorker(config, handler, consumer=clients.consumer, producer=clients.producer,
                                  metrics=metrics, stop=stop, shipper=shipper, model=ActionEvent, listener=table,
                                  timers=handler, ends=EndOffsets(kafka), shares=fleet,
                                  renew=clients.renew)  # fmt: skip
