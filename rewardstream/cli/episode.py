"""``rewardstream episode play --task ID --actions FILE.jsonl``: a scripted agent through the whole pipeline.

Why a command: the quickest way to see what an agent sees (and what a transcript earns) is the trainer's own
path: the SDK opens an episode, sends each line as the next turn, prints each observation, and after the
submit waits for the episode's one reward. The whole file is checked before anything is sent, so a typo on
line 7 never leaves a half-played episode behind.
"""

from __future__ import annotations

import sys
import uuid
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Annotated

import orjson
import pydantic
import typer
from pydantic import TypeAdapter
from rich.console import Console
from rich.markup import escape

from rewardstream.cli.common import load_settings
from rewardstream.cli.main import app
from schemas.codec import encode, one_line, problems_of
from schemas.episodes import Action, AnyAction, ForkAction, ObservationEvent, OpenAction, SubmitAction
from schemas.errors import ValidationError
from schemas.events import RewardEvent
from streams.sdk import TrainerClient, TrainerConfig
from streams.sdk.episodes import Episode, EpisodeClient, EpisodeConfig

episode_app = typer.Typer(help="Agent episodes: play a scripted transcript through the pipeline.", no_args_is_help=True)
app.add_typer(episode_app, name="episode")

_ACTION: TypeAdapter[AnyAction] = TypeAdapter(Action)
#: Ends after which a reward comes (an abandoned episode gets none).
_REWARDED = ("submitted", "max_turns", "episode_timeout")


def read_actions(path: Path) -> list[AnyAction]:
    """Each line's action; a bad line is named by its number. open/fork are play's own (it opens the episode),
    and nothing may follow a submit."""
    try:
        lines = path.read_bytes().splitlines()
    except OSError as exc:
        raise ValidationError(f"cannot read {path}: {exc.strerror}") from exc
    actions: list[AnyAction] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            action = _ACTION.validate_python(orjson.loads(line))
        except orjson.JSONDecodeError as exc:
            raise ValidationError(f"{path}:{number}: not JSON ({exc})") from exc
        except pydantic.ValidationError as exc:
            raise ValidationError(f"{path}:{number}: {one_line(problems_of(exc), 'action')}") from None
        if isinstance(action, OpenAction | ForkAction):
            raise ValidationError(f"{path}:{number}: {action.action} is not a step (play opens the episode itself)")
        if actions and isinstance(actions[-1], SubmitAction):
            raise ValidationError(f"{path}:{number}: an action after the submit")
        actions.append(action)
    if not actions:
        raise ValidationError(f"{path}: no actions")
    return actions


@episode_app.command("play")
def play(
    *,
    task: Annotated[str, typer.Option("--task", help="the workspace task to open")],
    actions: Annotated[Path, typer.Option("--actions", help="JSONL: one action per line (exec, write, read, submit)")],
    run_id: Annotated[str | None, typer.Option("--run-id", help="a label for the episode's run")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="one JSON object per line; the last is the reward")] = False,
    timeout: Annotated[float, typer.Option("--timeout", min=0.1, help="seconds to wait for each answer")] = 600.0,
) -> None:
    """Open an episode of TASK, play each action as the next turn, print each observation, then the reward.

    A task the worker cannot open, or an answer or reward that does not come within --timeout, is one line on
    stderr and exit code 2."""
    script = read_actions(actions)
    settings = load_settings()
    run = run_id or f"play-{uuid.uuid4().hex[:12]}"
    err = Console(stderr=True)
    out = Console(highlight=False, soft_wrap=True)
    trainer_config = TrainerConfig.from_settings(settings, run, policy_version="play", trainer_id=f"{run}.play")
    with (
        TrainerClient(trainer_config) as trainer,
        EpisodeClient(
            EpisodeConfig.from_settings(settings, run, policy_version="play", answer_timeout_s=timeout), trainer
        ) as client,
    ):
        episode = client.open(task)
        if episode.opened is not None:
            _show(episode.opened, json_out, out)
        for action in script:
            if episode.ended is not None:
                err.print(
                    f"episode {episode.episode_id} ended ({episode.ended}); the rest of the transcript is not sent"
                )
                break
            _show(episode.act(action), json_out, out)
        if episode.ended in _REWARDED:
            _show_reward(wait_reward(episode, trainer.future_for(episode.episode_id), timeout), json_out, out)
        elif episode.ended is None:
            err.print(f"episode {episode.episode_id} is still open (no submit in {actions}): no reward")


def wait_reward(episode: Episode, reward: Future[RewardEvent], timeout_s: float) -> RewardEvent:
    """The episode's reward, or an EpisodeError naming the episode when it does not come in ``timeout_s``."""
    try:
        return reward.result(timeout=timeout_s)
    except FutureTimeout:
        raise episode.no_reward(timeout_s) from None


def _show(obs: ObservationEvent, json_out: bool, out: Console) -> None:
    if json_out:
        sys.stdout.buffer.write(encode(obs) + b"\n")
        sys.stdout.flush()
        return
    head = f"turn {obs.turn} {obs.action or '-'}: {obs.status}"
    if obs.exit_code is not None:
        head += f" (exit {obs.exit_code})"
    if obs.reason:
        head += f" — {obs.reason}"
    if obs.ended:
        head += f" [ended: {obs.ended}]"
    out.print(f"[bold]{escape(head)}[/bold]")
    for text in (obs.stdout, obs.stderr, obs.content or ""):
        if text:
            out.print(escape(text.rstrip("\n")))


def _show_reward(reward: RewardEvent, json_out: bool, out: Console) -> None:
    if json_out:
        sys.stdout.buffer.write(encode(reward) + b"\n")
        sys.stdout.flush()
        return
    out.print(f"[bold]reward {reward.reward:g}[/bold] for episode {escape(reward.generation_id)}")
    for reason in reward.reasons:
        out.print(f"  {escape(str(reason))}")
