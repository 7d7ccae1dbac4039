"""``rewardstream reward run|policy``: the reward processor (the Kafka engine, or the Faust engine) and its policy.

The processor joins executions, verdicts and judgements into one reward per generation; SIGTERM stops it
cleanly, SIGKILL loses nothing (the next start recovers the table from its changelog and re-reads the inputs
it had not committed). /metrics serves dead letters by reason, like the workers'.
"""

from __future__ import annotations

import signal
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from rewardstream.cli.common import configure_logging, load_settings, print_json
from rewardstream.cli.main import app
from schemas.errors import ConfigError


class Engine(StrEnum):
    """Which reward processor runs."""

    kafka = "kafka"
    faust = "faust"


reward_app = typer.Typer(help="The reward processor and reward policies.", no_args_is_help=True)
#: Where ``reward run --help`` lists the options only the Faust engine has (refused on the Kafka engine).
FAUST_ONLY = "Faust engine only (--engine faust)"
app.add_typer(reward_app, name="reward")


@reward_app.command("run")
def run(
    *,
    policy: Annotated[Path | None, typer.Option("--policy", "-p", help="policy TOML (default: packaged)")] = None,
    app_id: Annotated[
        str, typer.Option("--app-id", help="consumer group; names the join table's changelog topic")
    ] = "rewardstream-rewards",
    data_dir: Annotated[
        Path | None,
        typer.Option("--data-dir", help="its data dir (default <cache>/rewards/<app-id>)", rich_help_panel=FAUST_ONLY),
    ] = None,
    tick_s: Annotated[float, typer.Option("--tick", min=0.05, max=60, help="seconds between deadline checks")] = 0.5,
    loglevel: Annotated[str, typer.Option("--loglevel", help="debug, info, warning or error")] = "info",
    stall_timeout_s: Annotated[
        float | None,
        typer.Option(
            "--stall-timeout",
            min=0,
            help="exit (code 70) after this long without progress (default 60; 0: off)",
            rich_help_panel=FAUST_ONLY,
        ),
    ] = None,
    kill_after_rewards: Annotated[
        int | None, typer.Option("--kill-after-rewards", min=1, hidden=True, help="fault injection for crash tests")
    ] = None,
    metrics_port: Annotated[
        int | None, typer.Option("--metrics-port", min=0, max=65535, help="/metrics port (default: RS_METRICS_PORT)")
    ] = None,
    engine: Annotated[
        Engine,
        typer.Option(
            "--engine",
            help="kafka: transactions, exactly once by construction (default); faust: the Faust app with "
            "emit-then-mark de-duplication (its consumer can skip input after a rebalance: upstream bugs)",
        ),
    ] = Engine.kafka,
) -> None:
    """Join the co-partitioned results into one reward per generation, until SIGTERM."""
    from bus.metrics import WorkerMetrics, serve
    from streams.reward.policy import load_policy

    if engine is Engine.kafka and (data_dir is not None or stall_timeout_s is not None):
        raise ConfigError("--data-dir and --stall-timeout are options of --engine faust (the Kafka engine keeps its "
                          "table in memory, restored from its changelog, and restarts on a Kafka failure)")  # fmt: skip
    settings = load_settings()
    loaded = load_policy(policy)
    configure_logging(loglevel)
    metrics = WorkerMetrics("rewards")
    server = serve(
        metrics, settings.worker.metrics_host, settings.worker.metrics_port if metrics_port is None else metrics_port
    )
    where = f"metrics on http://{settings.worker.metrics_host}:{server.port}/metrics"
    if engine is Engine.kafka:
        import faulthandler

        from streams.reward.kafka_engine import EngineOptions, RewardEngine, run_engine

        faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)  # SREs: stacks of a stuck processor

        options_ = EngineOptions(
            app_id=app_id,
            tick_s=tick_s,
            kill_after_rewards=kill_after_rewards,
            crash_attempts=settings.worker.crash_attempts,
        )
        banner = f"rewards: policy {loaded.name} v{loaded.version}, app {app_id}, engine kafka, {where}"
        print(banner, file=sys.stderr, flush=True)
        try:
            run_engine(RewardEngine(settings, loaded, options_, metrics))
        finally:
            server.close()
        return
    from streams.reward.faust.emit_then_mark import EmitThenMark
    from streams.reward.faust.engine import AppOptions, build_app, run_worker
    from streams.reward.integrity import IntegrityMetrics

    options = AppOptions(
        app_id=app_id,
        data_dir=data_dir or settings.local.cache_dir / "rewards" / app_id,
        tick_s=tick_s,
        kill_after_rewards=kill_after_rewards,
        stall_timeout_s=60.0 if stall_timeout_s is None else stall_timeout_s,
    )
    options.data_dir.mkdir(parents=True, exist_ok=True)
    faust_app, processor = build_app(settings, loaded, options)
    processor.on_dead_letter = metrics.dead_letter
    processor.on_outcome = metrics.reward
    if isinstance(processor.outputs, EmitThenMark):
        processor.outputs.on_reward = IntegrityMetrics(metrics.registry).observe
    print(f"rewards: policy {loaded.name} v{loaded.version}, app {app_id}, {where}", file=sys.stderr, flush=True)
    try:
        run_worker(faust_app, loglevel)
    finally:
        server.close()


@reward_app.command("policy")
def show_policy(
    path: Annotated[Path | None, typer.Argument(help="policy file to check (default: the packaged one)")] = None,
) -> None:
    """Validate a reward policy file and print it as JSON."""
    from streams.reward.policy import load_policy

    print_json(load_policy(path).model_dump(mode="json", by_alias=True))
