"""``POST /run_code`` through the gateway, next to the same sandbox call made directly.

    .venv/bin/python -m benchmarks.bench_gateway [--runs 200] [--slots 2] [--concurrent 16]

Needs the local services (``rewardstream up``). One run, printed as one JSON object:

* **latency**: ``print(1)`` in python as the ``sandbox-fusion`` client's HTTP request to the gateway (the
  gateway produces a run request, the executor process consumes it, runs it in its sandbox, commits the reply
  in its transaction, the gateway reads it from its partition) next to ``run_source`` of the same program in
  this process, on the same backend, alternating call by call so both see the same load. p50/p99 of each;
  the gateway's added latency is their difference.
* **throughput**: ``--concurrent`` clients at once against the executor's ``--slots`` sandbox slots, next to
  the same number of direct calls on a pool of ``--slots`` threads: runs/s each.

Its own topic prefix (removed afterwards), an executor and a gateway as processes with default settings but
for those.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import requests

from benchmarks.latency import summary, timed
from bus.admin import delete_topics, ensure_topics
from schemas.settings import Settings
from schemas.topics import catalog
from workers.runs.program import run_source
from workers.sandbox.api import Sandbox
from workers.sandbox.factory import make_sandbox

PARTITIONS = 6
PROGRAM = "print(1)"


def via_gateway(session: requests.Session, url: str) -> None:
    """One /run_code as the sandbox-fusion client sends it; fails loudly on anything but Success."""
    body = {"code": PROGRAM, "language": "python", "compile_timeout": 10, "run_timeout": 10, "stdin": None,
            "files": {}, "fetch_files": []}  # fmt: skip
    answer = session.post(f"{url}/run_code", json=body, timeout=120)
    answer.raise_for_status()
    if answer.json()["status"] != "Success":
        raise RuntimeError(f"/run_code did not succeed: {answer.text[:500]}")


def direct(sandbox: Sandbox) -> None:
    """The same run, in this process: the function the executor calls."""
    done = run_source(sandbox, "python", PROGRAM, stdin=None, files={}, fetch_files=[], compile_timeout_s=10,
                      run_timeout_s=10, memory_mb=None)  # fmt: skip
    if done.run is None or done.run.status != "ok":
        raise RuntimeError(f"direct run failed: {done}")


def latency(url: str, sandbox: Sandbox, runs: int) -> dict[str, Any]:
    """Both ways, alternating; a few warm-up calls of each first."""
    with requests.Session() as session:
        for _ in range(3):
            via_gateway(session, url)
            direct(sandbox)
        gateway_ms, direct_ms = [], []
        for _ in range(runs):
            gateway_ms.append(timed(lambda: via_gateway(session, url)))
            direct_ms.append(timed(lambda: direct(sandbox)))
    g, d = summary(gateway_ms), summary(direct_ms)
    return {
        "gateway_ms": g,
        "direct_ms": d,
        "added_ms": {"p50": round(g["p50"] - d["p50"], 2), "p99": round(g["p99"] - d["p99"], 2)},
    }


def throughput(url: str, sandbox: Sandbox, runs: int, concurrent: int, slots: int) -> dict[str, Any]:
    """``runs`` requests from ``concurrent`` clients, and ``runs`` direct calls on ``slots`` threads."""
    session = requests.Session()
    adapter = requests.adapters.HTTPAdapter(pool_connections=concurrent, pool_maxsize=concurrent)
    session.mount("http://", adapter)
    with ThreadPoolExecutor(concurrent) as pool:
        t0 = time.perf_counter()
        list(pool.map(lambda _n: via_gateway(session, url), range(runs)))
        gateway_s = time.perf_counter() - t0
    with ThreadPoolExecutor(slots) as pool:
        t0 = time.perf_counter()
        list(pool.map(lambda _n: direct(sandbox), range(runs)))
        direct_s = time.perf_counter() - t0
    session.close()
    return {
        "runs": runs,
        "concurrent_clients": concurrent,
        "slots": slots,
        "gateway_runs_per_s": round(runs / gateway_s, 1),
        "direct_runs_per_s": round(runs / direct_s, 1),
        "ratio": round(direct_s / gateway_s, 2),
    }


@contextmanager
def gateway_pipeline(settings: Settings, slots: int, logs: Path) -> Iterator[str]:
    """Topics of this run, an executor and a gateway as processes; yields the gateway's base URL."""
    kafka = settings.kafka_client_config()
    specs = catalog(settings.kafka.topic_prefix, PARTITIONS, 1)
    ensure_topics(specs, kafka)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "RS_TOPIC_PREFIX": settings.kafka.topic_prefix, "RS_TOPIC_PARTITIONS": str(PARTITIONS),
           "RS_METRICS_PORT": "0", "RS_WORKER_STORE_ARTIFACTS": "false", "RS_GATEWAY_PORT": str(port)}  # fmt: skip
    procs = []
    try:
        for name, argv in (("executor", ["worker", "executor", "--concurrency", str(slots)]), ("gateway", ["serve"])):
            with (logs / f"{name}.log").open("wb") as out:
                procs.append(subprocess.Popen([sys.executable, "-m", "rewardstream", *argv], env=env, stdout=out,
                                              stderr=subprocess.STDOUT))  # fmt: skip
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while not _healthy(url):
            if time.monotonic() > deadline or procs[-1].poll() is not None:
                raise RuntimeError(f"the gateway did not come up: {(logs / 'gateway.log').read_text()[-2000:]}")
            time.sleep(0.2)
        yield url
    finally:
        for proc in procs:
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
        delete_topics([s.name for s in specs], kafka)


def _healthy(url: str) -> bool:
    try:
        return requests.get(f"{url}/health", timeout=2).status_code == 200
    except (requests.ConnectionError, requests.Timeout):
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200, help="latency samples of each way")
    parser.add_argument("--slots", type=int, default=2, help="the executor's sandbox slots (--concurrency)")
    parser.add_argument("--concurrent", type=int, default=16, help="clients at once in the throughput part")
    args = parser.parse_args()
    settings = Settings(topic_prefix=f"bench-gw-{uuid.uuid4().hex[:8]}.")
    sandbox = make_sandbox(settings, "process")
    try:
        with tempfile.TemporaryDirectory() as tmp, gateway_pipeline(settings, args.slots, Path(tmp)) as url:
            result = {
                "backend": sandbox.name,
                "program": PROGRAM,
                "latency": latency(url, sandbox, args.runs),
                "throughput": throughput(url, sandbox, args.runs, args.concurrent, args.slots),
            }
    finally:
        sandbox.close()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
