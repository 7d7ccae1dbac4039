"""Helpers several integration test modules share: in-process worker threads, the partition count of the
topic catalog the ``prefix`` fixture (``conftest.py``) creates, an episode's submit, and running the
``rewardstream`` CLI.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import orjson

from bus.clients import make_producer
from bus.metrics import WorkerMetrics
from schemas.codec import encode
from schemas.events import GenerationEvent, RewardEvent
from schemas.settings import Settings
from tests.integration.reward_env import REPO, Reader, RewardEnv
from workers.artifacts import ArtifactStore
from workers.loop_config import WorkerStats
from workers.roles.service import Dependencies, RoleName, run_worker

#: Partitions of every topic under the ``prefix`` fixture's catalog (pass it on as ``topic_partitions``).
PARTITIONS = 3


def episode_submit(store: ArtifactStore, task_id: str, episode: str, data: bytes, run_id: str) -> GenerationEvent:
    """What the episode worker publishes on submit: the final snapshot ``data`` in S3 by its content, the
    generation named after the episode."""
    url = store.put(data, "application/x-tar").url
    return GenerationEvent(
        generation_id=episode, episode_id=episode, run_id=run_id, task_id=task_id, policy_version="step-1",
        workspace_ref=url, workspace_sha256=hashlib.sha256(data).hexdigest(),
    )  # fmt: skip


# ---- workers in threads of the test process ----------------------------------------------------------------


def start_workers(
    settings: Settings, roles: list[RoleName], deps: Dependencies
) -> tuple[
    threading.Event, list[threading.Thread], dict[RoleName, WorkerMetrics], dict[str, WorkerStats | BaseException]
]:
    """One thread a role running ``run_worker`` until the returned event is set; the outcome dict gets each
    role's stats (or the exception it raised) when it returns."""
    stop = threading.Event()
    metrics = {role: WorkerMetrics(role) for role in roles}
    outcome: dict[str, WorkerStats | BaseException] = {}

    def run(role: RoleName) -> None:
        try:
            outcome[role] = run_worker(settings, role, stop, metrics[role], deps=deps)
        except BaseException as exc:
            outcome[role] = exc
            raise

    threads = [threading.Thread(target=run, args=(role,), name=f"test-{role}", daemon=True) for role in roles]
    for thread in threads:
        thread.start()
    return stop, threads, metrics, outcome


def stop_workers(stop: threading.Event, threads: list[threading.Thread]) -> None:
    stop.set()
    for thread in threads:
        thread.join(timeout=60)
        assert not thread.is_alive(), f"{thread.name} did not stop"


def one_reward_each(
    env: RewardEnv,
    kafka_config: dict[str, str],
    settings: Settings,
    deps: Dependencies,
    events: list[GenerationEvent],
    *,
    timeout_s: float,
) -> tuple[dict[str, RewardEvent], dict[str, WorkerStats | BaseException]]:
    """``events`` on the generations topic, graded by the executor, verifier and judge in threads and joined by
    the reward processor (started here): exactly one reward each within ``timeout_s``, and each role's outcome
    once stopped."""
    rewards = Reader(kafka_config, env.name("rewards"))
    stop, threads, _metrics, outcome = start_workers(settings, ["executor", "verifier", "judge"], deps)
    try:
        env.start()
        producer = make_producer(kafka_config)
        for event in events:
            producer.produce(env.name("generations"), key=event.key(), value=encode(event))
        assert producer.flush(30) == 0
        ids = [e.generation_id for e in events]
        rewards.wait(lambda: {r.generation_id for r in rewards.rewards()} >= set(ids), timeout_s, "a reward each",
                     env, missing=lambda: set(ids) - {r.generation_id for r in rewards.rewards()})  # fmt: skip
        got = rewards.exactly_one_each(ids)
    finally:
        stop_workers(stop, threads)
        rewards.close()
    return got, outcome


# ---- the CLI as a subprocess ---------------------------------------------------------------------------------


def cli(args: list[str], env: dict[str, str], timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """``python -m rewardstream *args`` from the repo root with ``env``; never raises on a non-zero exit."""
    return subprocess.run(
        [sys.executable, "-m", "rewardstream", *args], cwd=REPO, env=env, capture_output=True, text=True,
        timeout=timeout, check=False,
    )  # fmt: skip


def cli_json(args: list[str], env: dict[str, str], timeout: float = 240) -> Any:
    """The parsed stdout of a CLI call (``--json`` output) that must succeed."""
    done = cli(args, env, timeout)
    assert done.returncode == 0, done.stderr
    return orjson.loads(done.stdout)


def wait_for_log_lines(
    gid: str, env: dict[str, str], logs: Callable[[], str], timeout_s: float = 90
) -> list[dict[str, Any]]:
    """``logs search GID --json`` until the executor's, verifier's and judge's log lines of ``gid`` are found
    (indexed in OpenSearch); their hits. ``logs`` tells the pipeline's logs when the wait times out."""
    deadline = time.monotonic() + timeout_s
    while True:
        hits: list[dict[str, Any]] = cli_json(["logs", "search", gid, "--json"], env, timeout=60)
        if {h.get("component") for h in hits} >= {"executor", "verifier", "judge"}:
            return hits
        assert time.monotonic() < deadline, f"log lines of {gid} not searchable: {hits}\n{logs()}"
        time.sleep(0.5)
