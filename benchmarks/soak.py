"""Soak: the whole pipeline under a steady mixed load for a long time; does anything leak, lose or duplicate?

    .venv/bin/python benchmarks/soak.py [--minutes 30] [--interval-s 10] [--rate GEN_PER_S | --calibrate-s 30]
        [--load 0.7] [--warmup-minutes 5] [--rss-limit-mb-h 50] [--fd-limit-h 20] [--out DIR] [--concurrency 2]

1. Starts the processes ``rewardstream up --pipeline`` starts (``rewardstream.pipeline``: executor, verifier,
   judge, indexer, reward processor, episode worker, auditor, gateway) in a namespace of its own: a fresh topic
   prefix, bucket, task registry, cache dir (pid files, logs), metrics and gateway ports. It needs the services
   (Kafka, S3, OpenSearch) and never starts or stops them.
2. Capacity: without ``--rate``, a calibration of ``--calibrate-s`` seconds sends the mix (``soak_load.MIX``:
   one-shot generations, agent episodes, gateway ``/run_code`` calls) closed-loop from 64 clients and measures
   the one-shot rewards per second it sustains (the first fifth of the window left out); the soak then paces
   ``--load`` (0.7) of that. ``--rate`` gives the generations/s directly and skips the calibration.
3. Every ``--interval-s`` a CSV row: rewards/s, steps/s, run_code/s, p99 latency of each (client side: publish to
   reward in the SDK, action to observation, HTTP request to answer), the paced backlog, and per process RSS
   (MiB), open fds and consumer lag (its ``rewardstream_consumer_lag`` sum). A PNG plot of the same at the end.
4. Verdict: every generation exactly one reward and every action exactly one observation (read from the topics:
   ``soak_check``); no client error; per process, the least-squares slope after ``--warmup-minutes`` of RSS
   (MB/hour) and fds (per hour) under the limits (a failure when the slope over each half of that window is
   over the limit too: a leak grows in both, a one-time step in one). One JSON object last on stdout; exit 1
   on any failure.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as ``python benchmarks/soak.py``: ``benchmarks.*`` from the root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_episodes import task as episode_task
from benchmarks.capacity_kafka import call_task
from benchmarks.latency import summary
from benchmarks.soak_check import exactly_once
from benchmarks.soak_load import MIX, MixedLoad, Paced, closed_loop
from benchmarks.soak_plot import plot
from benchmarks.soak_probe import ProcessProbe, probes, slope_per_hour
from infra.local.paths import shared_cache
from rewardstream.cli.replay import delete_namespace, free_port_base
from rewardstream.pipeline import Pipeline, pipeline_processes
from schemas.settings import Settings
from workers.artifacts import minio_client, remove_bucket
from workers.logs.service import opensearch_client
from workers.tasks.registry import TaskRegistry

PARTITIONS = 6
#: Share of the calibration window left out of the capacity (the clients' ramp-up, first answers).
CALIBRATION_RAMP = 0.2


@contextmanager
def namespace(tmp: Path, concurrency: int) -> Iterator[tuple[Settings, Pipeline]]:
    """The pipeline's processes on topics, bucket, registry, cache and ports of their own; all removed after.

    The processes read their settings from the environment they start with, and so does this one's SDK."""
    main_cache = Settings().local.cache_dir
    tag = uuid.uuid4().hex[:8]
    prefix = f"rs-soak-{tag}."
    count = len(pipeline_processes(Settings()))  # a metrics port each (the gateway's is its own), + the gateway
    base = free_port_base("127.0.0.1", count)
    cache = shared_cache(tmp, main_cache)
    os.environ.update({
        "RS_TOPIC_PREFIX": prefix, "RS_TOPIC_PARTITIONS": str(PARTITIONS), "RS_CACHE_DIR": str(cache),
        "RS_TASKS_DIR": str(tmp / "tasks"), "RS_S3_BUCKET": f"rs-soak-{tag}", "RS_METRICS_PORT": str(base),
        "RS_GATEWAY_PORT": str(base + count - 1), "RS_OPENSEARCH_INDEX_PREFIX": prefix.rstrip("."),
        "RS_OPENSEARCH_REPLICAS": "0",
    })  # fmt: skip
    settings = Settings()
    TaskRegistry(settings.tasks_dir).store([call_task(), episode_task(max_turns=8)])
    s3 = minio_client(settings)
    s3.make_bucket(settings.s3.bucket)
    pipeline = Pipeline(settings, concurrency)
    try:
        pipeline.start(report=lambda line: print(line, file=sys.stderr))
        yield settings, pipeline
    finally:
        pipeline.stop()
        delete_namespace(settings, prefix)
        remove_bucket(s3, settings.s3.bucket)
        _delete_log_indices(settings)


def _delete_log_indices(settings: Settings) -> None:
    """The run's log indices and their template (the ISM policy, where the cluster has ISM, expires alone)."""
    client = opensearch_client(settings)
    prefix = settings.opensearch.index_prefix
    for name in client.indices.get(index=f"{prefix}-*", ignore_unavailable=True):
        client.indices.delete(index=name, ignore_unavailable=True)
    client.indices.delete_index_template(name=f"{prefix}-template", ignore=[404])


def calibrate(load: MixedLoad, seconds: float) -> float:
    """One-shot rewards/s the mix sustains closed-loop, counted between the ramp and the window's end (what
    the last operations wait for after it does not count)."""
    started = time.monotonic()
    closed_loop(load, seconds)
    window = (started + CALIBRATION_RAMP * seconds, started + seconds)
    rewards = [s for s in load.since(window[0]) if s.kind == "reward" and s.at <= window[1]]
    # an episode's reward is one of MIX["episode"] per MIX["generation"] one-shot rewards
    one_shot = len(rewards) * MIX["generation"] / (MIX["generation"] + MIX["episode"])
    return one_shot / (window[1] - window[0])


def row(t_s: float, window: list[Any], span_s: float, paced: Paced, procs: list[ProcessProbe]) -> dict[str, Any]:
    """One CSV row: the window's rates and p99s, the backlog, each process's RSS, fds and lag."""
    out: dict[str, Any] = {"t_s": round(t_s, 1), "backlog": paced.backlog}
    for kind in ("reward", "step", "run_code"):
        ms = [s.latency_s * 1e3 for s in window if s.kind == kind]
        out[f"{kind}s_per_s"] = round(len(ms) / span_s, 2)
        out[f"{kind}_p99_ms"] = summary(ms)["p99"] if ms else ""
    lags = []
    for proc in procs:
        rss, fds = proc.rss_mb_and_fds()
        lag = proc.lag()
        out |= {f"rss_mb_{proc.name}": round(rss, 1), f"fds_{proc.name}": fds, f"lag_{proc.name}": lag}
        lags.append(lag or 0)
    out["lag_total"] = sum(lags)
    return out


def soak(
    load: MixedLoad, rate: float, args: argparse.Namespace, procs: list[ProcessProbe], csv_path: Path
) -> list[dict[str, Any]]:
    """Pace ``rate`` for ``args.minutes``, a row every ``args.interval_s``; then wait for every answer."""
    for proc in procs:
        proc.begin()
    rows: list[dict[str, Any]] = []
    paced = Paced(load, rate)
    started = last = time.monotonic()
    end = started + args.minutes * 60
    with csv_path.open("w", newline="") as out:
        writer: csv.DictWriter[str] | None = None
        while (now := time.monotonic()) < end:
            time.sleep(max(0.0, min(last + args.interval_s, end) - now))
            now = time.monotonic()
            rows.append(row(now - started, load.since(last), now - last, paced, procs))
            last = now
            if writer is None:
                writer = csv.DictWriter(out, fieldnames=list(rows[-1]))
                writer.writeheader()
            writer.writerow(rows[-1])
            out.flush()
            print(json.dumps(rows[-1]), file=sys.stderr)
    paced.stop()
    return rows


def slopes(rows: list[dict[str, Any]], procs: list[ProcessProbe], warmup_s: float) -> dict[str, dict[str, Any]]:
    """Per process: RSS MB/hour and fds/hour, least squares over the rows after the warm-up, and over each half
    of them (``*_halves``): a leak grows in both halves, a one-time step (a lazy start, a first connection)
    in one only."""
    kept = [r for r in rows if r["t_s"] >= warmup_s]
    half = len(kept) // 2
    out = {}
    for p in procs:
        fit: dict[str, Any] = {}
        for metric, unit in ((f"rss_mb_{p.name}", "rss_mb"), (f"fds_{p.name}", "fds")):
            parts = [kept, kept[:half], kept[half:]]
            fitted = [slope_per_hour([r["t_s"] for r in part], [float(r[metric]) for r in part]) for part in parts]
            fit[f"{unit}_per_h"] = round(fitted[0], 2)
            fit[f"{unit}_per_h_halves"] = [round(x, 2) for x in fitted[1:]]
            fit[f"{unit}_last"] = kept[-1][metric] if kept else None
        fit["members_exited"] = p.exited()
        out[p.name] = fit
    return out


def growing(fit: dict[str, Any], unit: str, limit: float) -> bool:
    """The slope over the whole fit and over each of its halves above ``limit``: growth that persists."""
    return bool(fit[f"{unit}_per_h"] > limit and min(fit[f"{unit}_per_h_halves"]) > limit)


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="length of the paced soak")
    parser.add_argument("--interval-s", type=float, default=10.0, help="seconds between two CSV rows")
    parser.add_argument("--rate", type=float, help="one-shot generations/s to pace (skips the calibration)")
    parser.add_argument("--calibrate-s", type=float, default=30.0, help="length of the capacity calibration")
    parser.add_argument("--load", type=float, default=0.7, help="share of the calibrated capacity to pace")
    parser.add_argument("--warmup-minutes", type=float, help="rows left out of the slopes (default: min(5, 1/3))")
    parser.add_argument("--rss-limit-mb-h", type=float, default=50.0, help="max RSS slope per process")
    parser.add_argument("--fd-limit-h", type=float, default=20.0, help="max open-fds slope per process")
    parser.add_argument("--concurrency", type=int, default=2, help="sandbox runs per worker")
    parser.add_argument("--out", type=Path, default=Path("soak-out"), help="directory of soak.csv and soak.png")
    args = parser.parse_args(argv)
    if args.minutes <= 0 or args.interval_s <= 0 or not 0 < args.load <= 1:
        parser.error("--minutes and --interval-s must be positive and --load in (0, 1]")
    if args.warmup_minutes is None:
        args.warmup_minutes = min(5.0, args.minutes / 3)
    if args.warmup_minutes >= args.minutes:
        parser.error(
            f"--warmup-minutes ({args.warmup_minutes:g}) leaves nothing of --minutes ({args.minutes:g}) to fit"
        )
    return args


def verdict(
    args: argparse.Namespace, load: MixedLoad, rows: list[dict[str, Any]], fit: dict[str, Any], once: dict[str, Any]
) -> list[str]:
    """What failed, one line each (empty: the soak passed)."""
    failures = [f"{len(load.errors)} client errors, first: {load.errors[0]}"] if load.errors else []
    if not once["ok"]:
        failures.append("lost, duplicate or undecodable answers: see exactly_once")
    for name, s in fit.items():
        for unit, limit in (("rss_mb", args.rss_limit_mb_h), ("fds", args.fd_limit_h)):
            if growing(s, unit, limit):
                whole, halves = s[f"{unit}_per_h"], s[f"{unit}_per_h_halves"]
                failures.append(f"{name}: {unit} grows {whole}/h (halves {halves}) > {limit:g}/h")
    if not any(r["rewards_per_s"] for r in rows):
        failures.append("no reward in any window")
    return failures


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    with (
        tempfile.TemporaryDirectory(prefix="rs-soak-") as tmp,
        namespace(Path(tmp), args.concurrency) as (settings, pipeline),
    ):
        procs = probes(pipeline)
        gateway = next(s["endpoint"] for s in pipeline.status().values() if "endpoint" in s)
        load = MixedLoad(settings, gateway, f"soak-{uuid.uuid4().hex[:8]}")
        try:
            capacity = None if args.rate else calibrate(load, args.calibrate_s)
            rate = args.rate or args.load * (capacity or 0)
            print(f"capacity {capacity} generations/s; pacing {rate:.2f}/s", file=sys.stderr)
            rows = soak(load, rate, args, procs, args.out / "soak.csv")
        finally:
            load.close()
        fit = slopes(rows, procs, args.warmup_minutes * 60)  # while the processes run: who exited is in it
        once = exactly_once(settings)
    plot(rows, [p.name for p in procs], args.warmup_minutes * 60, args.out / "soak.png")
    failures = verdict(args, load, rows, fit, once)
    limits = {"rss_mb_per_h": args.rss_limit_mb_h, "fds_per_h": args.fd_limit_h, "warmup_minutes": args.warmup_minutes}
    print(json.dumps({
        "minutes": args.minutes, "capacity_gen_per_s": capacity and round(capacity, 2),
        "rate_gen_per_s": round(rate, 2), "mix": MIX, "operations": load.started, "answers": len(load.samples),
        "errors": len(load.errors), "limits": limits,
        "slopes": fit, "exactly_once": once, "csv": str(args.out / "soak.csv"), "png": str(args.out / "soak.png"),
        "failures": failures, "ok": not failures,
    }))  # fmt: skip
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
