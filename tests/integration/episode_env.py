"""The episode pipeline of one machine for episode tests: the episode worker as a real process (or, with
``worker_thread``, in a thread of the test process on the test's sandbox, so that sandbox's audit sees every
step's cgroups), the executor, verifier and judge workers in threads, the reward processor, under a topic
prefix of its own.

Shared by the episode SDK, adapter and hack tests (``episode_stack``); topics, the worker and the threads are
stopped and deleted afterwards.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from bus.admin import delete_topics
from bus.metrics import WorkerMetrics
from schemas.settings import Settings
from schemas.tasks import Task
from tests.integration.helpers import PARTITIONS, start_workers, stop_workers
from tests.integration.reward_env import RewardEnv, reward_env
from workers.artifacts import remove_bucket
from workers.containers.task_host import ImageTaskHost
from workers.loop_config import WorkerStats
from workers.roles.episode_worker import build_episode_worker, clock_topic, state_changelog
from workers.roles.service import Dependencies
from workers.sandbox.api import Sandbox
from workers.tasks.registry import TaskRegistry


@dataclass
class Stack:
    settings: Settings
    env: dict[str, str]
    logs: Path
    reward: RewardEnv
    worker: subprocess.Popen[bytes] | None = None

    def worker_logs(self) -> str:
        return self.logs.read_text(errors="replace")[-6000:]

    def diagnostics(self) -> str:
        """Where an episode's reward stopped: the logs of the episode worker and of the reward processors (with
        their task stacks, asked for now), and how often a processor was restarted."""
        if self.worker is not None and self.worker.poll() is None:
            self.worker.send_signal(signal.SIGUSR1)  # its threads' stacks, to its log (faulthandler)
        return f"reward processor restarts: {self.reward.restarts}\n{self.reward.diagnose()}"


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
    worker_thread: bool = False,
    image_tasks: ImageTaskHost | None = None,
    worker_env: dict[str, str] | None = None,
) -> Iterator[Stack]:
    """The whole pipeline of one machine under a prefix of its own, ``tasks`` in its registry (``image_tasks``:
    how the verifier runs image tasks; the episode worker's process finds the docker daemon itself)."""
    registry_dir = tmp_path / "registry"
    TaskRegistry(registry_dir).store(tasks)
    with reward_env(kafka_config, unique_name, tmp_path) as env:
        settings = Settings(topic_prefix=env.prefix, topic_partitions=PARTITIONS, tasks_dir=registry_dir,
                            s3_bucket=s3_bucket, worker_concurrency=concurrency)  # fmt: skip
        child_env = {
            **os.environ, "RS_TOPIC_PREFIX": env.prefix, "RS_TOPIC_PARTITIONS": str(PARTITIONS),
            "RS_TASKS_DIR": str(registry_dir), "RS_S3_BUCKET": s3_bucket, "RS_METRICS_PORT": "0",
            "RS_WORKER_COMMIT_INTERVAL_S": "0.1", "RS_WORKER_INSTANCE_ID": f"episode-{unique_name}",
            **(worker_env or {}),
        }  # fmt: skip
        logs = tmp_path / "episode-worker.log"
        stop, threads, _metrics, outcome = start_workers(
            settings, ["executor", "verifier", "judge"], Dependencies(sandbox=sandbox, image_tasks=image_tasks)
        )
        worker: subprocess.Popen[bytes] | None = None
        if worker_thread:
            threads.append(_episode_thread(settings, stop, sandbox, concurrency, outcome))
            logs.write_text("(the episode worker runs in the test process: see the captured log)\n")
        else:
            with logs.open("wb") as out:
                worker = subprocess.Popen(
                    [sys.executable, "-m", "rewardstream", "worker", "episode", "--concurrency", str(concurrency)],
                    env=child_env, stdout=out, stderr=subprocess.STDOUT,
                )  # fmt: skip
        stack = Stack(settings, child_env, logs, env, worker)
        try:
            env.start()
            with env.supervised():  # as ``up --pipeline`` does: a processor that stops itself (code 70) restarts
                yield stack
            assert worker is None or worker.poll() is None, logs.read_text(errors="replace")[-6000:]
        finally:
            if worker is not None:
                worker.send_signal(signal.SIGTERM)
                try:
                    worker.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    worker.kill()
                    worker.wait(timeout=30)
            stop_workers(stop, threads)
            delete_topics([state_changelog(settings).name, clock_topic(settings).name], kafka_config)
        assert all(not isinstance(o, BaseException) for o in outcome.values()), outcome


@contextmanager
def episode_stack_in_own_bucket(
    kafka_config: dict[str, str],
    minio_client: Any,
    label: str,
    tmp_path_factory: pytest.TempPathFactory,
    sandbox: Sandbox,
    *,
    tasks: Iterable[Task],
    concurrency: int = 2,
    worker_thread: bool = False,
    image_tasks: ImageTaskHost | None = None,
    worker_env: dict[str, str] | None = None,
) -> Iterator[Stack]:
    """``episode_stack`` under a unique name and an S3 bucket of its own, the bucket removed afterwards."""
    name = f"t-{label}-{uuid.uuid4().hex[:10]}"
    minio_client.make_bucket(name)
    try:
        with episode_stack(kafka_config, name, tmp_path_factory.mktemp(label), sandbox, name, tasks=tasks,
                           concurrency=concurrency, worker_thread=worker_thread,
                           image_tasks=image_tasks, worker_env=worker_env) as stack:  # fmt: skip
            yield stack
    finally:
        remove_bucket(minio_client, name)


def _episode_thread(
    settings: Settings,
    stop: threading.Event,
    sandbox: Sandbox,
    concurrency: int,
    outcome: dict[str, WorkerStats | BaseException],
) -> threading.Thread:
    """The episode worker (``build_episode_worker``, as ``rewardstream worker episode`` runs it) in a thread."""
    episode_settings = settings.model_copy(update={"worker_commit_interval_s": 0.1})

    def run() -> None:
        try:
            deps = Dependencies(sandbox=sandbox)
            with build_episode_worker(episode_settings, stop, WorkerMetrics("episode"), deps, concurrency) as worker:
                outcome["episode"] = worker.run()
        except BaseException as exc:
            outcome["episode"] = exc
            raise

    thread = threading.Thread(target=run, name="test-episode", daemon=True)
    thread.start()
    return thread


def play_actions(stack: Stack, task_id: str, path: Path, actions: list[dict[str, Any]]) -> subprocess.Popen[bytes]:
    """``rewardstream episode play --task ID --actions FILE --json`` as a process, as a user runs it."""
    path.write_bytes(b"".join(orjson.dumps(a) + b"\n" for a in actions))
    return subprocess.Popen(
        [sys.executable, "-m", "rewardstream", "episode", "play", "--task", task_id, "--actions", str(path),
         "--json", "--timeout", "300"],
        env=stack.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip


def played_lines(stack: Stack, played: subprocess.Popen[bytes]) -> list[dict[str, Any]]:
    """What ``play_actions`` printed, one JSON object a line (its exit code 0, or the worker's log says why)."""
    out, err = played.communicate(timeout=600)
    assert played.returncode == 0, (err.decode(errors="replace"), stack.worker_logs())
    return [orjson.loads(line) for line in out.splitlines()]
