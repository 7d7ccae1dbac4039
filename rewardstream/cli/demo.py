"""``rewardstream demo``: the whole pipeline on real tasks, on the local embedded platform.

It brings the platform and the pipeline up (services, topics, executor, verifier, judge, indexer, reward
processor, episode worker), loads the HumanEval tasks (expected values computed in the sandbox) and the repo's
SWE tasks, then plays a trainer: it publishes canonical, wrong and adversarial solutions through the SDK and
waits for exactly one reward per generation, then scripted agents play the SWE tasks as episodes
(``demo_episodes``) and the shipped Harbor tasks in their containers (``demo_harbor``), with progress bars.
The summary says what a trainer and an SRE want to know; the exit code
is non-zero if any generation or episode ended without a reward, or with a reward it did not deserve.
"""

from __future__ import annotations

import statistics
import time
import uuid
from collections import Counter
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass
from typing import Literal

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from rewardstream.cli.common import PROBLEMS_SHOWN, load_settings, open_sandbox
from rewardstream.cli.main import app
from schemas.events import RewardEvent
from schemas.settings import Settings

# Model-written hacks the pipeline must reward 0.0, whatever the task.
ADVERSARIAL_BODIES = {
    "exit-0": "    import sys\n    sys.exit(0)\n",
    "always-equal": (
        "    class AlwaysEqual:\n        def __eq__(self, other):\n            return True\n    return AlwaysEqual()\n"
    ),
    "fake-verdict": "    print('PASSED all tests')\n    raise SystemExit(0)\n",
    "patch-builtins": "    import builtins\n    builtins.isinstance = lambda *a: True\n    return None\n",
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
    concurrency: int | None = typer.Option(None, min=1, max=64, help="sandbox runs per worker"),
    timeout: float = typer.Option(900.0, min=1, help="seconds to wait for every reward"),
    episodes: bool = typer.Option(True, "--episodes/--no-episodes", help="agents play the SWE tasks too"),
    harbor: bool = typer.Option(
        True, "--harbor/--no-harbor", help="and the shipped Harbor tasks (their images built on the docker daemon)"
    ),
) -> None:
    """Bring the pipeline up, publish HumanEval solutions and play SWE episodes as a trainer would; summarize."""
    from infra.local.platform import Platform
    from rewardstream.cli.demo_episodes import demo_episodes, play_episodes, summarize
    from rewardstream.pipeline import Pipeline

    console = Console()
    settings = load_settings()
    with console.status("starting the platform and the pipeline (first run downloads ~300 MB)..."):
        Platform.from_settings(settings).up(report=console.print)
        Pipeline(settings, concurrency).start(report=console.print)
    with console.status(f"loading {limit} HumanEval tasks (expected values computed in the sandbox)..."):
        solutions = _load_tasks(settings, limit)
    run_id = f"demo-{uuid.uuid4().hex[:8]}"
    rewards, latencies, elapsed = _play_trainer(console, settings, run_id, solutions, timeout)
    missing = _summary(console, solutions, rewards, latencies, elapsed)
    if episodes:
        agents = demo_episodes()
        played, agents_s = play_episodes(console, settings, run_id, agents, timeout)
        missing += summarize(console, agents, played, agents_s)
    if harbor:
        missing += _play_harbor(console, settings, run_id, timeout)
    console.print(
        f"SRE view: every run's log lines are in OpenSearch ({settings.opensearch.url}, indices "
        f"{settings.opensearch.index_prefix}-*): `rewardstream logs search --run-id {run_id}`; "
        f"pipeline metrics on http://{settings.worker.metrics_host}:{settings.worker.metrics_port}-"
        f"{settings.worker.metrics_port + 5}/metrics; `rewardstream down` stops everything."
    )
    if missing:
        raise typer.Exit(1)


def _play_harbor(console: Console, settings: Settings, run_id: str, timeout_s: float) -> list[str]:
    """The shipped Harbor tasks loaded (images built), then fixed, given up on and hacked as episodes."""
    from rewardstream.cli.demo_episodes import play_episodes, summarize
    from rewardstream.cli.demo_harbor import harbor_episodes, load_harbor_tasks

    with console.status("building the shipped Harbor tasks' images (first run: a few minutes of Debian packages)..."):
        load_harbor_tasks(console, settings)
    agents = harbor_episodes()
    played, elapsed = play_episodes(console, settings, run_id, agents, timeout_s)
    return summarize(console, agents, played, elapsed, "Harbor task episodes")


def _load_tasks(settings: Settings, limit: int) -> list[DemoSolution]:
    from workers.tasks.humaneval import SandboxReference, convert_all, load_problems
    from workers.tasks.registry import TaskRegistry

    problems = load_problems()[:limit]
    sandbox = open_sandbox(settings, None)
    try:
        tasks, _ = convert_all(problems, SandboxReference(sandbox), workers=2, verify=False)
    finally:
        sandbox.close()
    from workers.tasks.swe import swe_tasks

    TaskRegistry.from_settings(settings).store([*tasks, *swe_tasks()])
    out: list[DemoSolution] = []
    hacks = list(ADVERSARIAL_BODIES.items())
    tag = uuid.uuid4().hex[:6]
    for i, problem in enumerate(problems):
        tid = problem.task_id
        gid = f"{tid.replace('/', '-')}-{tag}"
        out.append(DemoSolution(f"{gid}-canonical", tid, "canonical", problem.reference_code, 1.0))
        out.append(DemoSolution(f"{gid}-wrong", tid, "wrong", problem.prompt + "    return None\n", 0.0))
        if i % 8 == 0:
            name, body = hacks[(i // 8) % len(hacks)]
            out.append(DemoSolution(f"{gid}-hack-{name}", tid, "adversarial", problem.prompt + body, 0.0))
    return out


def _play_trainer(
    console: Console, settings: Settings, run_id: str, solutions: list[DemoSolution], timeout_s: float
) -> tuple[dict[str, RewardEvent], list[float], float]:
    """Publish every solution through the SDK; collect rewards and publish-to-reward latencies."""
    from streams.sdk import TrainerClient, TrainerConfig

    config = TrainerConfig.from_settings(settings, run_id, policy_version="demo")
    rewards: dict[str, RewardEvent] = {}
    latencies: list[float] = []
    columns = (TextColumn("rewards"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with TrainerClient(config) as client, Progress(*columns, console=console) as progress:
        bar = progress.add_task("rewards", total=len(solutions))
        started = time.monotonic()
        pending: dict[Future[RewardEvent], str] = {}
        for sol in solutions:
            event = client.generation(sol.task_id, sol.code, generation_id=sol.generation_id)
            pending[client.publish(event)] = sol.generation_id
        client.flush()
        deadline = started + timeout_s
        while pending and time.monotonic() < deadline:
            done, _ = wait(list(pending), timeout=0.5, return_when=FIRST_COMPLETED)
            for future in done:
                rewards[pending.pop(future)] = future.result()
                latencies.append(time.monotonic() - started)
            progress.update(bar, completed=len(rewards))
        elapsed = time.monotonic() - started
    return rewards, latencies, elapsed


def _summary(
    console: Console,
    solutions: list[DemoSolution],
    rewards: dict[str, RewardEvent],
    latencies: list[float],
    elapsed: float,
) -> list[str]:
    """Print the tables; return what went wrong (generations without the reward they deserve)."""
    outcomes: Counter[str] = Counter()
    problems: list[str] = []
    for sol in solutions:
        reward = rewards.get(sol.generation_id)
        if reward is None:
            outcomes[f"{sol.kind}: NO REWARD"] += 1
            problems.append(f"{sol.generation_id}: no reward")
            continue
        flagged = " (flagged)" if reward.flags else ""
        missing = f", missing {'+'.join(reward.missing)}" if reward.missing else ""
        outcomes[f"{sol.kind}: reward {reward.reward:g}{flagged}{missing}"] += 1
        if reward.reward != sol.expected_reward:
            problems.append(f"{sol.generation_id}: reward {reward.reward:g}, expected {sol.expected_reward:g}")
    table = Table(title=f"{len(rewards)} rewards for {len(solutions)} generations")
    table.add_column("generations")
    table.add_column("count", justify="right")
    for key, count in sorted(outcomes.items()):
        table.add_row(key, str(count))
    console.print(table)
    sandbox_errors = sum(1 for r in rewards.values() if any("sandbox_error" in reason for reason in r.reasons))
    if latencies:
        q = statistics.quantiles(latencies, n=100) if len(latencies) > 1 else [latencies[0]] * 99
        console.print(
            f"throughput {len(rewards) / elapsed:.1f} rewards/s ({len(rewards)} in {elapsed:.1f}s, publish to "
            f"reward consumed); latency p50 {q[49]:.2f}s, p95 {q[94]:.2f}s, p99 {q[98]:.2f}s; "
            f"sandbox errors {sandbox_errors}"
        )
    for line in problems[:PROBLEMS_SHOWN]:
        console.print(f"[red]unexpected[/] {line}")
    return problems
