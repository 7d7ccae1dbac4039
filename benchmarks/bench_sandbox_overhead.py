"""Per-run overhead of each sandbox backend, and the worker's peak RSS while a program floods output.

Usage: python -m benchmarks.bench_sandbox_overhead [--runs N] [--flood-only]
Prints one JSON object. The flood figure is this process's own ru_maxrss before/after a run that writes
~1 GB to stdout with a 1 MiB cap: capture is bounded, so the delta stays around the cap.
"""

from __future__ import annotations

import argparse
import json
import resource
import time

from schemas.backends import Backend
from schemas.settings import Settings
from workers.sandbox.api import Sandbox, SandboxSpec
from workers.sandbox.docker_backend import DockerSandbox, docker_client
from workers.sandbox.factory import make_sandbox

FLOOD = "import os\nb = b'x' * (1 << 20)\nfor _ in range(1024): os.write(1, b)"


def _time_runs(sandbox: Sandbox, runs: int) -> float:
    spec = SandboxSpec(argv=("python3", "-c", "pass"))
    sandbox.run(spec)  # warm-up (pool fill, page cache)
    t0 = time.perf_counter()
    for _ in range(runs):
        result = sandbox.run(spec)
        assert result.status.value == "ok", result
    return (time.perf_counter() - t0) * 1e3 / runs


def flood_rss(backend: Backend) -> dict[str, float | str]:
    """Worker peak RSS (KiB) before and after one flooding run."""
    sandbox = make_sandbox(Settings(), backend)
    try:
        sandbox.run(SandboxSpec(argv=("python3", "-c", "pass")))
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        result = sandbox.run(SandboxSpec(argv=("python3", "-c", FLOOD), output_limit_bytes=1 << 20, timeout_s=60))
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    finally:
        sandbox.close()
    return {"status": result.status.value, "stdout_kb": len(result.stdout) / 1024, "rss_before_kb": before,
            "rss_after_kb": after}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--flood-only", action="store_true")
    args = parser.parse_args()
    out: dict[str, object] = {"flood_process": flood_rss("process"), "flood_docker": flood_rss("docker")}
    if not args.flood_only:
        settings = Settings()
        process = make_sandbox(settings, "process")
        try:
            out["process_ms_per_run"] = round(_time_runs(process, args.runs), 1)
        finally:
            process.close()
        warm = make_sandbox(settings, "docker")
        try:
            out["docker_warm_ms_per_run"] = round(_time_runs(warm, args.runs), 1)
        finally:
            warm.close()
        client = docker_client(settings)
        naive = DockerSandbox(settings, client, settings.sandbox.image, pool_size=0)
        try:
            out["docker_naive_ms_per_run"] = round(_time_runs(naive, max(5, args.runs // 3)), 1)
        finally:
            naive.close()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
