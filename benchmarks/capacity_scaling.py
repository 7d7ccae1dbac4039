"""Scaling (issue 27): 1, 2, 4, 8 executor processes on a topic of 8 partitions, I/O-bound runs in real sandboxes.

Each count gets fresh topics; its ``rewardstream worker executor`` processes are started as a user starts them
(``RS_*`` settings, the process backend, artifacts stored as by default) and the clock starts only once the
consumer group is stable with all of them and every partition assigned. Then ``count x concurrency x rounds``
generations are published, spread evenly over the partitions, each a right solution whose one public case
sleeps ``sleep_s`` (as an agent's step mostly waits); the throughput is generations over the time from the
publish to the last committed result. Efficiency is that over ``count`` times the throughput of one process.

The host's sandbox slots (``RS_SANDBOX_SLOTS``) are sized for every process at once: by default a host admits
two runs per core, which is right for CPU-bound grading and would cap I/O-bound runs at 4 here.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from confluent_kafka import ConsumerGroupState
from confluent_kafka.admin import AdminClient

from benchmarks.capacity_kafka import TASK_ID, BenchRun, Reader, bench_run, call_task, generations, sleeping_code
from schemas.codec import decode
from schemas.events import ExecutionResult
from schemas.topics import group_for
from workers.tasks.registry import TaskRegistry

PARTITIONS = 8
START_TIMEOUT_S = 180.0


def group_ready(run: BenchRun, admin: AdminClient, members: int) -> bool:
    """Whether the executor group is stable with ``members`` members and every generations partition assigned."""
    group = group_for(run.settings, "executor")
    desc = admin.describe_consumer_groups([group])[group].result(10)
    if desc.state != ConsumerGroupState.STABLE or len(desc.members) != members:
        return False
    topic = run.topic("generations")
    assigned = [tp for m in desc.members for tp in (m.assignment.topic_partitions if m.assignment else [])
                if tp.topic == topic]  # fmt: skip
    return len(assigned) == PARTITIONS


def start_workers(run: BenchRun, count: int, concurrency: int, slots: int) -> list[subprocess.Popen[bytes]]:
    env = {**os.environ, **run.env(), "RS_SANDBOX_SLOTS": str(slots)}
    procs = []
    for i in range(count):
        with Path(run.tmp, f"executor-{i}.log").open("wb") as log:
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "rewardstream", "worker", "executor", "--concurrency", str(concurrency)],
                env=env, stdout=log, stderr=subprocess.STDOUT,
            ))  # fmt: skip
    return procs


def stop_workers(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def one_count(count: int, concurrency: int, rounds: int, sleep_s: float, slots: int) -> dict[str, Any]:
    """Generations/s of ``count`` executor processes."""
    with bench_run(f"scale{count}", PARTITIONS) as run:
        registry = TaskRegistry(run.settings.tasks_dir)
        registry.store([call_task()])
        version = registry.latest_version(TASK_ID)
        procs = start_workers(run, count, concurrency, slots)
        try:
            deadline = time.monotonic() + START_TIMEOUT_S
            admin = AdminClient({**run.settings.kafka_client_config(), "log_level": 3})
            while not group_ready(run, admin, count):
                dead = [p.pid for p in procs if p.poll() is not None]
                if dead or time.monotonic() > deadline:
                    logs = "\n".join(p.read_text(errors="replace")[-1500:] for p in run.tmp.glob("executor-*.log"))
                    raise RuntimeError(f"{count} executors never formed a stable group (exited: {dead}):\n{logs}")
                time.sleep(0.5)
            n = count * concurrency * rounds
            events = [e.model_copy(update={"task_version": version})
                      for e in generations(n, PARTITIONS, sleeping_code(sleep_s), f"s{count}")]  # fmt: skip
            reader = Reader(run, run.topic("executions"))
            try:
                started = time.perf_counter()
                run.publish(run.topic("generations"), events)
                timed = reader.wait(n, 60 + 20 * rounds * sleep_s, alive=lambda: all(p.poll() is None for p in procs),
                                    keep=True)  # fmt: skip
            finally:
                reader.close()
        finally:
            stop_workers(procs)
    results = [decode(v, ExecutionResult) for v in timed.values]
    runs = [r.run for r in results]
    statuses = sorted({r.status for r in runs})
    done_at: dict[str, float] = {}  # each member's last result, seconds after the publish
    for result, at in zip(results, timed.read_at, strict=True):
        done_at[result.worker or "?"] = max(done_at.get(result.worker or "?", 0.0), at - started)
    return {"processes": count, "generations": n, "rps": round(n / (timed.last_s - started), 2),
            "run_wall_ms_p50": round(statistics.median(r.wall_ms for r in runs)),
            "run_wait_ms_p50": round(statistics.median(r.wait_ms for r in runs)), "statuses": statuses,
            "members_done_s": sorted(round(t, 1) for t in done_at.values())}  # fmt: skip


def efficiencies(rows: list[dict[str, Any]], concurrency: int, sleep_s: float) -> list[dict[str, Any]]:
    """Each row's efficiency (its rps over ``processes`` times one process's; None without a 1-process row) and
    the rps its runs' sleep alone allows."""
    base = next((r["rps"] for r in rows if r["processes"] == 1), None)
    for row in rows:
        row["efficiency"] = round(row["rps"] / (row["processes"] * base), 3) if base else None
        row["ideal_rps"] = round(row["processes"] * concurrency / sleep_s, 2)
    return rows


def scaling(counts: list[int], concurrency: int, rounds: int, sleep_s: float) -> dict[str, Any]:
    """Throughput per process count, and each count's efficiency against one process."""
    slots = max(counts) * concurrency
    rows = efficiencies([one_count(c, concurrency, rounds, sleep_s, slots) for c in counts], concurrency, sleep_s)
    return {"concurrency": concurrency, "rounds": rounds, "sleep_s": sleep_s, "slots": slots, "counts": rows}
