"""Step overhead on a per-task image against the toolchain image, on both backends: an image task's step
(docker: ``run_image_step``; process: ``run_overlay_step``) next to a workspace task's ``run_step`` on the same
backend, the same actions, alternating so all see the same load.

Why: a Harbor task's step is a fresh container of its image (docker) or a fresh overlay of its unpacked tree
under bubblewrap (process) with the episode's delta restored and read back; a workspace task's is a run in the
docker backend's pool or the process backend's fork server. This says what the per-task image costs per step,
with an empty delta and with one that holds a ``pip install``-sized tree.

Run: ``.venv/bin/python -m benchmarks.bench_image_steps [--runs N] [--delta-files N]`` (needs dockerd and the
local ``python:3.11-slim``: ``rewardstream sandbox bases --build``). Prints one JSON object (medians, p90s, ms).
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.bench_episode_step import workspace
from rewardstream.cli.task_images import task_image_source
from schemas.settings import Settings
from tests.sandbox.image_task import hello
from workers.containers.delta import EMPTY, DeltaCaps, Entry, pack_delta, read_delta
from workers.containers.image_step import run_image_step
from workers.episodes.snapshot import Caps
from workers.episodes.step import StepAction, StepLimits, run_step
from workers.overlays.host import OverlayHost
from workers.overlays.overlay_step import run_overlay_step
from workers.sandbox.api import SandboxStatus
from workers.sandbox.docker_backend import docker_client
from workers.sandbox.factory import make_sandbox


def _summary(ms: list[float]) -> dict[str, float]:
    ordered = sorted(ms)
    return {"median": round(statistics.median(ordered), 1), "p90": round(ordered[int(0.9 * (len(ordered) - 1))], 1)}


def installed(files: int) -> bytes:
    """A delta like a small ``pip install``: ``files`` modules of 2 KB under site-packages."""
    top = "/usr/local/lib/python3.11/dist-packages/pkg"
    entries = [Entry(top, "dir")] + [Entry(f"{top}/m{i}.py", "file", data=b"x = 1\n" * 340) for i in range(files)]
    return pack_delta(entries, []).data


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--delta-files", type=int, default=200)
    args = parser.parse_args()
    settings = Settings()
    client = docker_client(settings)
    task = hello(Path(tempfile.mkdtemp(prefix="bench-image-")))
    image = task_image_source(settings, client)(task)
    assert task.environment is not None
    deltas = {"empty": EMPTY, "installed": read_delta(installed(args.delta_files))}
    sandboxes = {"docker": make_sandbox(settings, "docker"), "process": make_sandbox(settings, "process")}
    overlays = OverlayHost(settings, client)
    steppers = {
        "image": functools.partial(run_image_step, client),
        "overlay": functools.partial(run_overlay_step, overlays),
    }
    snap = workspace(20, 2000)
    actions = {"true": StepAction.exec(["true"]), "write": StepAction.exec(["sh", "-c", "echo x > new"])}
    series: dict[str, list[float]] = {}
    try:
        for i in range(args.runs + 1):  # the first round warms the pool and the page cache, and is not counted
            for name, action in actions.items():
                for backend, sandbox in sandboxes.items():
                    t0 = time.perf_counter()
                    outcome = run_step(sandbox, snap, action, Caps())
                    took = (time.perf_counter() - t0) * 1e3
                    assert outcome.status == SandboxStatus.OK, outcome.reason
                    if i:
                        series.setdefault(f"toolchain_{backend}_{name}", []).append(took)
                for label, delta in deltas.items():
                    for kind, step in steppers.items():
                        t0 = time.perf_counter()
                        got = step(image, task.environment, delta, action, DeltaCaps(), StepLimits())
                        took = (time.perf_counter() - t0) * 1e3
                        assert got.status == SandboxStatus.OK, got.reason
                        if i:
                            series.setdefault(f"{kind}_{label}_{name}", []).append(took)
    finally:
        for sandbox in sandboxes.values():
            sandbox.close()
        overlays.close()
        client.images.remove(image, force=True, noprune=True)
        client.close()
    out: dict[str, object] = {"runs": args.runs, "delta_files": args.delta_files}
    out |= {f"{name}_ms": _summary(ms) for name, ms in series.items()}
    docker_base = statistics.median(series["toolchain_docker_true"])
    process_base = statistics.median(series["toolchain_process_true"])
    out["image_empty_true_ratio"] = round(statistics.median(series["image_empty_true"]) / docker_base, 2)
    out["overlay_empty_true_ratio"] = round(statistics.median(series["overlay_empty_true"]) / process_base, 2)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
