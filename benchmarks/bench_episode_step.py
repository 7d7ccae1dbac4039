"""Step overhead: ``run_step(exec true)`` on a small workspace next to a plain sandbox run of ``true``.

Why: an agent episode is many steps and each is one sandbox run; what the step adds (the runner, restoring
and packing the workspace, re-validating the tar on the host) must stay small next to the run itself.
Runs alternate on one backend instance so all see the same machine load: plain ``true``, plain
``python3 -I -S -B -c pass`` (where the runner starts from), a step that leaves the workspace unchanged
(``true``: no tar comes back) and one that changes it (a new tar, re-validated on the host). Medians and
p90s in ms, the overheads against plain ``true``, and the host-side re-validation alone.

Run: ``.venv/bin/python -m benchmarks.bench_episode_step [--backend process|docker] [--runs N] [--files N]
[--depth N]``.
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from schemas.backends import BACKENDS
from schemas.settings import Settings
from workers.episodes.snapshot import Caps, pack
from workers.episodes.step import StepAction, canonical, run_step, workdir_limits
from workers.sandbox.api import SandboxSpec, SandboxStatus
from workers.sandbox.factory import make_sandbox


def workspace(files: int, size: int, depth: int = 0) -> bytes:
    """A small project: ``files`` files of ``size`` bytes in a few directories, and below them a chain of
    ``depth`` directories (``d/d/...``) with a file at every level (issue 24: its restore was once cubic)."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for i in range(files):
            path = root / f"pkg{i % 4}" / f"mod{i}.py"
            path.parent.mkdir(exist_ok=True)
            path.write_bytes(b"x = 1\n" * (size // 6))
        level = root
        for _ in range(depth):
            level /= "d"
            level.mkdir()
            (level / "f.py").write_bytes(b"x = 1\n")
        return pack(root).data


def _summary(ms: list[float]) -> dict[str, float]:
    ordered = sorted(ms)
    return {
        "median": round(statistics.median(ordered), 2),
        "p90": round(ordered[int(0.9 * (len(ordered) - 1))], 2),
        "min": round(ordered[0], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", default="process", choices=BACKENDS)
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--size", type=int, default=2000)
    parser.add_argument("--depth", type=int, default=0, help="a chain of this many directories in the workspace")
    args = parser.parse_args()
    caps = Caps()
    snap = workspace(args.files, args.size, args.depth)
    size_mb, inodes = workdir_limits(caps)
    plain_true = SandboxSpec(argv=("true",), workdir_size_mb=size_mb, workdir_inodes=inodes)
    plain_python = SandboxSpec(argv=("python3", "-I", "-S", "-B", "-c", "pass"), workdir_size_mb=size_mb,
                               workdir_inodes=inodes)  # fmt: skip
    unchanged = StepAction.exec(["true"])  # the runner recognises the tar it got: nothing comes back
    changed = StepAction.exec(["sh", "-c", "echo x > new"])  # a new tar, re-validated on the host
    sandbox = make_sandbox(Settings(), args.backend)
    series: dict[str, list[float]] = {k: [] for k in ("plain_true", "plain_python", "step_true", "step_write")}
    host: list[float] = []
    try:
        for _ in range(3):  # warm-up: pool, page cache, bytecode
            sandbox.run(plain_true)
            run_step(sandbox, snap, unchanged, caps)
        for _ in range(args.runs):
            for name, spec in (("plain_true", plain_true), ("plain_python", plain_python)):
                t0 = time.perf_counter()
                result = sandbox.run(spec)
                series[name].append((time.perf_counter() - t0) * 1e3)
                assert result.status == SandboxStatus.OK, result
            for name, action in (("step_true", unchanged), ("step_write", changed)):
                t0 = time.perf_counter()
                outcome = run_step(sandbox, snap, action, caps)
                series[name].append((time.perf_counter() - t0) * 1e3)
                assert outcome.status == SandboxStatus.OK, outcome.reason
                assert (outcome.snapshot == snap) == (action is unchanged)
            t0 = time.perf_counter()
            canonical(outcome.snapshot, caps)
            host.append((time.perf_counter() - t0) * 1e3)
    finally:
        sandbox.close()
    out: dict[str, object] = {
        "backend": args.backend,
        "runs": args.runs,
        "workspace": {"files": args.files, "depth": args.depth, "tar_bytes": len(snap)},
        **{f"{name}_ms": _summary(ms) for name, ms in series.items()},
    }
    for name in ("step_true", "step_write"):
        pairs = zip(series[name], series["plain_true"], strict=True)
        out[f"{name}_overhead_ms"] = _summary([s - p for s, p in pairs])
    out["host_revalidation_ms"] = _summary(host)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
