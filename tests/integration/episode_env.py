"""The episode pipeline of one machine for episode tests: the episode worker as a real process, the
executor, verifier and judge workers in threads, the reward processor, under a topic prefix of its own.

Shared by the episode SDK and episode adapter tests (``episode_stack``); topics, the worker and the threads
are stopped and deleted afterwards.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bus.admin import delete_topics
from schemas.settings import Settings
from schemas.tasks import Task
from tests.integration.helpers import PARTITIONS, start_workers, stop_workers
from tests.integration.reward_env import reward_env
from workers.roles.episode_worker import clock_topic, state_changelog
from workers.roles.service import Dependencies
from workers.sandbox.api import Sandbox
from workers.tasks.registry import TaskRegistry


@dataclass
class Stack:
    settings: Settings
    env: dict[str, str]
    logs: Path

    def worker_logs(self) -> str:
        return self.logs.read_text(errors="replace")[-6000:]


@contextmanager
def episode_stack(
    kafka_config: dict[str, str],
    unique_name: str,
    tmp_path: Path,
    sandbox: Sandbox,
    s3_bucket: str,
    *,
    tasks: Iterable[Task],
    concurrency: int = 2,
) -> Iterator[Stack]:
    """The whole pipeline of one machine under a prefix of its own, ``tasks`` in its registry."""
    registry_dir = tmp_path / "registry"
    TaskRegistry(registry_dir).store(tasks)
    with reward_env(kafka_config, unique_name, tmp_path) as env:
        settings = Settings(topic_prefix=env.prefix, topic_partitions=PARTITIONS, tasks_dir=registry_dir,
                            s3_bucket=s3_bucket, worker_concurrency=concurrency)  # fmt: skip
        child_env = {
            **os.environ, "RS_TOPIC_PREFIX": env.prefix, "RS_TOPIC_PARTITIONS": str(PARTITIONS),
            "RS_TASKS_DIR": str(registry_dir), "RS_S3_BUCKET": s3_bucket, "RS_METRICS_PORT": "0",
            "RS_WORKER_COMMIT_INTERVAL_S": "0.1", "RS_WORKER_INSTANCE_ID": f"episode-{unique_name}",
        }  # fmt: skip
        logs = tmp_path / "episode-worker.log"
        with logs.open("wb") as out:
            worker = subprocess.Popen(
                [sys.executable, "-m", "rewardstream", "worker", "episode", "--concurrency", str(concurrency)],
                env=child_env, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        stop, threads, _metrics, outcome = start_workers(
            settings, ["executor", "verifier", "judge"], Dependencies(sandbox=sandbox)
        )
        try:
            env.start()
            yield Stack(settings, child_env, logs)
            assert worker.poll() is None, logs.read_text(errors="replace")[-6000:]
        finally:
            worker.send_signal(signal.SIGTERM)
            try:
                worker.wait(timeout=60)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait(timeout=30)
            stop_workers(stop, threads)
            delete_topics([state_changelog(settings).name, clock_topic(settings).name], kafka_config)
        assert all(not isinstance(o, BaseException) for o in outcome.values()), outcome
