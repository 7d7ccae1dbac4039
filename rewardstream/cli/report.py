"""``rewardstream report --run-id R --out FILE.html``: one run's rewards as a self-contained HTML page.

The rewards topic is the source of truth (every reward of the run); the generations, executions and verdicts
topics add each reward's policy checkpoint and latency, the hidden runs' statuses and the sandbox errors. The
plotting library is imported only here, inside the command: no other command pays for it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rewardstream.cli.common import load_settings
from rewardstream.cli.main import app


@app.command("report")
def report(
    run_id: Annotated[str, typer.Option("--run-id", help="the training run to report on")],
    out: Annotated[Path, typer.Option("--out", help="the HTML file to write")] = Path("report.html"),
) -> None:
    """Write one self-contained HTML page of a run's rewards: distributions by task and policy version, latency,
    outcomes, hack flags and canaries, the public-vs-hidden gap, infrastructure errors, the slowest tasks."""
    from streams.report.gather import gather
    from streams.report.page import render
    from streams.report.read import read_run

    settings = load_settings()
    records = read_run(settings.kafka_client_config(), settings.kafka.topic_prefix, run_id)
    page = render(gather(run_id, records))
    out.write_text(page, encoding="utf-8")
    typer.echo(f"{out}: run {run_id}, {len(page) // 1024} KiB")
