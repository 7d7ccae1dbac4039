"""``rewardstream submit --solutions S.jsonl --out R.jsonl``: score a file of solutions through the pipeline.

Why a command: the quickest way to check a model's answers (or a grader change) end to end is the same
path a trainer takes: the SDK publishes each line as a generation and waits for exactly one reward each.
A line's ``task_version`` pins it to that version of its task; a line without one is pinned to the latest
version in the registry (``RS_TASKS_DIR``) when it is published.
"""

from __future__ import annotations

import time
import uuid
from concurrent.futures import FIRST_COMPLETED, wait
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from rewardstream.cli.common import load_settings
from rewardstream.cli.main import app
from schemas.codec import encode
from schemas.errors import ValidationError
from schemas.events import GenerationEvent, RewardEvent
from schemas.solutions import Solution, numbered_solutions
from streams.sdk import RewardFuture, RewardTimeoutError, TrainerClient, TrainerConfig


def read_solutions(path: Path) -> list[Solution]:
    """The solutions of ``path`` (``schemas.solutions``: a bad line is named by its number), each with a
    generation_id of its own, and at least one."""
    rows: list[Solution] = []
    seen: set[str] = set()
    for number, solution in numbered_solutions(path):
        if solution.generation_id in seen:
            raise ValidationError(f"{path}:{number}: duplicate generation_id {solution.generation_id}")
        seen.add(solution.generation_id)
        rows.append(solution)
    if not rows:
        raise ValidationError(f"{path}: no solutions")
    return rows


def _events(client: TrainerClient, rows: list[Solution], path: Path) -> list[GenerationEvent]:
    events = []
    for number, row in enumerate(rows, 1):
        try:
            events.append(
                client.generation(
                    row.task_id,
                    row.code,
                    generation_id=row.generation_id,
                    language=row.language,
                    task_version=row.task_version,
                )
            )
        except ValidationError as exc:
            raise ValidationError(f"{path}: solution {number}: {exc}") from exc
    return events


@app.command("submit")
def submit(
    *,
    solutions: Annotated[
        Path, typer.Option("--solutions", help="JSONL: task_id, generation_id, code (language, task_version) per line")
    ],
    out: Annotated[Path, typer.Option("--out", help="JSONL: one RewardEvent per solution, in input order")],
    run_id: Annotated[str | None, typer.Option("--run-id", help="run the generations belong to")] = None,
    timeout: Annotated[float, typer.Option("--timeout", min=0.1, help="seconds to wait for every reward")] = 600.0,
) -> None:
    """Publish each solution as a generation and write its reward once all have arrived."""
    settings = load_settings()
    run = run_id or f"submit-{uuid.uuid4().hex[:12]}"
    err = Console(stderr=True)
    rows = read_solutions(solutions)
    config = TrainerConfig.from_settings(settings, run, policy_version="submit", trainer_id=f"{run}.submit")
    with TrainerClient(config) as client:
        events = _events(client, rows, solutions)
        futures = client.publish_many(events)
        client.flush()
        rewards = _collect(events, futures, timeout, err)
        arrived = [rewards[e.generation_id] for e in events if e.generation_id in rewards]
        out.write_bytes(b"".join(encode(r) + b"\n" for r in arrived))
        missing = [e.generation_id for e in events if e.generation_id not in rewards]
        if missing:
            err.print(f"wrote {len(arrived)} of {len(events)} rewards to {out}")
            raise RewardTimeoutError(missing, timeout)
    mean = sum(r.reward for r in arrived) / len(arrived) if arrived else 0.0
    err.print(f"run {run}: {len(arrived)} rewards (mean {mean:.3f}) written to {out}")


def _collect(
    events: list[GenerationEvent], futures: list[RewardFuture], timeout_s: float, err: Console
) -> dict[str, RewardEvent]:
    """Wait for the futures under one deadline, with a progress bar on stderr."""
    by_future = {f: e.generation_id for f, e in zip(futures, events, strict=True)}
    got: dict[str, RewardEvent] = {}
    pending = set(futures)
    deadline = time.monotonic() + timeout_s
    columns = (TextColumn("rewards"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=err, transient=False) as progress:
        bar = progress.add_task("rewards", total=len(futures))
        while pending and time.monotonic() < deadline:
            done, pending = wait(
                pending, timeout=min(0.5, max(0.0, deadline - time.monotonic())), return_when=FIRST_COMPLETED
            )
            for future in done:
                got[by_future[future]] = future.result()
            progress.update(bar, completed=len(got))
    return got
