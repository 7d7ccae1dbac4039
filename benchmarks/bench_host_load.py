"""Verdicts and throughput on an idle host vs one with two busy loops per core.

    .venv/bin/python -m benchmarks.bench_host_load [--rounds 3] [--copies 2] [--concurrency 6]
                                                   [--backend process|docker] [--no-pipeline] [--json OUT]

1. ``rewardstream grade`` as the user runs it (a whole process, start-up included) on a corpus of right and
   wrong solutions in eight languages (compiled, JIT, interpreted; ``--copies`` of each), idle and loaded in
   alternation for ``--rounds`` rounds. Reported: verdict agreement with the expected verdicts (right 1.0,
   wrong 0.0; must be 100%, and every case's status must equal the idle run's), ``sandbox_error`` count,
   median wall time of each condition and the throughput ratio (the cost of the load), and what the runs
   waited for a CPU.
2. The same corpus through a verifier worker (the real worker loop, Kafka, its /metrics endpoint) on the
   loaded host: /metrics is scraped every second while it runs, and the contention series
   (``rewardstream_sandbox_wait_seconds``, ``rewardstream_host_retries_total``) are reported as seen there.

Only trusted code runs unsandboxed here: the busy loops. Needs the sandbox backend (and Kafka for part 2).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from schemas.backends import BACKENDS
from tests.sandbox.busy_host import busy_host
from tests.sandbox.language_programs import eight_case_sum_task, right_and_wrong

TASK = eight_case_sum_task("bench/sum")
BIN = Path(sys.executable).parent


def grade_cli(workdir: Path, backend: str, concurrency: int) -> tuple[float, dict[str, dict[str, Any]]]:
    """(wall seconds, results by generation) of one ``rewardstream grade`` process over the corpus."""
    out = workdir / f"out-{uuid.uuid4().hex[:6]}.jsonl"
    argv = [str(BIN / "rewardstream"), "grade", "--tasks", str(workdir / "tasks.jsonl"), "--solutions",
            str(workdir / "solutions.jsonl"), "--out", str(out), "--concurrency", str(concurrency),
            "--backend", backend]  # fmt: skip
    started = time.perf_counter()
    subprocess.run(argv, check=False, capture_output=True, timeout=3600)
    wall = time.perf_counter() - started
    results = [json.loads(line) for line in out.read_text().splitlines()]
    return wall, {r["generation_id"]: r for r in results}


def expected(gid: str) -> float:
    return 1.0 if "-right-" in gid else 0.0


def case_statuses(result: dict[str, Any]) -> str:
    return json.dumps({k: [c["status"] for c in v] for k, v in (result.get("cases") or {}).items()}, sort_keys=True)


def metrics_of(port: int) -> dict[str, float]:
    """The contention series of a worker's /metrics endpoint, summed over labels."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    wanted = ("rewardstream_sandbox_wait_seconds_sum", "rewardstream_sandbox_wait_seconds_count",
              "rewardstream_host_retries_total", "rewardstream_processed_total")  # fmt: skip
    found = dict.fromkeys(wanted, 0.0)
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in found:
            found[name] += float(line.rsplit(" ", 1)[1])
    return found


def _publish(kafka: dict[str, Any], topic: str, lines: list[dict[str, str]]) -> None:
    from bus.clients import make_producer
    from schemas.codec import encode
    from schemas.events import GenerationEvent

    producer = make_producer(kafka)
    for line in lines:
        event = GenerationEvent.model_validate(
            {**line, "episode_id": line["generation_id"], "run_id": "bench", "policy_version": "bench"}
        )
        producer.produce(topic, key=event.key(), value=encode(event))
    producer.flush(60)


def _collect(consumer: Any, want: int, port: int) -> tuple[list[dict[str, Any]], list[dict[str, float]], float]:
    """(the verdicts, the /metrics scrapes, wall seconds) until ``want`` verdicts came, scraping every second."""
    started = time.perf_counter()
    verdicts: list[dict[str, Any]] = []
    scrapes: list[dict[str, float]] = []
    next_scrape = 0.0
    while len(verdicts) < want and time.perf_counter() - started < 1800:
        verdicts += [json.loads(m.value() or b"{}") for m in consumer.consume(100, timeout=0.2) if m.error() is None]
        if time.perf_counter() >= next_scrape:
            scrapes.append({"t": time.perf_counter() - started, **metrics_of(port)})
            next_scrape = time.perf_counter() + 1.0
    wall = time.perf_counter() - started
    scrapes.append({"t": wall, **metrics_of(port)})
    return verdicts, scrapes, wall


def pipeline(workdir: Path, backend: str, concurrency: int, lines: list[dict[str, str]]) -> dict[str, Any]:
    """The corpus through a verifier worker on the loaded host; its /metrics scraped every second."""
    from bus.admin import delete_topics, ensure_topics
    from bus.clients import make_consumer
    from bus.metrics import WorkerMetrics, serve
    from schemas.settings import Settings
    from schemas.tasks import Task
    from schemas.topics import catalog, topic_for
    from workers.roles.service import Dependencies, run_worker
    from workers.sandbox.factory import make_sandbox
    from workers.tasks.registry import TaskRegistry

    settings = Settings(sandbox_backend=backend, worker_store_artifacts=False)
    prefix = f"rs-bench-load.{uuid.uuid4().hex[:8]}."
    specs = catalog(prefix, 2, 1)
    kafka = settings.kafka_client_config()
    ensure_topics(specs, kafka)
    registry = TaskRegistry(workdir / "registry")
    registry.store([Task.model_validate(TASK)])
    sandbox = make_sandbox(settings, "docker" if backend == "docker" else "process")
    metrics = WorkerMetrics("verifier")
    server = serve(metrics, "127.0.0.1", 0)
    stop = threading.Event()
    consumer = make_consumer(kafka, f"bench-load-{uuid.uuid4().hex}")
    try:
        _publish(kafka, topic_for("generations", specs).name, lines)
        consumer.subscribe([topic_for("verdicts", specs).name])
        run_settings = settings.model_copy(update={"topic_prefix": prefix, "topic_partitions": 2})
        deps = Dependencies(sandbox=sandbox, registry=registry)
        with busy_host():
            worker = threading.Thread(target=run_worker, args=(run_settings, "verifier", stop, metrics),
                                      kwargs={"concurrency": concurrency, "deps": deps}, daemon=True)  # fmt: skip
            worker.start()
            verdicts, scrapes, wall = _collect(consumer, len(lines), server.port)
    finally:
        stop.set()
        consumer.close()
        server.close()
        sandbox.close()
        delete_topics([s.name for s in specs], kafka)
    wrong = [v["generation_id"] for v in verdicts if (v["passed"] == v["total"]) != (expected(v["generation_id"]) > 0)]
    during = [s for s in scrapes if s["rewardstream_sandbox_wait_seconds_count"] > 0]
    return {
        "generations": len(lines),
        "verdicts": len(verdicts),
        "wrong_verdicts": wrong,
        "sandbox_errors": sum(1 for v in verdicts if v["run"]["status"] == "sandbox_error"),
        "wall_s": round(wall, 1),
        "scrapes": len(scrapes),
        "first_scrape_with_waits_at_s": round(during[0]["t"], 1) if during else None,
        "final_metrics": scrapes[-1],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--copies", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=6)
    parser.add_argument("--backend", choices=BACKENDS, default="process")
    parser.add_argument("--no-pipeline", action="store_true", help="skip part 2 (needs Kafka)")
    parser.add_argument("--json", type=Path, help="write the figures here too")
    args = parser.parse_args()
    lines = right_and_wrong("bench/sum", args.copies)
    report: dict[str, Any] = {"backend": args.backend, "solutions": len(lines), "concurrency": args.concurrency}
    with tempfile.TemporaryDirectory(prefix="rs-bench-load-") as tmp:
        workdir = Path(tmp)
        (workdir / "tasks.jsonl").write_text(json.dumps(TASK) + "\n")
        (workdir / "solutions.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
        walls: dict[str, list[float]] = {"idle": [], "loaded": []}
        agree = total = errors = 0
        waited: list[float] = []
        for r in range(args.rounds):
            idle_s, idle = grade_cli(workdir, args.backend, args.concurrency)
            with busy_host():
                loaded_s, loaded = grade_cli(workdir, args.backend, args.concurrency)
            walls["idle"].append(idle_s)
            walls["loaded"].append(loaded_s)
            for gid, result in loaded.items():
                total += 1
                same = case_statuses(result) == case_statuses(idle.get(gid, {}))
                agree += int(same and result["reward"] == expected(gid) == idle[gid]["reward"])
                errors += int(result["status"] == "sandbox_error")
                waited.append(float(result["run"]["wait_ms"]))
            print(f"round {r + 1}: idle {idle_s:.1f} s, loaded {loaded_s:.1f} s", flush=True)
        idle_med, loaded_med = statistics.median(walls["idle"]), statistics.median(walls["loaded"])
        report["cli"] = {
            "rounds": args.rounds,
            "verdict_agreement_pct": round(100.0 * agree / max(total, 1), 2),
            "sandbox_errors": errors,
            "idle_wall_s_median": round(idle_med, 1),
            "loaded_wall_s_median": round(loaded_med, 1),
            "throughput_idle_per_s": round(len(lines) / idle_med, 3),
            "throughput_loaded_per_s": round(len(lines) / loaded_med, 3),
            "loaded_over_idle_throughput": round(idle_med / loaded_med, 3),
            "run_wait_ms_median": round(statistics.median(waited), 1) if waited else 0.0,
            "run_wait_ms_max": round(max(waited), 1) if waited else 0.0,
        }
        if not args.no_pipeline:
            report["pipeline"] = pipeline(workdir, args.backend, args.concurrency, lines)
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
