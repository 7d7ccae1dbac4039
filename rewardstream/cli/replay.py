"""``rewardstream replay``: re-run selected generations through the pipeline in an isolated namespace, diff rewards.

Why a namespace: a replay must never mix into the live rewards a trainer reads. The replay runs executor,
verifier, judge and the reward processor (no indexer) on topics ``<prefix>replay.<id>.*`` with their own
consumer groups, reward processor app id (and changelog), pid files and metrics ports; the live topics are only read.
An image task's submit is re-verified from the WORKDIR snapshot its generation names; its entry also shows both
verifications' evidence (the task image, the reward file, the end of test.sh's output: ``explain_verifier``).
"""

from __future__ import annotations

import os
import random
import shutil
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from confluent_kafka.admin import AdminClient
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from bus.scan import partitions
from rewardstream.cli.common import load_settings, print_json
from rewardstream.cli.explain_verifier import verifier_rows
from rewardstream.cli.main import app
from rewardstream.pipeline import Pipeline, PipelineProcess
from schemas.errors import PlatformError
from schemas.settings import Settings
from schemas.topics import catalog, topic_for
from streams.replay.diff import Entry, Report
from streams.replay.namespace import new_replay_id, replay_prefix
from streams.replay.runner import ReplayPlan, run_replay
from streams.replay.selection import build_selection

#: Exit code when the replay itself failed for some generation (no new reward within --timeout).
INCOMPLETE_EXIT_CODE = 1
_PORTS_TRIED = 50


class _ReplayPipeline(Pipeline):
    """The pipeline minus the indexer (replay logs stay on the replay's logs topic), the episode worker (a
    replay re-grades generations, an episode's included, and replays no actions), the auditor (audits never
    change a reward, so a replay's diff has no use for them, and they would spend its sandboxes) and the
    gateway (nobody calls a replay over HTTP), with the replay policy."""

    def __init__(
        self, settings: Settings, policy: Path | None, concurrency: int | None, child_env: dict[str, str]
    ) -> None:
        super().__init__(settings, concurrency)
        self._child_env = child_env
        procs = []
        for proc in self._procs:
            if proc.name in ("indexer", "episode", "auditor", "gateway"):
                continue
            if proc.name != "reward":
                procs.append(proc)
                continue
            extra = [] if policy is None else ["--policy", str(policy.resolve())]
            procs.append(PipelineProcess(proc.name, (*proc.argv, *extra), proc.metrics_port))
        self._procs = procs

    started = False

    def _admin_config(self) -> dict[str, str]:
        """The replay's topics are made as the CLI's principal (the operator's, which owns the namespace)."""
        return self._settings.kafka_client_config()

    def credentials(self, proc: PipelineProcess) -> dict[str, str]:
        """Every replay process runs as the CLI's principal (the operator's): no role principal has ACLs on the
        replay namespace."""
        return {}

    def start(self, report: Callable[[str], None] = lambda _msg: None) -> None:
        self.started = True  # a failed start may have left some processes: stop and clean up anyway
        with _environ(self._child_env):
            super().start(report)


@contextmanager
def _environ(overrides: dict[str, str]) -> Iterator[None]:
    """The pipeline processes read their settings from the environment they are started with."""
    saved = {k: os.environ.get(k) for k in overrides}
    os.environ.update(overrides)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def free_port_base(host: str, count: int = 5) -> int:
    """A port with ``count`` free consecutive ports above it, below the ephemeral range (workers' /metrics)."""
    rng = random.SystemRandom()
    for _ in range(_PORTS_TRIED):
        base = rng.randrange(20_000, 30_000)
        if all(_free(host, base + i) for i in range(count)):
            return base
    raise PlatformError(f"no {count} consecutive free ports on {host} for the workers' /metrics")


def _free(host: str, port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


class _Bar:
    """The runner's progress phases on a rich progress bar (stderr): one line per phase."""

    def __init__(self, progress: Progress) -> None:
        self._progress = progress
        self._task: TaskID | None = None
        self._total: int | None = None
        self._completed = 0

    def phase(self, name: str, total: int | None) -> None:
        if self._task is not None:
            done = max(self._completed, 1) if self._total is None else self._total
            self._progress.update(self._task, total=self._total or done, completed=self._completed or done)
            self._progress.stop_task(self._task)
        self._task, self._total, self._completed = self._progress.add_task(name, total=total), total, 0

    def update(self, completed: int) -> None:
        self._completed = completed
        if self._task is not None:
            self._progress.update(self._task, completed=completed)


def delete_namespace(settings: Settings, prefix: str) -> list[str]:
    """Delete every topic and consumer group under ``prefix`` (catalog, the processor's changelog, workers'): a
    replay's namespace, or a benchmark's (``benchmarks/soak.py``)."""
    from bus.admin import delete_groups_with_prefix, delete_topics

    config = settings.kafka_client_config()
    admin = AdminClient({**config, "log_level": 3})
    names = sorted(t for t in admin.list_topics(timeout=30).topics if t.startswith(prefix))
    delete_topics(names, config)
    delete_groups_with_prefix(prefix, config)
    return names


def _teardown(settings: Settings, prefix: str, workdir: Path, *, keep: bool, ok: bool, err: Console) -> None:
    """Delete the namespace (unless --keep); the process logs stay when something failed."""
    if keep:
        err.print(f"kept the replay topics {prefix}* and the process logs in {workdir / 'logs'}")
        return
    deleted = delete_namespace(settings, prefix)
    err.print(f"deleted {len(deleted)} replay topics")
    if ok:
        shutil.rmtree(workdir, ignore_errors=True)
    else:
        err.print(f"replay process logs kept in {workdir / 'logs'}")


def _reward_text(entry: Entry, side: str) -> str:
    reward = entry.old if side == "old" else entry.new
    return "-" if reward is None else f"{reward.reward:g}"


def _render_verifier(entry: Entry, console: Console) -> None:
    """An image task's verifications: the new one's evidence, and each row of the old one that differs."""
    sides = entry.verifier()
    if sides is None:
        return
    old, new = (verifier_rows((side or {}).get("verifier")) for side in (sides["old"], sides["new"]))
    table = Table(title=f"image task verifier of {entry.generation_id}", title_justify="left", show_header=False,
                  box=None, padding=(0, 1))  # fmt: skip
    for name in dict.fromkeys([*new, *old]):
        now, before = new.get(name, "(no new verdict)"), old.get(name, "(no old verdict)")
        table.add_row(name, str(now))
        if before != now:
            table.add_row("  was", str(before))
    console.print(table)


def _render(report: Report, only_differences: bool, console: Console) -> None:
    entries = [e for e in report.entries if not only_differences or e.kind != "same"]
    table = Table()
    table.add_column("generation", overflow="fold")  # ids whole, never cut with an ellipsis
    table.add_column("task", overflow="fold")
    for name in ("old", "new", "kind", "reasons (- old, + new)"):
        table.add_column(name)
    for entry in entries:
        lines = [f"- {r}" for r in entry.reasons_removed()] + [f"+ {r}" for r in entry.reasons_added()]
        table.add_row(
            entry.generation_id,
            entry.task_id,
            _reward_text(entry, "old"),
            _reward_text(entry, "new"),
            entry.kind,
            "\n".join(lines),
        )
    if entries:
        console.print(table)
    for entry in entries:
        _render_verifier(entry, console)
    counts = ", ".join(f"{n} {kind}" for kind, n in report.counts().items())
    console.print(f"replayed {len(report.entries)}: {counts}")


@app.command("replay")
def replay(
    *,
    run_id: Annotated[str | None, typer.Option("--run-id", help="replay every generation of this run")] = None,
    from_time: Annotated[str | None, typer.Option("--from-time", help="ISO 8601 or epoch ms, inclusive")] = None,
    to_time: Annotated[str | None, typer.Option("--to-time", help="ISO 8601 or epoch ms, exclusive")] = None,
    from_offset: Annotated[
        str | None, typer.Option("--from-offset", help="PARTITION:OFFSET[,...] of the generations topic, inclusive")
    ] = None,
    to_offset: Annotated[str | None, typer.Option("--to-offset", help="PARTITION:OFFSET[,...], exclusive")] = None,
    policy: Annotated[Path | None, typer.Option("--policy", help="reward policy TOML (default: packaged)")] = None,
    only_diff: Annotated[bool, typer.Option("--diff", help="show only what changed")] = False,
    as_json: Annotated[bool, typer.Option("--json", help='print {"replayed": N, "changed": [...], ...}')] = False,
    keep: Annotated[bool, typer.Option("--keep", help="keep the replay topics and logs afterwards")] = False,
    timeout: Annotated[
        float, typer.Option("--timeout", min=1, help="give up when no new reward came for this many seconds")
    ] = 300.0,
    window: Annotated[
        int, typer.Option("--window", min=1, help="most generations in the replay pipeline at once")
    ] = 64,
    concurrency: Annotated[int | None, typer.Option("--concurrency", min=1, help="sandbox runs per worker")] = None,
    replay_id: Annotated[str | None, typer.Option("--replay-id", help="namespace id (default: time + random)")] = None,
) -> None:
    """Re-run the selected generations through the pipeline in an isolated namespace and diff the rewards."""
    from streams.reward.policy import load_policy

    selection = build_selection(
        run_id=run_id, from_time=from_time, to_time=to_time, from_offset=from_offset, to_offset=to_offset
    )
    if policy is not None:
        load_policy(policy)  # a bad file is a one-line error now, not a crashed reward processor later
    settings = load_settings()
    rid = replay_id or new_replay_id()
    prefix = replay_prefix(settings.kafka.topic_prefix, rid)
    live_generations = topic_for("generations", catalog(settings.kafka.topic_prefix)).name
    count = len(partitions(settings.kafka_client_config(), live_generations))
    workdir = settings.local.cache_dir / "replay" / rid
    replay_settings = settings.model_copy(
        update={
            "topic_prefix": prefix,
            "topic_partitions": count,
            "cache_dir": workdir,
            "metrics_port": free_port_base(settings.worker.metrics_host),
        }
    )
    child_env = {"RS_TOPIC_PREFIX": prefix, "RS_TOPIC_PARTITIONS": str(count), "RS_TASKS_DIR": str(settings.tasks_dir)}
    pipeline = _ReplayPipeline(replay_settings, policy, concurrency, child_env)
    plan = ReplayPlan(
        settings.kafka_client_config(), settings.kafka.topic_prefix, prefix, count, selection, timeout, window
    )
    err = Console(stderr=True, soft_wrap=True)
    err.print(f"replay {rid}: namespace {prefix}*, policy {policy or 'packaged default'}")
    columns = (
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    ok = False
    try:
        with Progress(*columns, console=err, transient=False) as progress:
            result = run_replay(plan, pipeline, _Bar(progress))
        ok = not result.report.of("new_missing")
    finally:
        if pipeline.started:
            _teardown(settings, prefix, workdir, keep=keep, ok=ok, err=err)
    report = result.report
    if as_json:
        print_json({"replay_id": rid, "selection": selection.describe(), **report.as_json(only_differences=only_diff)})
    else:
        _render(report, only_diff, Console(soft_wrap=True))
    if not ok:
        missing = [e.generation_id for e in report.of("new_missing")]
        err.print(
            f"rewardstream: error: {len(missing)} generation(s) got no reward in the replay: {', '.join(missing[:10])}"
        )
        raise typer.Exit(INCOMPLETE_EXIT_CODE)
