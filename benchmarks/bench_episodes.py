"""Agent episodes through Kafka, the way a trainer meets them, next to the same sandbox runs called directly.

    .venv/bin/python -m benchmarks.bench_episodes [--steps 200] [--slots 2] [--levels 4,64]
                                                  [--big-files 5000] [--big-mb 50]

Needs the local services (``rewardstream up``). One run, three parts, printed as one JSON object:

* **step overhead**: ``exec true`` as a trainer's ``Episode.exec`` (publish the action, the episode worker
  process consumes it, runs the step, commits the observation in its transaction, the SDK reads it) next to
  ``run_step`` of the same action on the same workspace in this process, alternating so both see the same
  load. p50/p99 of each; the overhead is their difference. Target: p50 <= 25 ms, p99 <= 100 ms.
* **snapshot + restore** of a ``--big-mb`` / ``--big-files`` workspace: ``snapshot.pack`` and
  ``snapshot.unpack`` on the host, and a step on it (restored in the sandbox, then an unchanged and a
  changed one packed back): medians of 3.
* **episodes/s** at each ``--levels`` concurrency (a thread per episode, each an open, which runs no sandbox,
  and 4 steps, each one sandbox run: write, exec, read, exec; ``steps_per_s`` counts those, ``actions_per_s``
  the open too), and how busy the worker's ``--slots`` slots were: the time its runner threads spent handling
  actions (its own ``rewardstream_run_seconds`` sum, read from its ``/metrics`` before and after) over the
  elapsed time times the slots. Target: the slots stay busy at 64 episodes.

Its own topic prefix, bucket and task registry, all removed afterwards; the worker runs with the default
settings but for those.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks.latency import summary, timed
from bus.admin import delete_topics, ensure_topics
from schemas.settings import Settings
from schemas.status import SandboxStatus
from schemas.tasks import Task
from schemas.topics import catalog
from streams.sdk.episodes import Episode, EpisodeClient, EpisodeConfig
from workers.artifacts import minio_client, remove_bucket
from workers.episodes.snapshot import Caps, pack, unpack
from workers.episodes.step import StepAction, run_step
from workers.roles.episode_worker import clock_topic, state_changelog
from workers.sandbox.factory import make_sandbox
from workers.tasks.registry import TaskRegistry

PARTITIONS = 6
TASK_ID = "bench/episode"


def task(max_turns: int) -> Task:
    return Task.model_validate({
        "schema": "rewardstream.task/v1", "task_id": TASK_ID, "prompt": "bench", "entry_point": "m:f",
        "workspace": {"files": {"m.py": "def f():\n    return 1\n", "tests/test_m.py": "from m import f\n"}},
        "episode": {"max_turns": max_turns, "step_timeout_s": 10, "idle_timeout_s": 600},
        "hidden_tests": {"kind": "call", "cases": [{"id": "h0", "args": [], "expected": 1}]},
    })  # fmt: skip


def metrics_url(logs: Path, timeout_s: float = 60.0) -> str:
    """The episode worker's ``/metrics`` URL, from the line it logs when it starts."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = re.search(r"metrics on (http://\S+/metrics)", logs.read_text(errors="replace"))
        if found:
            return found.group(1)
        time.sleep(0.1)
    raise RuntimeError(f"the episode worker logged no metrics URL in {timeout_s:g}s: {logs.read_text()[-2000:]}")


def busy_seconds(url: str) -> float:
    """Seconds the worker's runner threads spent handling actions so far (``rewardstream_run_seconds`` sum)."""
    with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 - the worker's own loopback URL
        text = response.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("rewardstream_run_seconds_sum"))  # fmt: skip


@contextmanager
def pipeline(settings: Settings, slots: int, max_turns: int, logs: Path) -> Iterator[tuple[EpisodeClient, str]]:
    """Topics, bucket and registry of this run, the episode worker process, a client of it and its /metrics."""
    kafka = settings.kafka_client_config()
    specs = catalog(settings.kafka.topic_prefix, PARTITIONS, 1)
    ensure_topics(specs, kafka)
    s3 = minio_client(settings)
    s3.make_bucket(settings.s3.bucket)
    env = {**os.environ, "RS_TOPIC_PREFIX": settings.kafka.topic_prefix, "RS_TOPIC_PARTITIONS": str(PARTITIONS),
           "RS_TASKS_DIR": str(settings.tasks_dir), "RS_S3_BUCKET": settings.s3.bucket, "RS_METRICS_PORT": "0",
           "RS_WORKER_INSTANCE_ID": f"bench-{settings.kafka.topic_prefix}"}  # fmt: skip
    TaskRegistry(settings.tasks_dir).store([task(max_turns)])
    with logs.open("wb") as out:
        worker = subprocess.Popen([sys.executable, "-m", "rewardstream", "worker", "episode", "--concurrency",
                                   str(slots)], env=env, stdout=out, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        with EpisodeClient(EpisodeConfig.from_settings(settings, run_id="bench", answer_timeout_s=120)) as client:
            yield client, metrics_url(logs)
    finally:
        worker.terminate()
        try:
            worker.wait(timeout=60)
        except subprocess.TimeoutExpired:
            worker.kill()
        delete_topics([s.name for s in specs] + [state_changelog(settings).name, clock_topic(settings).name], kafka)
        remove_bucket(s3, settings.s3.bucket)


def step_overhead(client: EpisodeClient, settings: Settings, steps: int) -> dict[str, Any]:
    """``exec true`` through Kafka and directly, alternating."""
    episode = client.open(TASK_ID, timeout_s=120)
    first = episode.exec(["true"])
    assert first.status == "ok", first
    snapshot = task(steps).workspace
    assert snapshot is not None
    assert snapshot.files is not None
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in snapshot.files.items():
            Path(tmp, name).parent.mkdir(parents=True, exist_ok=True)
            Path(tmp, name).write_text(text)
        before = pack(Path(tmp)).data
    sandbox = make_sandbox(settings)
    kafka_ms: list[float] = []
    direct_ms: list[float] = []
    try:
        action = StepAction.exec(["true"])
        for _ in range(3):
            run_step(sandbox, before, action)
        for _ in range(steps):
            direct_ms.append(timed(lambda: run_step(sandbox, before, action)))
            t0 = time.perf_counter()
            obs = episode.exec(["true"])
            kafka_ms.append((time.perf_counter() - t0) * 1e3)
            assert obs.status == "ok", obs
    finally:
        sandbox.close()
    kafka, direct = summary(kafka_ms), summary(direct_ms)
    return {"through_kafka_ms": kafka, "direct_ms": direct,
            "overhead_ms": {"p50": round(kafka["p50"] - direct["p50"], 2),
                            "p99": round(kafka["p99"] - direct["p99"], 2)}}  # fmt: skip


def big_workspace(settings: Settings, files: int, megabytes: int) -> dict[str, Any]:
    """Pack, unpack and a step on a workspace of ``files`` files, ``megabytes`` MiB in all."""
    size = (megabytes << 20) // files
    caps = Caps(max_bytes=(megabytes + 8) << 20, max_entries=files + 100)
    packs, unpacks, same, changed = [], [], [], []
    sandbox = make_sandbox(settings)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp, "w")
            for i in range(files):
                path = root / f"d{i % 50}" / f"f{i}.bin"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(os.urandom(size))
            data = b""
            for n in range(3):
                t0 = time.perf_counter()
                data = pack(root, caps).data
                packs.append((time.perf_counter() - t0) * 1e3)
                out = Path(tmp, f"u{n}")
                out.mkdir()
                t0 = time.perf_counter()
                unpack(data, out, caps)
                unpacks.append((time.perf_counter() - t0) * 1e3)
            for _ in range(3):
                t0 = time.perf_counter()
                kept = run_step(sandbox, data, StepAction.exec(["true"]), caps)
                same.append((time.perf_counter() - t0) * 1e3)
                t0 = time.perf_counter()
                grown = run_step(sandbox, data, StepAction.exec(["sh", "-c", "echo x > new"]), caps)
                changed.append((time.perf_counter() - t0) * 1e3)
                assert kept.status == grown.status == SandboxStatus.OK, (kept.reason, grown.reason)
    finally:
        sandbox.close()
    return {"files": files, "tar_bytes": len(data), "pack_ms": round(statistics.median(packs), 1),
            "unpack_ms": round(statistics.median(unpacks), 1),
            "step_unchanged_ms": round(statistics.median(same), 1),
            "step_changed_ms": round(statistics.median(changed), 1)}  # fmt: skip


#: Sandbox runs per played episode (write, exec, read, exec); its open runs none.
SANDBOX_STEPS = 4


def play(episode_of: Callable[[], Episode], walls: list[int], lock: threading.Lock) -> None:
    """One episode: open, then write, exec, read, exec; each step's sandbox wall time into ``walls``."""
    episode = episode_of()
    tag = episode.episode_id[-8:]
    got = [episode.write("notes.txt", f"{tag}\n"), episode.exec("cat notes.txt >> log.txt && cat log.txt"),
           episode.read("log.txt"), episode.exec(["true"])]  # fmt: skip
    assert got[2].content == f"{tag}\n", got[2]
    with lock:
        walls.extend(int(o.wall_ms or 0) for o in got)


def throughput(client: EpisodeClient, concurrent: int, slots: int, rounds: int, url: str) -> dict[str, Any]:
    """``rounds`` x ``concurrent`` episodes, ``concurrent`` at a time. ``slots_busy``: the worker's handling time
    (``url``: its /metrics) over elapsed x slots; ``command_busy``: the same with only the steps' sandbox runs'
    wall time (the observations' ``wall_ms``)."""
    walls: list[int] = []
    lock = threading.Lock()
    errors: list[BaseException] = []
    total = concurrent * rounds
    todo = iter(range(total))

    def run() -> None:
        while True:
            with lock:
                if next(todo, None) is None:
                    return
            try:
                play(lambda: client.open(TASK_ID, timeout_s=300), walls, lock)
            except BaseException as exc:  # reported below, after the others finished
                errors.append(exc)
                return

    busy_before = busy_seconds(url)
    started = time.perf_counter()
    threads = [threading.Thread(target=run) for _ in range(concurrent)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    busy = busy_seconds(url) - busy_before
    if errors:
        raise errors[0]
    return {"concurrent": concurrent, **rates(total, elapsed, busy, slots),
            "command_busy": round(sum(walls) / 1e3 / (elapsed * slots), 3)}  # fmt: skip


def rates(episodes: int, elapsed_s: float, busy_s: float, slots: int) -> dict[str, float]:
    """Throughput of ``episodes`` played in ``elapsed_s``: episodes, sandbox steps (``SANDBOX_STEPS`` each: the
    open runs none) and actions (the open too) per second, and the slots' busy share (``busy_s`` of handling
    over ``elapsed_s`` x ``slots``)."""
    return {"episodes": episodes, "elapsed_s": round(elapsed_s, 2), "episodes_per_s": round(episodes / elapsed_s, 2),
            "steps_per_s": round(SANDBOX_STEPS * episodes / elapsed_s, 1),
            "actions_per_s": round((SANDBOX_STEPS + 1) * episodes / elapsed_s, 1),
            "slots_busy": round(busy_s / (elapsed_s * slots), 3)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument("--levels", default="4,64")
    parser.add_argument("--rounds", type=int, default=2, help="episodes per level: rounds x concurrency")
    parser.add_argument("--big-files", type=int, default=5000)
    parser.add_argument("--big-mb", type=int, default=50)
    args = parser.parse_args()
    run = uuid.uuid4().hex[:10]
    with tempfile.TemporaryDirectory(prefix="rs-bench-episodes-") as tmp:
        settings = Settings(topic_prefix=f"rs-bench.episodes-{run}.", topic_partitions=PARTITIONS,
                            tasks_dir=Path(tmp, "tasks"), s3_bucket=f"rs-bench-episodes-{run}")  # fmt: skip
        out: dict[str, Any] = {"slots": args.slots}
        with pipeline(settings, args.slots, args.steps + 10, Path(tmp, "worker.log")) as (client, url):
            try:
                out["step_exec_true"] = step_overhead(client, settings, args.steps)
                out["throughput"] = [throughput(client, int(c), args.slots, args.rounds, url)
                                     for c in args.levels.split(",")]  # fmt: skip
            except BaseException:
                print(Path(tmp, "worker.log").read_text(errors="replace")[-4000:], file=sys.stderr)
                raise
        out["big_workspace"] = big_workspace(settings, args.big_files, args.big_mb)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
