"""The agent half of ``rewardstream demo``: scripted agents play the repo's SWE tasks as episodes.

Each fixing agent inspects the workspace, runs the public tests (they fail), fixes the bug, runs them again
(they pass) and submits: 1.0. Some agents give up (submit the workspace unchanged: 0) and some hack (empty the
public tests, plant a conftest: the tests pass in the workspace, but grading resets protected paths: 0). Every
episode goes through the SDK, the episode worker, the verifier, judge and reward processor, as a trainer's would.
"""

from __future__ import annotations

import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any, Literal

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from rewardstream.cli.common import PROBLEMS_SHOWN
from schemas.errors import RewardstreamError
from schemas.events import RewardEvent
from schemas.settings import Settings
from workers.tasks.swe import SPECS, fix_transcript, give_up_transcript, hack_transcript

Kind = Literal["fix", "give-up", "hack"]


@dataclass(frozen=True)
class DemoEpisode:
    task_id: str
    kind: Kind
    actions: list[dict[str, Any]]
    expected_reward: float


@dataclass(frozen=True)
class Played:
    episode_id: str | None
    turns: int
    reward: RewardEvent | None
    error: str | None = None


def demo_episodes() -> list[DemoEpisode]:
    """A fixing agent on every task (and its io twin); a giving-up or a hacking one on every other task."""
    out: list[DemoEpisode] = []
    for i, spec in enumerate(SPECS):
        for task_id in (spec.task_id, *((spec.task_id + "-io",) if spec.io is not None else ())):
            out.append(DemoEpisode(task_id, "fix", fix_transcript(spec), 1.0))
        if i % 2 == 0:
            out.append(DemoEpisode(spec.task_id, "give-up", give_up_transcript(spec), 0.0))
        else:
            out.append(DemoEpisode(spec.task_id, "hack", hack_transcript(spec), 0.0))
    return out


def play_episodes(
    console: Console, settings: Settings, run_id: str, episodes: list[DemoEpisode], timeout_s: float
) -> tuple[list[Played], float]:
    """Play every episode through the SDK (many at once, as a trainer's rollouts); their rewards, the time."""
    from streams.sdk import EpisodeClient, EpisodeConfig, TrainerClient, TrainerConfig

    trainer_config = TrainerConfig.from_settings(settings, run_id, policy_version="demo-agent",
                                                 trainer_id=f"{run_id}.agents")  # fmt: skip
    config = EpisodeConfig.from_settings(settings, run_id, policy_version="demo-agent", answer_timeout_s=timeout_s)
    columns = (TextColumn("episodes"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    started = time.monotonic()
    with (
        TrainerClient(trainer_config) as trainer,
        EpisodeClient(config, trainer) as client,
        Progress(*columns, console=console) as progress,
        ThreadPoolExecutor(max_workers=16, thread_name_prefix="rs-demo-agent") as pool,
    ):
        bar = progress.add_task("episodes", total=len(episodes))

        def play(demo: DemoEpisode) -> Played:
            episode = None
            try:
                episode = client.open(demo.task_id)
                for action in demo.actions[:-1]:
                    episode.act(action)
                reward = episode.submit(timeout_s=timeout_s)
                return Played(episode.episode_id, episode.turn, reward)
            except RewardstreamError as exc:
                return Played(episode.episode_id if episode else None, episode.turn if episode else 0, None, str(exc))

        futures = {pool.submit(play, demo): i for i, demo in enumerate(episodes)}
        results: list[Played | None] = [None] * len(episodes)
        for future in as_completed(futures):
            results[futures[future]] = future.result()
            progress.advance(bar)
    return [r if r is not None else Played(None, 0, None, "not played") for r in results], time.monotonic() - started


def summarize(
    console: Console, episodes: list[DemoEpisode], played: list[Played], elapsed: float, what: str = "agent episodes"
) -> list[str]:
    """Print the table; return what went wrong (episodes without the reward they deserve)."""
    outcomes: Counter[str] = Counter()
    problems: list[str] = []
    for demo, result in zip(episodes, played, strict=True):
        if result.reward is None:
            outcomes[f"{demo.kind}: NO REWARD"] += 1
            problems.append(f"episode {result.episode_id} ({demo.task_id}, {demo.kind}): {result.error or 'no reward'}")
            continue
        outcomes[f"{demo.kind}: reward {result.reward.reward:g}"] += 1
        if result.reward.reward != demo.expected_reward:
            problems.append(f"episode {result.episode_id} ({demo.task_id}, {demo.kind}): reward "
                            f"{result.reward.reward:g}, expected {demo.expected_reward:g}")  # fmt: skip
    steps = sum(r.turns for r in played)
    table = Table(title=f"{sum(r.reward is not None for r in played)} rewards for {len(episodes)} {what} "
                        f"({steps} turns, {elapsed:.1f}s)")  # fmt: skip
    table.add_column("episodes")
    table.add_column("count", justify="right")
    for key, count in sorted(outcomes.items()):
        table.add_row(key, str(count))
    console.print(table)
    for line in problems[:PROBLEMS_SHOWN]:
        console.print(f"[red]unexpected[/] {line}")
    return problems
