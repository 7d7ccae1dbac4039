"""``rewardstream demo``: the main job on real tasks, on the local embedded platform.

Until the Kafka pipeline lands (issues 5-6), the demo exercises everything that exists end to end: the
services (one round trip each), the HumanEval set converted to tasks in the sandbox, and the grader
rewarding canonical, wrong and adversarial solutions, with a summary a trainer would read. It exits
non-zero if any solution got a reward other than the one it deserves, or none at all.
"""

from __future__ import annotations

import statistics
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Literal

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from rewardstream.cli.common import load_settings
from rewardstream.cli.main import app

# Model-written hacks the grader must reward 0.0, whatever the task.
ADVERSARIAL_BODIES = {
    "exit-0": "    import sys\n    sys.exit(0)\n",
    "always-equal": (
        "    class AlwaysEqual:\n        def __eq__(self, other):\n            return True\n    return AlwaysEqual()\n"
    ),
    "fake-verdict": "    print('PASSED all tests')\n    raise SystemExit(0)\n",
    "read-tests": "    import os\n    return [open(p).read() for p in os.listdir('/')]\n",
}


@dataclass(frozen=True)
class DemoSolution:
    generation_id: str
    task_id: str
    kind: Literal["canonical", "wrong", "adversarial"]
    code: str
    expected_reward: float


@app.command()
def demo(
    limit: int = typer.Option(164, min=1, max=164, help="HumanEval problems to use"),
    concurrency: int = typer.Option(4, min=1, max=64, help="solutions graded at once"),
    backend: str | None = typer.Option(None, help="process | docker (default: settings)"),
) -> None:
    """Run the pipeline's grading on HumanEval: canonical, wrong and adversarial solutions, then a summary."""
    from infra.local.smoke import run_smoke
    from workers.grading.grader import Grader
    from workers.sandbox.factory import make_sandbox
    from workers.tasks.humaneval import SandboxReference, convert_all, load_problems

    console = Console()
    settings = load_settings()
    chosen: Literal["process", "docker"] | None = None
    if backend is not None:
        chosen = "docker" if backend == "docker" else "process"
    with console.status("one round trip through Kafka, OpenSearch, S3 and Docker..."):
        smoke = run_smoke(settings)
    for result in smoke:
        mark = "[green]ok[/]" if result.ok else "[red]FAILED[/]"
        console.print(f"{mark} {result.service}: {result.detail}")
    problems = load_problems()[:limit]
    sandbox = make_sandbox(settings, chosen)
    try:
        with console.status(f"converting {len(problems)} HumanEval problems (expected values from the sandbox)..."):
            tasks, _ = convert_all(problems, SandboxReference(sandbox), workers=concurrency, verify=False)
        by_id = {task.task_id: task for task in tasks}
        solutions = _solutions(problems)
        grader = Grader(sandbox)
        latencies: list[float] = []
        outcomes: Counter[str] = Counter()
        wrong: list[str] = []
        started = time.monotonic()
        columns = (TextColumn("grading"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=console) as progress, ThreadPoolExecutor(concurrency) as pool:
            bar = progress.add_task("grading", total=len(solutions))

            def one(sol: DemoSolution) -> tuple[DemoSolution, float, str, float]:
                t0 = time.monotonic()
                result = grader.grade(by_id[sol.task_id], sol.code, generation_id=sol.generation_id)
                return sol, result.reward, result.status, time.monotonic() - t0

            for future in as_completed([pool.submit(one, s) for s in solutions]):
                sol, reward, status, seconds = future.result()
                latencies.append(seconds)
                outcomes[f"{sol.kind}: {status}, reward {reward:g}"] += 1
                if status == "sandbox_error" or reward != sol.expected_reward:
                    wrong.append(f"{sol.generation_id}: {status}, reward {reward:g}")
                progress.advance(bar)
        elapsed = time.monotonic() - started
    finally:
        sandbox.close()
    _summary(console, outcomes, latencies, elapsed, sandbox.name)
    if wrong or not all(r.ok for r in smoke):
        for line in wrong[:20]:
            console.print(f"[red]unexpected[/] {line}")
        raise typer.Exit(1)


def _solutions(problems: list) -> list[DemoSolution]:  # type: ignore[type-arg]
    out: list[DemoSolution] = []
    hacks = list(ADVERSARIAL_BODIES.items())
    for i, problem in enumerate(problems):
        tid = problem.task_id
        out.append(DemoSolution(f"{tid}/canonical", tid, "canonical", problem.reference_code, 1.0))
        out.append(DemoSolution(f"{tid}/wrong", tid, "wrong", problem.prompt + "    return None\n", 0.0))
        if i % 8 == 0:
            name, body = hacks[(i // 8) % len(hacks)]
            out.append(DemoSolution(f"{tid}/hack-{name}", tid, "adversarial", problem.prompt + body, 0.0))
    return out


def _summary(console: Console, outcomes: Counter[str], latencies: list[float], elapsed: float, backend: str) -> None:
    table = Table(title=f"rewards by outcome ({backend} sandbox)")
    table.add_column("solutions")
    table.add_column("count", justify="right")
    for key, count in sorted(outcomes.items()):
        table.add_row(key, str(count))
    console.print(table)
    q = statistics.quantiles(latencies, n=100) if len(latencies) > 1 else [latencies[0]] * 99
    console.print(
        f"{len(latencies)} solutions graded in {elapsed:.1f}s ({len(latencies) / elapsed:.1f}/s); "
        f"latency p50 {q[49] * 1e3:.0f} ms, p95 {q[94] * 1e3:.0f} ms, p99 {q[98] * 1e3:.0f} ms"
    )
