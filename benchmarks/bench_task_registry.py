"""``rewardstream tasks load`` of many small tasks as a user runs it (a whole process, start-up included): into the
S3 registry (``--registry s3://...``, the local S3 of ``rewardstream up``) side by side with the directory
registry (``--dir``, the baseline).

Each round loads the same file into a fresh registry of each kind (every task new: all written), then again
(every task unchanged: what a trainer's repeated load of the same file costs; the S3 registry tells it from one
listing of the pointers), in an order that rotates from round to round. Every load must report every task as
added (first) or unchanged (again), or the benchmark stops: a fast wrong answer is no figure. The report is
each command's median wall time. The bucket it creates is removed at the end.

Usage: ``python -m benchmarks.bench_task_registry [--tasks 100000] [--rounds 3] [--registries dir,s3] [--json]``
(``--tasks 1000 --rounds 1`` for a quick check).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import orjson

from schemas.settings import Settings
from schemas.tasks import task_version
from workers.artifacts import minio_client

BIN = Path(sys.executable).parent
TIMEOUT_S = 3_600.0


def write_tasks(path: Path, count: int) -> None:
    """``count`` small call tasks (each its own hidden case, so every one is a distinct version)."""
    with path.open("wb") as out:
        for i in range(count):
            task = {
                "task_id": f"bench/{i}",
                "prompt": "def add(a, b):\n",
                "entry_point": "add",
                "public_tests": {"kind": "call", "cases": [{"args": [1, 2], "expected": 3}]},
                "hidden_tests": {"kind": "call", "cases": [{"args": [i, 1], "expected": i + 1}]},
            }
            out.write(orjson.dumps(task) + b"\n")


def remove_loaded(client: Any, bucket: str, registries: list[str], tasks: Path) -> None:
    """Delete what the loads wrote, by key, then the bucket. Why not ``remove_bucket``: listing a whole bucket of
    300,000 nested keys runs the local S3 (s3proxy, a 256 MB heap) out of memory."""
    from minio.deleteobjects import DeleteObject

    from schemas.registry_s3 import RegistryLocation
    from workers.tasks.files import load_jsonl

    keys: list[str] = []
    for url in registries:
        location = RegistryLocation.parse(url)
        for task in load_jsonl(tasks):
            version = task_version(task)
            keys += [location.latest_key(task.task_id), location.history_key(task.task_id)]
            keys += [location.version_key(task.task_id, version, hidden=hidden) for hidden in (True, False)]
    for start in range(0, len(keys), 1_000):
        batch = (DeleteObject(key) for key in keys[start : start + 1_000])
        failed = list(client.remove_objects(bucket, batch))
        if failed:
            raise SystemExit(f"emptying bucket {bucket} failed for {len(failed)} objects: {failed[0]}")
    client.remove_bucket(bucket)


def load(argv: list[str], expect: str, count: int) -> float:
    """Seconds of one ``tasks load --json`` process; it must report all ``count`` tasks as ``expect``."""
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, timeout=TIMEOUT_S, check=False)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.decode()[-2000:]}")
    report = json.loads(done.stdout)
    if len(report[expect]) != count:
        raise SystemExit(f"{' '.join(argv)}: {len(report[expect])} of {count} tasks {expect}, not all")
    return seconds


def run(args: argparse.Namespace) -> dict[str, Any]:
    client = minio_client(Settings(), timeout_s=120.0)  # deleting thousands of objects at once takes a while
    bucket = f"bench-tasks-{uuid.uuid4().hex[:10]}"
    exe = str(BIN / "rewardstream")
    kinds = args.registries
    times: dict[str, list[float]] = {f"{kind}_{load}": [] for kind in kinds for load in ("first", "again")}
    with tempfile.TemporaryDirectory(prefix="bench-task-registry-") as tmp:
        work = Path(tmp)
        tasks = work / "tasks.jsonl"
        write_tasks(tasks, args.tasks)
        client.make_bucket(bucket)
        try:
            for round_no in range(args.rounds):
                registries = {
                    "dir": ["--dir", str(work / f"dir-{round_no}")],
                    "s3": ["--registry", f"s3://{bucket}/round-{round_no}"],
                }
                for kind in kinds if round_no % 2 == 0 else kinds[::-1]:
                    argv = [exe, "tasks", "load", str(tasks), "--json", *registries[kind]]
                    times[f"{kind}_first"].append(load(argv, "added", args.tasks))
                    times[f"{kind}_again"].append(load(argv, "unchanged", args.tasks))
                done = ", ".join(f"{k} {v[-1]:.2f} s" for k, v in times.items())
                print(f"round {round_no + 1}: {done}", file=sys.stderr)
        finally:
            remove_loaded(client, bucket, [f"s3://{bucket}/round-{n}" for n in range(args.rounds)], tasks)
    medians = {name: round(statistics.median(values), 3) for name, values in times.items()}
    return {
        "tasks": args.tasks,
        "rounds": args.rounds,
        "cores": os.cpu_count(),
        "median_s": medians,
        "tasks_per_s": {kind: round(args.tasks / medians[f"{kind}_first"]) for kind in kinds},
        "seconds": times,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--tasks", type=int, default=100_000, help="small tasks in the file (default 100,000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; the report is the median (default 3)")
    parser.add_argument(
        "--registries", default="dir,s3", help="which to run, comma-separated: dir (the baseline), s3 (default both)"
    )
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")
    args = parser.parse_args()
    if args.tasks < 1 or args.rounds < 1:
        parser.error("--tasks and --rounds must be at least 1")
    args.registries = [kind for kind in args.registries.split(",") if kind]
    if not args.registries or not set(args.registries) <= {"dir", "s3"}:
        parser.error("--registries takes dir, s3 or dir,s3")
    result = run(args)
    if args.json:
        print(json.dumps(result))
        return
    medians = result["median_s"]
    print(f"{args.tasks} tasks, median of {args.rounds} round(s), whole `rewardstream tasks load` processes:")
    for kind, label in (("dir", "directory (--dir)"), ("s3", "S3 (--registry s3://)")):
        if kind not in args.registries:
            continue
        first, again = medians[f"{kind}_first"], medians[f"{kind}_again"]
        print(f"  {label:<22} first load {first:.2f} s, again (unchanged) {again:.2f} s")


if __name__ == "__main__":
    main()
