"""Verification latency of an image task from submit to reward, the way a trainer meets it, with the
verification alone as its breakdown, on each backend (the episode worker and the verifier on it: overlays of the
image's tree under bubblewrap, or containers).

An episode of the sample Harbor task (``tests.sandbox.image_task``: python:3.11-slim, WORKDIR /app) is opened,
fixed in one write and submitted through the SDK; the time from ``Episode.submit`` to its reward covers the
episode worker restoring the final delta and reading WORKDIR, the generation on Kafka, the verifier's fresh
container and ``test.sh``, the verdict and the reward processor. Next to it, in this process, ``verify`` of the
same WORKDIR (the fresh container and test.sh alone). Episodes one after another, so each latency is one
episode's own; medians and p90s in ms.

Run: ``.venv/bin/python -m benchmarks.bench_image_verification [--episodes N] [--backends process,docker]``
(needs ``rewardstream up`` and the local ``python:3.11-slim``: ``rewardstream sandbox bases --build``). Its own
topic prefix, bucket, registry and task image per backend, removed afterwards. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from rewardstream.cli.task_images import task_image_source
from schemas.settings import Settings
from streams.sdk import TrainerClient, TrainerConfig
from streams.sdk.episodes import EpisodeClient, EpisodeConfig
from tests.integration.episode_env import episode_stack
from tests.sandbox.image_task import hello, tar_of, verifier_of
from workers.artifacts import minio_client, remove_bucket
from workers.containers.task_host import ImageTaskHost
from workers.containers.verification import verify
from workers.overlays.host import OverlayHost
from workers.overlays.overlay_verification import verify_on_overlay
from workers.sandbox.docker_backend import docker_client
from workers.sandbox.factory import make_sandbox


def _summary(ms: list[float]) -> dict[str, float]:
    ordered = sorted(ms)
    return {"median": round(statistics.median(ordered), 1), "p90": round(ordered[int(0.9 * (len(ordered) - 1))], 1)}


def _measure(settings: Settings, client: Any, backend: str, episodes_n: int, tmp: Path) -> dict[str, object]:
    """One backend's figures: its own pipeline (the episode worker and the verifier on ``backend``)."""
    task = hello(tmp / backend)
    assert task.environment is not None
    image_of = task_image_source(settings, client)
    image = image_of(task)
    name = f"bench-verify-{backend}-{uuid.uuid4().hex[:8]}"
    minio = minio_client(settings)
    minio.make_bucket(name)
    sandbox = make_sandbox(settings, "process")
    overlays = OverlayHost(settings, client) if backend == "process" else None
    alone = functools.partial(verify, client) if overlays is None else functools.partial(verify_on_overlay, overlays)
    submit_ms: list[float] = []
    verify_ms: list[float] = []
    try:
        fixed = tar_of({"hello.py": 'print("hello")\n'})
        for _ in range(3):  # warm: the page cache, the daemon, the unpacked tree
            alone(image, task.environment, verifier_of(task), fixed)
        with episode_stack(settings.kafka_client_config(), name, tmp / backend, sandbox, name, tasks=[task],
                           image_tasks=ImageTaskHost(client, image_of, overlays),
                           worker_env={"RS_SANDBOX_BACKEND": backend}) as stack:  # fmt: skip
            config = EpisodeConfig.from_settings(stack.settings, name, answer_timeout_s=300)
            trainer_config = TrainerConfig.from_settings(stack.settings, name, trainer_id=f"{name}.t")
            with TrainerClient(trainer_config) as trainer, EpisodeClient(config, trainer) as episodes:
                for i in range(episodes_n + 1):  # the first is a warm-up, not counted
                    episode = episodes.open(task.task_id)
                    assert episode.write("hello.py", 'print("hello")\n').status == "ok"
                    t0 = time.perf_counter()
                    reward = episode.submit(timeout_s=300)
                    took = (time.perf_counter() - t0) * 1e3
                    assert reward.reward == 1.0, reward
                    t0 = time.perf_counter()
                    got = alone(image, task.environment, verifier_of(task), fixed)
                    by_itself = (time.perf_counter() - t0) * 1e3
                    assert got.reward.reward == 1.0, got
                    if i:
                        submit_ms.append(took)
                        verify_ms.append(by_itself)
    finally:
        sandbox.close()
        if overlays is not None:
            overlays.close()
        remove_bucket(minio, name)
        client.images.remove(image, force=True, noprune=True)
    return {"submit_to_reward_ms": _summary(submit_ms), "verify_alone_ms": _summary(verify_ms)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--backends", default="process,docker", help="comma-separated, measured one after another")
    args = parser.parse_args()
    settings = Settings()
    client = docker_client(settings)
    tmp = Path(tempfile.mkdtemp(prefix="bench-verify-"))
    out: dict[str, object] = {"episodes": args.episodes}
    try:
        for backend in args.backends.split(","):
            out[backend] = _measure(settings, client, backend, args.episodes, tmp)
    finally:
        client.close()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
