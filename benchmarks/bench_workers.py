"""Worker throughput through Kafka vs the same grading without Kafka (same backend, same concurrency).

    .venv/bin/python benchmarks/bench_workers.py [--generations 300] [--concurrency 2] [--repeats 3]
                                                 [--role executor|verifier] [--backend process|docker]
                                                 [--no-artifacts]

Direct: a thread pool of ``concurrency`` runs the role's grading (``Grader.run_suites`` on the public or
hidden suite) for every generation. Worker: the same generations are published to a fresh topic first, then
one in-process worker of that role (transactions, log records, artifacts in S3 unless --no-artifacts)
processes them; the clock stops when a read_committed consumer has seen every result. Steady state is
measured from the first committed result to the last (consumer-group join and ``init_transactions`` are a
one-time cost of a long-running worker, reported separately as "incl. startup"). Runs alternate
direct/worker so that load drift on a shared machine hits both. Needs Kafka, S3 and the sandbox backend.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bus.clients import make_consumer, make_producer
from bus.metrics import WorkerMetrics
from schemas.backends import BACKENDS, Backend
from schemas.codec import encode
from schemas.events import GenerationEvent
from schemas.settings import Settings
from schemas.tasks import Task
from schemas.topics import catalog, topic_for
from workers.grading import Grader, public_suite
from workers.roles.service import OUTPUT_ROLE, Dependencies, RoleName, run_worker
from workers.sandbox.api import Sandbox
from workers.tasks.humaneval import Problem, SandboxReference, convert_all, load_problems
from workers.tasks.registry import TaskRegistry

PARTITIONS = 3


def generations(problems: list[Problem], n: int) -> list[GenerationEvent]:
    """Canonical and wrong (stub) solutions mixed, every problem in turn."""
    out: list[GenerationEvent] = []
    for i in range(n):
        p = problems[i % len(problems)]
        code = p.reference_code if (i + i // len(problems)) % 2 == 0 else p.prompt + "    raise NotImplementedError\n"
        out.append(GenerationEvent(generation_id=f"g{i}", episode_id=f"g{i}", run_id="bench", task_id=p.task_id,
                                   policy_version="bench", code=code))  # fmt: skip
    return out


def direct(grader: Grader, tasks: dict[str, Task], events: list[GenerationEvent], role: str, concurrency: int) -> float:
    """Seconds to grade every event with a plain thread pool (no Kafka, no S3, no logs)."""

    def one(ev: GenerationEvent) -> None:
        task = tasks[ev.task_id]
        public_tests = public_suite(task)
        suite = task.graded_suite if role == "verifier" or public_tests is None else public_tests
        ran = grader.run_suites(ev.code or "", task.entry_point, [(role, suite)], task.limits, prompt=task.prompt)
        if ran.infra_error:
            raise RuntimeError(ran.infra_error)

    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(one, events))
    return time.perf_counter() - started


def through_kafka(
    settings: Settings, deps: Dependencies, events: list[GenerationEvent], role: RoleName, concurrency: int
) -> tuple[float, float]:
    """(seconds including startup, steady-state seconds from first to last committed result)."""
    from bus.admin import delete_topics, ensure_topics

    prefix = f"rs-bench.{uuid.uuid4().hex[:10]}."
    specs = catalog(prefix, PARTITIONS, 1)
    kafka = settings.kafka_client_config()
    ensure_topics(specs, kafka)
    run_settings = settings.model_copy(update={"topic_prefix": prefix, "topic_partitions": PARTITIONS})
    out_topic = topic_for(OUTPUT_ROLE[role], specs).name
    stop = threading.Event()
    thread: threading.Thread | None = None
    consumer = make_consumer(kafka, f"bench-reader-{uuid.uuid4().hex}")
    try:
        producer = make_producer(kafka)
        for ev in events:
            producer.produce(topic_for("generations", specs).name, key=ev.key(), value=encode(ev))
            producer.poll(0)
        producer.flush(60)
        consumer.subscribe([out_topic])
        started = time.perf_counter()
        thread = threading.Thread(
            target=run_worker, args=(run_settings, role, stop, WorkerMetrics(role)),
            kwargs={"concurrency": concurrency, "deps": deps}, daemon=True,
        )  # fmt: skip
        thread.start()
        seen = 0
        first: float | None = None
        deadline = time.monotonic() + 1800
        while seen < len(events):
            if time.monotonic() > deadline or not thread.is_alive():
                raise RuntimeError(f"worker stopped or timed out after {seen} of {len(events)} results")
            got = [m for m in consumer.consume(500, timeout=0.1) if m.error() is None]
            if got and first is None:
                first = time.perf_counter()
            seen += len(got)
        done = time.perf_counter()
        return done - started, done - (first or started)
    finally:
        stop.set()
        if thread is not None:
            thread.join(60)
        consumer.close()
        delete_topics([s.name for s in specs], kafka)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--generations", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--role", choices=("executor", "verifier"), default="executor")
    parser.add_argument("--backend", choices=BACKENDS, default="process")
    parser.add_argument("--no-artifacts", action="store_true", help="worker does not store code/results in S3")
    args = parser.parse_args()
    backend: Backend = "docker" if args.backend == "docker" else "process"
    role: RoleName = "verifier" if args.role == "verifier" else "executor"

    from workers.sandbox.factory import make_sandbox

    settings = Settings(worker_store_artifacts=not args.no_artifacts, sandbox_backend=backend)
    sandbox: Sandbox = make_sandbox(settings, backend)
    try:
        problems = load_problems()
        tasks, _ = convert_all(problems, SandboxReference(sandbox), workers=args.concurrency)
        by_id = {t.task_id: t for t in tasks}
        events = generations(problems, args.generations)
        grader = Grader(sandbox)
        with tempfile.TemporaryDirectory(prefix="rs-bench-tasks-") as tmp:
            registry = TaskRegistry(Path(tmp))
            registry.store(tasks)
            deps = Dependencies(sandbox=sandbox, registry=registry)
            direct(grader, by_id, events[: 4 * args.concurrency], role, args.concurrency)  # warm-up
            direct_s: list[float] = []
            worker_s: list[float] = []
            worker_steady_s: list[float] = []
            for r in range(args.repeats):
                direct_s.append(direct(grader, by_id, events, role, args.concurrency))
                total, steady = through_kafka(settings, deps, events, role, args.concurrency)
                worker_s.append(total)
                worker_steady_s.append(steady)
                print(
                    f"run {r + 1}: direct {direct_s[-1]:.1f}s, worker {total:.1f}s (steady {steady:.1f}s)", flush=True
                )
    finally:
        sandbox.close()

    n = len(events)
    direct_rate = n / statistics.median(direct_s)
    worker_rate = n / statistics.median(worker_s)
    steady_rate = (n - 1) / statistics.median(worker_steady_s)
    print(
        f"\n{role}, {backend} backend, concurrency {args.concurrency}, {n} generations, {args.repeats} runs "
        f"(medians), artifacts {'off' if args.no_artifacts else 'on'}:\n"
        f"  grading without Kafka:        {direct_rate:6.1f} generations/s\n"
        f"  worker through Kafka, steady: {steady_rate:6.1f} generations/s  ratio {steady_rate / direct_rate:.2f}x\n"
        f"  worker incl. startup:         {worker_rate:6.1f} generations/s  ratio {worker_rate / direct_rate:.2f}x"
    )


if __name__ == "__main__":
    main()
