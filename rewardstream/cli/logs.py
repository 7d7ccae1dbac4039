"""``rewardstream logs search QUERY``: find what the workers said about a generation, task or run.

Why: SREs start from an id or a symptom ("sandbox_error", "timeout") and need the matching log lines of
every component, newest first, without writing OpenSearch queries. ``--json`` prints the hits for scripts.
"""

from __future__ import annotations

import re
import time
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from rewardstream.cli.common import TIME_CHARS, load_settings, print_json
from rewardstream.cli.main import app
from schemas.errors import ConfigError, RewardstreamError

#: Characters of a log message a table row shows (``--json`` prints it whole).
_MESSAGE_SHOWN_CHARS = 120

logs_app = typer.Typer(help="Search worker logs in OpenSearch.", no_args_is_help=True)
app.add_typer(logs_app, name="logs")

_SINCE = re.compile(r"^(\d{1,6})([smhdw])$")
#: Exact-match fields an id in QUERY may name.
ID_FIELDS = ("generation_id", "episode_id", "run_id", "task_id", "event_id", "worker", "component")
TEXT_FIELDS = ("message", "exc_text")


class LogSearchError(RewardstreamError):
    """OpenSearch could not answer a log search."""


def since_expr(since: str) -> str:
    """``1h`` -> ``now-1h`` (s, m, h, d, w); anything else is a one-line error."""
    match = _SINCE.match(since.strip())
    if match is None:
        raise ConfigError(f"--since {since!r}: expected a number and a unit (s, m, h, d, w), e.g. 30m or 1h")
    return f"now-{match.group(1)}{match.group(2)}"


def build_query(
    query: str, *, run_id: str | None = None, status: str | None = None, since: str | None = None, size: int = 50
) -> dict[str, Any]:
    """The OpenSearch request body: QUERY matches an id exactly or the message text; filters narrow it."""
    filters: list[dict[str, Any]] = []
    if run_id:
        filters.append({"term": {"run_id": run_id}})
    if status:
        filters.append({"term": {"fields.status": status}})
    if since:
        filters.append({"range": {"created_at": {"gte": since_expr(since)}}})
    text = query.strip()
    if text in ("", "*"):
        must: dict[str, Any] = {"match_all": {}}
    else:
        should: list[dict[str, Any]] = [{"term": {name: text}} for name in ID_FIELDS]
        should.append({"simple_query_string": {"query": text, "fields": list(TEXT_FIELDS), "default_operator": "and"}})
        should.append({"term": {"fields.status": text}})
        must = {"bool": {"should": should, "minimum_should_match": 1}}
    return {
        "query": {"bool": {"must": [must], "filter": filters}},
        "sort": [{"created_at": {"order": "desc"}}],
        "size": size,
    }


def search(
    client: Any, index_prefix: str, body: dict[str, Any], *, unavailable_wait_s: float = 15.0
) -> list[dict[str, Any]]:
    """Hits over every daily index: ``_source`` plus ``_index`` and ``_id``.

    A 503 (a daily index just created, its shard not started yet: "search_phase_execution_exception") is
    retried with backoff for ``unavailable_wait_s``; any other failure is reported at once.
    """
    deadline = time.monotonic() + unavailable_wait_s
    delay = 0.2
    while True:
        try:
            response = client.search(index=f"{index_prefix}-*", body=body, ignore_unavailable=True)
            break
        except Exception as exc:  # opensearch-py raises transport/connection errors of many kinds
            if getattr(exc, "status_code", None) == 503 and time.monotonic() + delay < deadline:
                time.sleep(delay)
                delay = min(2 * delay, 2.0)
                continue
            raise LogSearchError(f"log search in {index_prefix}-* failed: {type(exc).__name__}: {exc}") from exc
    return [{"_index": h["_index"], "_id": h["_id"], **h["_source"]} for h in response["hits"]["hits"]]


def _table(hits: list[dict[str, Any]]) -> Table:
    table = Table("time", "level", "component", "status", "task", "generation", "message", show_lines=False)
    for hit in hits:
        fields = hit.get("fields") or {}
        table.add_row(
            str(hit.get("created_at", ""))[:TIME_CHARS],
            str(hit.get("level", "")),
            str(hit.get("component", "")),
            str(fields.get("status", "")),
            str(hit.get("task_id") or ""),
            str(hit.get("generation_id") or ""),
            str(hit.get("message", ""))[:_MESSAGE_SHOWN_CHARS],
        )
    return table


@logs_app.command("search")
def search_command(
    query: Annotated[str, typer.Argument(help="an id (generation, run, task, worker) or words of the message")],
    *,
    run_id: Annotated[str | None, typer.Option("--run-id", help="only this training run")] = None,
    status: Annotated[str | None, typer.Option("--status", help="sandbox status, e.g. timeout, sandbox_error")] = None,
    since: Annotated[str | None, typer.Option("--since", help="only newer than this, e.g. 30m, 1h, 2d")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=10_000, help="most hits shown")] = 50,
    as_json: Annotated[bool, typer.Option("--json", help="print the hits as a JSON list")] = False,
) -> None:
    """Search the indexed worker logs, newest first."""
    from workers.logs.service import opensearch_client

    settings = load_settings()
    body = build_query(query, run_id=run_id, status=status, since=since, size=limit)
    client = opensearch_client(settings, timeout_s=30.0)
    try:
        hits = search(client, settings.opensearch.index_prefix, body)
    finally:
        client.close()
    if as_json:
        print_json(hits)
    elif hits:
        Console().print(_table(hits))
    else:
        Console(stderr=True).print("no matching log lines")
