"""``rewardstream up | down | status``: the local platform."""

from __future__ import annotations

import os
import time

import typer
from rich.console import Console

from infra.local.platform import Platform
from rewardstream.cli.common import load_settings, print_json
from rewardstream.cli.main import app
from schemas.settings import Settings

_ONLY = typer.Option(
    None, "--only", help="only this service (kafka, opensearch, s3, docker); repeat for more", show_default=False
)


@app.command()
def up(
    pipeline: bool = typer.Option(
        False, "--pipeline", help="also start every worker role (the auditor too), the reward processor and the gateway"
    ),
    concurrency: int | None = typer.Option(None, min=1, max=256, help="sandbox runs per worker (--pipeline)"),
    kafka_brokers: int | None = typer.Option(
        None, "--kafka-brokers", help="1, or 3 for a three-node KRaft cluster (RS_KAFKA_BROKERS; this command only)"
    ),
    only: list[str] | None = _ONLY,
) -> None:
    """Start every local service that is not running (Kafka, OpenSearch, S3, Docker) and wait until healthy;
    a down node of a three-broker Kafka is started again."""
    console = Console(stderr=True)
    if kafka_brokers is not None:
        # Through the environment: checked like the setting, and what `--pipeline`'s processes inherit.
        os.environ["RS_KAFKA_BROKERS"] = str(kafka_brokers)
    settings = load_settings()
    platform = Platform.from_settings(settings, only)
    started = time.monotonic()
    with console.status("starting the local platform (first run downloads ~300 MB)..."):
        health = platform.up(report=console.print)
    console.print(f"[green]all {len(health)} services healthy[/] in {time.monotonic() - started:.1f}s")
    if "s3" in health:
        report_artifact_lifecycle(settings, console)
    if pipeline:
        from rewardstream.monitoring import Monitoring
        from rewardstream.pipeline import Pipeline

        with console.status("starting the pipeline processes..."):
            Pipeline(settings, concurrency).start(report=console.print)
        with console.status("starting Prometheus and Alertmanager..."):
            Monitoring(settings).start(report=console.print)
        console.print(f"[green]pipeline running[/] ({time.monotonic() - started:.1f}s in all)")


def report_artifact_lifecycle(settings: Settings, console: Console) -> None:
    """The artifacts bucket and its expiry rule (workers set it too on start): said, never fatal, so an S3
    without a lifecycle API (s3proxy, the local one) is one clear line, not a failed ``up``."""
    from workers.lifecycle import artifact_lifecycle

    try:
        outcome = artifact_lifecycle(settings)
    except Exception as exc:  # S3 down or refusing: up's services are healthy; say it and go on
        console.print(f"s3 lifecycle: not set: {type(exc).__name__}: {exc}", style="yellow", markup=False)
        return
    console.print(f"s3 lifecycle ({outcome.state}): {outcome.detail}", style="green" if outcome.ok else "yellow",
                  markup=False)  # fmt: skip


@app.command()
def down(
    pipeline_only: bool = typer.Option(
        False, "--pipeline-only", help="stop only the pipeline processes; leave the services running"
    ),
    only: list[str] | None = _ONLY,
) -> None:
    """Stop every process `up` started (monitoring, pipeline, then services); leave anything else alone.
    With --only, just those services."""
    from rewardstream.monitoring import Monitoring
    from rewardstream.pipeline import Pipeline

    console = Console(stderr=True)
    settings = load_settings()
    if only:
        Platform.from_settings(settings, only).down(report=console.print)
        return
    Monitoring(settings).stop(report=console.print)
    Pipeline(settings).stop(report=console.print)
    if not pipeline_only:
        Platform.from_settings(settings).down(report=console.print)


@app.command()
def status(
    as_json: bool = typer.Option(
        False, "--json", help="print {'services': {...}, 'pipeline': {...}, 'alerts': [...]} as JSON"
    ),
    only: list[str] | None = _ONLY,
) -> None:
    """Health of each service, the pipeline's processes and the alerts pending or firing in Prometheus.
    Exit code 1 if a service is unhealthy (Prometheus counts while the pipeline runs)."""
    from rewardstream.monitoring import Monitoring
    from rewardstream.pipeline import Pipeline

    settings = load_settings()
    health = Platform.from_settings(settings, only).status()
    pipeline = Pipeline(settings).status()
    prometheus, alerts = Monitoring(settings).status()
    if as_json:
        services = {name: h.as_json() for name, h in health.items()}
        print_json({"services": {**services, "prometheus": prometheus.as_json()}, "pipeline": pipeline,
                    "alerts": alerts})  # fmt: skip
    else:
        console = Console()
        for name, h in [*health.items(), ("prometheus", prometheus)]:
            mark = "[green]healthy[/]" if h.healthy else f"[red]unhealthy[/]: {h.reason}"
            console.print(f"{name:<11} {h.endpoint:<32} {mark}")
            nodes = h.details.get("nodes") or []
            for node in nodes if len(nodes) > 1 else []:
                state = "[green]healthy[/]" if node["healthy"] else "[red]down[/]"
                console.print(f"  node {node['id']:<4} {node['endpoint']:<32} {state} (pid {node['pid']})")
        for name, proc in pipeline.items():
            if proc["running"]:
                console.print(f"{name:<11} pid {proc['pid']:<28} [green]running[/] ({proc['rss_mb']} MB)")
        for alert in alerts:
            color = "red" if alert["state"] == "firing" else "yellow"
            labels = " ".join(f"{k}={v}" for k, v in sorted(alert["labels"].items()))
            console.print(f"[{color}]{alert['state']:<8}[/] {alert['name']} {labels} (since {alert['since']})")
    running = any(proc["running"] for proc in pipeline.values())
    if not all(h.healthy for h in health.values()) or (running and not prometheus.healthy):
        raise typer.Exit(1)


@app.command()
def smoke() -> None:
    """One real round trip through each service (Kafka, OpenSearch, S3, Docker); exit 1 if any fails."""
    from rich.table import Table

    from infra.local.smoke import run_smoke

    console = Console()
    with console.status("running one round trip through each service..."):
        results = run_smoke(load_settings())
    table = Table(title="rewardstream smoke run")
    for column in ("service", "check", "result", "seconds"):
        table.add_column(column)
    for result in results:
        mark = f"[green]ok[/] {result.detail}" if result.ok else f"[red]FAILED[/] {result.detail}"
        table.add_row(result.service, result.what, mark, f"{result.seconds:.2f}")
    console.print(table)
    if not all(result.ok for result in results):
        raise typer.Exit(1)
