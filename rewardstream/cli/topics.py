"""``rewardstream topics [--json]`` and ``rewardstream topics create``: the topic catalog."""

from __future__ import annotations

import typer

from rewardstream.cli.common import load_settings, print_json
from rewardstream.cli.main import app
from schemas.errors import ConfigError
from schemas.settings import KafkaSettings, Settings, defaults
from schemas.topics import TopicSpec, catalog, markdown_table

topics_app = typer.Typer(
    help="The topic catalog: names, partitions, retention; create topics idempotently.",
    invoke_without_command=True,
    no_args_is_help=False,
)
app.add_typer(topics_app, name="topics")

_PREFIX = typer.Option(
    None, "--prefix", help=f"topic name prefix (default: RS_TOPIC_PREFIX or {defaults(KafkaSettings).topic_prefix!r})"
)
_PARTITIONS = typer.Option(None, "--partitions", min=1, help="partitions (default: RS_TOPIC_PARTITIONS)")
_JSON = typer.Option(False, "--json", help="print JSON instead of a table")
_MARKDOWN = typer.Option(False, "--markdown", help="print the docs' Markdown table (docs/tasks.md)")


def _specs(settings: Settings, prefix: str | None, partitions: int | None) -> tuple[TopicSpec, ...]:
    return catalog(
        prefix=settings.kafka.topic_prefix if prefix is None else prefix,
        partitions=settings.kafka.topic_partitions if partitions is None else partitions,
        replication_factor=settings.kafka.replication_factor(),
    )


@topics_app.callback()
def show(
    ctx: typer.Context,
    as_json: bool = _JSON,
    as_markdown: bool = _MARKDOWN,
    prefix: str | None = _PREFIX,
    partitions: int | None = _PARTITIONS,
) -> None:
    """Print the catalog: one topic per role, as ``{"topics": [...]}`` with --json."""
    ctx.obj = {"prefix": prefix, "partitions": partitions}
    if ctx.invoked_subcommand is not None:
        return
    specs = _specs(load_settings(), prefix, partitions)
    if as_json:
        print_json({"topics": [s.as_json() for s in specs]})
        return
    if as_markdown:
        typer.echo(markdown_table(specs), nl=False)
        return
    for s in specs:
        days = s.retention_ms / 86_400_000
        typer.echo(
            f"{s.role:<12} {s.name:<28} partitions={s.partitions:<4} retention={days:g}d "
            f"cleanup={s.cleanup_policy:<8} value={s.model.__name__}"
        )


@topics_app.command("create")
def create(
    ctx: typer.Context,
    as_json: bool = _JSON,
    prefix: str | None = _PREFIX,
    partitions: int | None = _PARTITIONS,
    timeout_s: float = typer.Option(30.0, "--timeout", min=1, help="admin request timeout, seconds"),
) -> None:
    """Create missing topics; report (never ignore) existing topics that differ from the catalog."""
    from bus.admin import ensure_topics

    parent = ctx.obj if isinstance(ctx.obj, dict) else {}
    settings = load_settings()
    specs = _specs(
        settings,
        prefix if prefix is not None else parent.get("prefix"),
        partitions if partitions is not None else parent.get("partitions"),
    )
    report = ensure_topics(specs, settings.kafka_client_config(), timeout_s)
    if as_json:
        print_json(report.as_json())
    else:
        for t in report.topics:
            detail = f": {'; '.join(t.differences)}" if t.differences else ""
            typer.echo(f"{t.role:<12} {t.name:<28} {t.status}{detail}")
    if report.differing:
        summary = "; ".join(f"{t.name} {', '.join(t.differences)}" for t in report.differing)
        raise ConfigError(f"{len(report.differing)} topic(s) differ from the catalog: {summary}")
