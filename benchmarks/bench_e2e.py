"""End-to-end throughput (publish to reward consumed) vs the same grading without the pipeline, same slots.

    .venv/bin/python benchmarks/bench_e2e.py [--generations 328] [--concurrency 2] [--repeats 3]

Grading only (the baseline of the 0.7x target): a thread pool of ``2 x concurrency`` does, per generation,
exactly the grading the pipeline's roles do, in the process sandbox: the public suite in one sandbox run (the
executor), static analysis and the hidden suite in another (the verifier). Also shown, for reference: one
combined run of both suites per generation (``Grader.grade``, what ``rewardstream grade`` does), which the
pipeline cannot do because the public results are feedback and the hidden verdict is evidence, produced by
different roles. End to end: the whole pipeline as ``rewardstream up --pipeline --concurrency N`` runs it
(executor and verifier with ``concurrency`` sandbox slots each, so the same 2 x concurrency slots in all;
judge, indexer, reward processor), on fresh topics; a trainer publishes every generation through the SDK and
the clock stops when the last reward is consumed. Latency is per generation, from publish to its reward.
Runs alternate so that load drift hits all sides. Needs the local services (`rewardstream up`).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path

from infra.local.paths import shared_cache
from schemas.settings import Settings
from schemas.tasks import Task
from streams.sdk import RewardFuture, TrainerClient, TrainerConfig
from workers.grading import Grader, public_suite
from workers.grading.static_analysis import analyze
from workers.sandbox.factory import make_sandbox
from workers.tasks.humaneval import Problem, SandboxReference, convert_all, load_problems
from workers.tasks.registry import TaskRegistry


def solutions(problems: list[Problem], n: int) -> list[tuple[str, str, str]]:
    """(generation suffix, task_id, code): canonical and wrong solutions alternating, n in all."""
    out = []
    for i in range(n):
        p = problems[(i // 2) % len(problems)]
        code = p.reference_code if i % 2 == 0 else p.prompt + "    return None\n"
        out.append((f"{i}", p.task_id, code))
    return out


def grading_only(
    settings: Settings, tasks: dict[str, Task], sols: list[tuple[str, str, str]], slots: int, *, combined: bool
) -> float:
    """Generations/s of the roles' grading (``combined``: one run of both suites per generation instead)."""
    sandbox = make_sandbox(settings, "process")
    try:
        grader = Grader(sandbox)

        def roles(sol: tuple[str, str, str]) -> None:
            task = tasks[sol[1]]
            public_tests = public_suite(task)
            if public_tests is not None:  # the executor
                grader.run_suites(sol[2], task.entry_point, [("public", public_tests)], task.limits, prompt=task.prompt)
            analyze(sol[2])  # the verifier
            grader.run_suites(
                sol[2], task.entry_point, [("hidden", task.graded_suite)], task.limits, prompt=task.prompt
            )

        def one_run(sol: tuple[str, str, str]) -> None:
            grader.grade(tasks[sol[1]], sol[2], generation_id=sol[0])

        started = time.monotonic()
        with ThreadPoolExecutor(slots) as pool:
            list(pool.map(one_run if combined else roles, sols))
        return len(sols) / (time.monotonic() - started)
    finally:
        sandbox.close()


def end_to_end(env: dict[str, str], settings: Settings, sols: list[tuple[str, str, str]]) -> tuple[float, list[float]]:
    run = f"e2e-{uuid.uuid4().hex[:8]}"
    config = TrainerConfig.from_settings(settings, run, policy_version="bench")
    latencies: list[float] = []
    with TrainerClient(config) as client:
        sent: dict[RewardFuture, float] = {}
        started = time.monotonic()
        for suffix, task_id, code in sols:
            future = client.publish(client.generation(task_id, code, generation_id=f"{run}-{suffix}"))
            sent[future] = time.monotonic()
        client.flush()
        pending = set(sent)
        deadline = started + 900
        while pending and time.monotonic() < deadline:
            done, pending = wait(pending, timeout=1.0, return_when=FIRST_COMPLETED)
            now = time.monotonic()
            latencies += [now - sent[f] for f in done]
        if pending:
            raise SystemExit(f"{len(pending)} rewards missing after 900 s")
        return len(sols) / (time.monotonic() - started), latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--generations", type=int, default=328)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    main_cache = Settings().local.cache_dir
    with tempfile.TemporaryDirectory(prefix="rs-bench-e2e-") as tmp:
        cache = shared_cache(Path(tmp), main_cache)
        prefix = f"bench-e2e-{uuid.uuid4().hex[:6]}."
        env = {**os.environ, "RS_CACHE_DIR": str(cache), "RS_TOPIC_PREFIX": prefix, "RS_METRICS_PORT": "27464"}
        settings = Settings(cache_dir=cache, topic_prefix=prefix, metrics_port=27464)
        problems = load_problems()
        sandbox = make_sandbox(settings, "process")
        try:
            task_list, _ = convert_all(problems, SandboxReference(sandbox), workers=2, verify=False)
        finally:
            sandbox.close()
        TaskRegistry.from_settings(settings).store(task_list)
        tasks = {t.task_id: t for t in task_list}
        sols = solutions(problems, args.generations)
        cli = [sys.executable, "-m", "rewardstream"]
        up = subprocess.run([*cli, "up", "--pipeline", "--concurrency", str(args.concurrency)], env=env, check=False)
        if up.returncode != 0:
            raise SystemExit("could not start the pipeline")
        try:
            direct, combined, e2e, lat = [], [], [], []
            for _ in range(args.repeats):
                direct.append(grading_only(settings, tasks, sols, 2 * args.concurrency, combined=False))
                combined.append(grading_only(settings, tasks, sols, 2 * args.concurrency, combined=True))
                rate, latencies = end_to_end(env, settings, sols)
                e2e.append(rate)
                lat += latencies
        finally:
            subprocess.run([*cli, "down", "--pipeline-only"], env=env, check=False)
    q = statistics.quantiles(lat, n=100)
    d, c, e = statistics.median(direct), statistics.median(combined), statistics.median(e2e)
    slots = 2 * args.concurrency
    print(f"{args.generations} generations x {args.repeats} runs, {slots} sandbox slots, process backend")
    print(f"grading only, as the roles do it (public run; static + hidden run): median {d:.1f} generations/s "
          f"{[round(x, 1) for x in direct]}")  # fmt: skip
    print(f"grading only, one combined run (Grader.grade, reference):          median {c:.1f} generations/s "
          f"{[round(x, 1) for x in combined]}")  # fmt: skip
    print(f"end to end (publish -> reward):                                    median {e:.1f} generations/s "
          f"{[round(x, 1) for x in e2e]}")  # fmt: skip
    print(f"ratio end-to-end / grading as the roles do it: {e / d:.2f}x (target >= 0.7x); "
          f"vs one combined run: {e / c:.2f}x")  # fmt: skip
    print(f"latency publish -> reward: p50 {q[49]:.2f}s p95 {q[94]:.2f}s p99 {q[98]:.2f}s ({len(lat)} generations)")


if __name__ == "__main__":
    main()
