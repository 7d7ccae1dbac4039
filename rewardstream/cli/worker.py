"""``rewardstream worker executor|verifier|judge|episode|indexer [--concurrency N]``: long-running workers.

SIGTERM/SIGINT stop taking work; what was not committed yet is re-delivered to the next consumer.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
from types import FrameType

import typer

from bus.metrics import WorkerMetrics, serve
from rewardstream.cli.common import configure_logging, load_settings, open_sandbox
from rewardstream.cli.main import app
from workers.logs.service import run_indexers

worker_app = typer.Typer(help="Run a worker process (consumer group member) until SIGTERM.", no_args_is_help=True)
app.add_typer(worker_app, name="worker")

_CONCURRENCY = typer.Option(1, "--concurrency", "-c", min=1, max=64, help="consumers in this process")
_METRICS_PORT = typer.Option(None, "--metrics-port", min=0, max=65535, help="default: RS_METRICS_PORT")


def _stop_on_signals(stop: threading.Event) -> None:
    def handler(signum: int, _frame: FrameType | None) -> None:
        logging.getLogger("rewardstream.worker").info("signal %d: stopping", signum)
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


@worker_app.command("indexer")
def indexer(concurrency: int = _CONCURRENCY, metrics_port: int | None = _METRICS_PORT) -> None:
    """Bulk-index LogRecords from the logs topic into daily OpenSearch indices, exactly once per record."""
    settings = load_settings()
    configure_logging()
    stop = threading.Event()
    _stop_on_signals(stop)
    metrics = WorkerMetrics("indexer")
    server = serve(
        metrics, settings.worker.metrics_host, settings.worker.metrics_port if metrics_port is None else metrics_port
    )
    print(
        f"indexer: metrics on http://{settings.worker.metrics_host}:{server.port}/metrics", file=sys.stderr, flush=True
    )
    try:
        run_indexers(settings, stop, concurrency=concurrency, metrics=metrics)
    finally:
        server.close()


_RUN_CONCURRENCY = typer.Option(
    None,
    "--concurrency",
    "-c",
    min=1,
    max=256,
    help="sandbox runs / judge calls at once (default: RS_WORKER_CONCURRENCY)",
)


def _run_role(role: str, concurrency: int | None, metrics_port: int | None) -> None:
    """Run one executor/verifier/judge/episode worker until SIGTERM, then drain within RS_WORKER_DRAIN_TIMEOUT_S."""
    import faulthandler

    from rewardstream.cli.task_images import image_task_host
    from workers.containers.task_host import ImageTaskHost
    from workers.roles.episode_worker import build_episode_worker
    from workers.roles.service import Dependencies, RoleName, run_worker

    settings = load_settings()
    configure_logging()
    faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)  # SREs: dump stacks of a stuck worker
    stop = threading.Event()
    _stop_on_signals(stop)
    metrics = WorkerMetrics(role)
    server = serve(
        metrics, settings.worker.metrics_host, settings.worker.metrics_port if metrics_port is None else metrics_port
    )
    print(
        f"{role}: metrics on http://{settings.worker.metrics_host}:{server.port}/metrics", file=sys.stderr, flush=True
    )
    chosen: RoleName = "executor" if role == "executor" else ("verifier" if role == "verifier" else "judge")
    sandbox = None if role == "judge" else open_sandbox(settings)
    images = image_task_host(settings, role) if role in ("verifier", "episode") else None
    deps = Dependencies(sandbox=sandbox, image_tasks=images)
    try:
        if role == "episode":
            with build_episode_worker(settings, stop, metrics, deps, concurrency) as worker:
                stats = worker.run()
        else:
            stats = run_worker(settings, chosen, stop, metrics, concurrency=concurrency, deps=deps)
    finally:
        server.close()
        if sandbox is not None:
            sandbox.close()
        if isinstance(images, ImageTaskHost):
            images.client.close()
    print(
        f"{role}: stopped; committed {stats.committed} ({stats.results} results, {stats.dead_letters} dead letters) "
        f"in {stats.transactions} transactions, {stats.aborted} aborted",
        file=sys.stderr,
        flush=True,
    )


@worker_app.command("executor")
def executor(concurrency: int | None = _RUN_CONCURRENCY, metrics_port: int | None = _METRICS_PORT) -> None:
    """Run public tests of every generation -> executions (the feedback a multi-turn agent reads)."""
    _run_role("executor", concurrency, metrics_port)


@worker_app.command("verifier")
def verifier(concurrency: int | None = _RUN_CONCURRENCY, metrics_port: int | None = _METRICS_PORT) -> None:
    """Run hidden tests and static analysis of every generation -> verdicts."""
    _run_role("verifier", concurrency, metrics_port)


@worker_app.command("episode")
def episode(concurrency: int | None = _RUN_CONCURRENCY, metrics_port: int | None = _METRICS_PORT) -> None:
    """Run agent episodes: each action on rs.actions -> one sandbox step -> its observation (and, on the
    episode's end, the generation of its final workspace)."""
    _run_role("episode", concurrency, metrics_port)


@worker_app.command("judge")
def judge(concurrency: int | None = _RUN_CONCURRENCY, metrics_port: int | None = _METRICS_PORT) -> None:
    """Score every generation with the configured judge (RS_JUDGE_BACKEND) -> judgements."""
    _run_role("judge", concurrency, metrics_port)


@worker_app.command("auditor")
def auditor(concurrency: int | None = _RUN_CONCURRENCY, metrics_port: int | None = _METRICS_PORT) -> None:
    """Re-grade a sample of verdicts (RS_AUDIT_RATE) on the other sandbox backend -> audits (never rewards)."""
    from schemas.backends import BACKENDS
    from schemas.errors import RewardstreamError
    from workers.audits.service import build_auditor
    from workers.sandbox.api import Sandbox

    settings = load_settings()
    configure_logging()
    stop = threading.Event()
    _stop_on_signals(stop)
    metrics = WorkerMetrics("auditor")
    port = settings.worker.metrics_port if metrics_port is None else metrics_port
    server = serve(metrics, settings.worker.metrics_host, port)
    print(f"auditor: metrics on http://{settings.worker.metrics_host}:{server.port}/metrics", file=sys.stderr,
          flush=True)  # fmt: skip
    sandboxes: dict[str, Sandbox] = {}
    try:
        for backend in BACKENDS:  # both: a verdict's audit runs on the backend that did not grade it
            try:
                sandboxes[backend] = open_sandbox(settings, backend)
            except RewardstreamError as exc:
                logging.getLogger("rewardstream.worker").warning("auditor: no %s backend: %s", backend, exc)
        with build_auditor(settings, stop, metrics, sandboxes=sandboxes, concurrency=concurrency) as worker:
            worker.run()
    finally:
        server.close()
        for sandbox in sandboxes.values():
            sandbox.close()
