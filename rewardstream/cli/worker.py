"""``rewardstream worker indexer [--concurrency N]``: long-running workers (more roles join later).

SIGTERM/SIGINT stop taking work; what was not committed yet is re-delivered to the next consumer.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
from types import FrameType

import typer

from rewardstream.cli.common import load_settings
from rewardstream.cli.main import app
from workers.logs.service import run_indexers
from workers.metrics import WorkerMetrics, serve

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
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    stop = threading.Event()
    _stop_on_signals(stop)
    metrics = WorkerMetrics("indexer")
    server = serve(metrics, settings.metrics_host, settings.metrics_port if metrics_port is None else metrics_port)
    print(f"indexer: metrics on http://{settings.metrics_host}:{server.port}/metrics", file=sys.stderr, flush=True)
    try:
        run_indexers(settings, stop, concurrency=concurrency, metrics=metrics)
    finally:
        server.close()
