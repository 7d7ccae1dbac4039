"""``rewardstream explain GENERATION_ID``: the whole story of one generation.

The event, its public results, its hidden verdict (counts and per-case statuses, never the hidden tests), flags,
judge score, the reward math re-evaluated under the policy the reward names, its log lines and artifact
links. Log lines come from OpenSearch (and say where the generation's message is); events from a bounded
scan of the topics (``--scan-limit`` messages per partition; the output says what was scanned).

A generation an agent episode submitted also gets the episode: how it ended, its final workspace snapshot
(URL and size) and its steps, from the ``actions`` and ``observations`` topics (``streams.explain.episode``),
printed bounded (``explain_episode``), and the episode worker's log lines (they name the episode, not the
generation). An image task's verdict adds what its ``test.sh`` decided and the evidence: the task image it
ran on, the reward file, the end of test.sh's output (``explain_verifier``). A one-shot generation prints
exactly as it did.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.syntax import Syntax
from rich.table import Table

from rewardstream.cli.common import TIME_CHARS, load_settings, print_json
from rewardstream.cli.explain_episode import episode_lines
from rewardstream.cli.explain_verifier import verifier_rows
from rewardstream.cli.logs import LogSearchError, search
from rewardstream.cli.main import app
from schemas.caps import QUOTE_CHARS
from schemas.errors import RewardstreamError
from schemas.events import GenerationEvent
from schemas.settings import Settings
from streams.explain.episode import locate_episode
from streams.explain.locate import DEFAULT_SCAN_LIMIT, Hint, Located, locate
from streams.explain.steps import SnapshotSize, episode_section, is_episode

#: Lines of the generation's code shown in the human-readable story (``--json`` has all of it).
CODE_LINES = 40


class GenerationNotFoundError(RewardstreamError):
    """No event of the generation was found where explain looked."""


def _logs(
    settings: Settings, query: dict[str, Any], limit: int, *, newest: bool = False
) -> tuple[list[dict[str, Any]], str | None]:
    """Log lines matching ``query``, oldest first (the oldest ``limit``, or with ``newest`` the newest); an
    unreachable OpenSearch is reported, not fatal."""
    from workers.logs.service import opensearch_client

    body = {"query": query, "sort": [{"created_at": {"order": "desc" if newest else "asc"}}]}
    client = opensearch_client(settings, timeout_s=30.0)
    try:
        found = search(client, settings.opensearch.index_prefix, {**body, "size": limit})
        return (found[::-1] if newest else found), None
    except LogSearchError as exc:
        return [], str(exc)
    finally:
        client.close()


def _with_episode_logs(
    settings: Settings, episode_id: str, logs: list[dict[str, Any]], limit: int
) -> tuple[list[dict[str, Any]], str | None]:
    """``logs`` and the episode worker's lines (they name the episode, not a generation), the newest
    ``limit`` of them all: the grading comes after the episode."""
    query = {
        "bool": {"must": [{"term": {"episode_id": episode_id}}], "must_not": [{"exists": {"field": "generation_id"}}]}
    }
    steps, error = _logs(settings, query, limit, newest=True)
    merged = sorted([*logs, *steps], key=lambda line: str(line.get("created_at")))
    return merged[-limit:], error


def _snapshot_size(settings: Settings, url: str) -> SnapshotSize:
    """The snapshot's size from S3 (its metadata only); an unreachable S3 is reported, not fatal."""
    from workers.artifacts import minio_client, parse_url

    try:
        bucket, key = parse_url(url)
        return SnapshotSize(size_bytes=int(minio_client(settings, timeout_s=5.0).stat_object(bucket, key).size))
    except Exception as exc:  # whatever S3 says, explain goes on and says it
        return SnapshotSize(error=f"{type(exc).__name__}: {str(exc)[:QUOTE_CHARS]}")


def _episode(settings: Settings, located: Located, scan_limit: int) -> dict[str, Any] | None:
    """The episode section of a generation that came from an episode (its scans added to ``located``)."""
    generation = located.generation()
    if generation is None or not is_episode(generation.event):
        return None
    event = generation.event
    assert isinstance(event, GenerationEvent)  # noqa: S101 - is_episode says so
    records = locate_episode(
        settings.kafka_client_config(), settings.kafka.topic_prefix, generation, scan_limit=scan_limit
    )
    located.scanned.extend(records.scanned)
    return episode_section(event, records, _snapshot_size(settings, event.workspace_ref or ""))


def _hints(logs: list[dict[str, Any]]) -> list[Hint]:
    hints = []
    for line in logs:
        topic, partition, offset = line.get("topic"), line.get("partition"), line.get("offset")
        if isinstance(topic, str) and isinstance(partition, int) and isinstance(offset, int):
            hints.append(Hint(topic, partition, offset))
    return hints


def _policies(extra: list[Path]) -> list[Path]:
    packaged = Path(__file__).resolve().parents[2] / "streams" / "reward" / "policies"
    from streams.reward.policy import default_policy_path

    return [*extra, default_policy_path(), *sorted(packaged.glob("*.toml"))]


def _kv(table: Table, name: str, value: object) -> None:
    table.add_row(name, "" if value is None else str(value))


def _section(console: Console, title: str, rows: dict[str, object] | None) -> None:
    if rows is None:
        console.print(f"[bold]{title}[/bold]: not found")
        return
    table = Table(title=title, title_justify="left", show_header=False, box=None, padding=(0, 1))
    for key, value in rows.items():
        _kv(table, key, value)
    console.print(table)


#: Below this wait for a CPU, a run's host row is left out: the host did nothing worth a line.
HOST_ROW_MIN_WAIT_MS = 50.0


def _host(sandbox: dict[str, Any]) -> dict[str, object]:
    """What the host did to a run, as a row when it did something: how long the run waited for a CPU (never
    counted by its limits) and how often it was repeated because the host starved it."""
    wait_ms = float(sandbox.get("wait_ms", 0.0))
    retries = int(sandbox.get("host_retries", 0))
    if wait_ms < HOST_ROW_MIN_WAIT_MS and not retries:
        return {}
    waited = f"waited {wait_ms / 1000:.1f} s for a CPU (not counted)"
    return {"host": waited + (f"; repeated {retries}x: the host starved it" if retries else "")}


def _validity(reward: dict[str, Any]) -> dict[str, str]:
    """A line saying a reward is no training data, and why; nothing for a valid one (or a 1.0 one, which claims
    nothing), so those print as before."""
    if reward.get("valid") is not False:
        return {}
    hack = ": a detected hack" if reward["canary"] and reward["reward"] > 0 else ""
    return {"training data": f"no ({reward['invalid_reason']}{hack})"}


def _where(section: dict[str, Any]) -> str:
    loc = section["location"]
    return f"{loc['topic']}[{loc['partition']}]@{loc['offset']}"


def _version(section: dict[str, Any], name: str = "task version") -> dict[str, object]:
    """The task version a section names, as a row (none when it names none: printed as before versions)."""
    version = section.get("task_version")
    return {name: version} if version else {}


def _render(story: dict[str, Any], console: Console) -> None:
    gen, ex, ver, judge, reward = (story[k] for k in ("generation", "execution", "verdict", "judgement", "reward"))
    episode = story.get("episode")
    console.print(f"[bold]generation {story['generation_id']}[/bold]")
    _section(console, "event", gen and {
        "run / task": f"{gen['run_id']} / {gen['task_id']}", "policy version": gen["policy_version"],
        **_version(gen, "pinned task version"), "created": gen["created_at"],
        "code": f"{gen['code_chars']} chars inline" if gen["code_ref"] is None else gen["code_ref"], "at": _where(gen),
    } | ({"code": "none: an agent episode's final workspace (below)"} if episode is not None else {}))  # fmt: skip
    if gen and gen["code"]:
        lines = gen["code"].splitlines()
        shown = "\n".join(lines[:CODE_LINES]) + (
            f"\n... ({len(lines) - CODE_LINES} more lines)" if len(lines) > CODE_LINES else ""
        )
        console.print(Syntax(shown, "python", line_numbers=True))
    if episode is not None:
        console.print("[bold]agent episode[/bold]")
        for line in episode_lines(episode):
            console.print(line, markup=False, highlight=False)
    _section(console, "public tests (executor)", ex and {
        "sandbox": ex["sandbox"]["status"], "passed": f"{ex['passed']}/{ex['total']}",
        "cases": ", ".join(f"{c['case_id']}={c['status']}" for c in ex["cases"]), "feedback": ex["feedback"],
        **_host(ex["sandbox"]), "attempt": f"{ex['attempt']} ({ex['attempts_seen']} seen)",
        "worker": ex["worker"], **_version(ex), "at": _where(ex),
    })  # fmt: skip
    image_task = bool(ver) and ver.get("suite_kind") == "verifier"
    title = (
        "hidden verdict (an image task's verifier: test.sh)" if image_task else "hidden verdict (verifier; counts only)"
    )
    _section(console, title, ver and {
        "sandbox": ver["sandbox"]["status"], "passed": f"{ver['passed']}/{ver['total']}",
        "statuses": ", ".join(f"{k}: {v}" for k, v in ver["statuses"].items()),
        "static flags": ", ".join(f"{f['rule']} (line {f['line']})" for f in ver["static_flags"]) or "none",
        "flag counts": ", ".join(f"{k}: {v}" for k, v in ver.get("static_flag_counts", {}).items()) or "-",
        **verifier_rows(ver.get("verifier")), **_host(ver["sandbox"]), "grader": ver["grader_version"],
        "worker": ver["worker"], **_version(ver), "at": _where(ver),
    })  # fmt: skip
    _section(console, "judge", judge and {
        "score": judge["score"] if judge["status"] == "ok" else f"error: {judge['error']}",
        "model": f"{judge['judge_model']} (prompt {judge['prompt_version']})", "rationale": judge["rationale"],
        **_version(judge), "at": _where(judge),
    })  # fmt: skip
    _section(console, "reward", reward and {
        "reward": reward["reward"], "policy": f"{reward['policy_name']} v{reward['policy_version']}",
        **_validity(reward), **_version(reward),
        "flags": ", ".join(reward["flags"]) or "none", "missing": ", ".join(reward["missing"]) or "none",
        "reasons": "\n".join(reward["reasons"]), "at": _where(reward),
    })  # fmt: skip
    math = story["math"]
    if math is not None:
        console.print(f"[bold]reward math ({math['policy']})[/bold]")
        for number, step in enumerate(math["steps"], 1):
            console.print(f"  {number}. {step}", markup=False)
    _section(console, "artifacts", story["artifacts"] or {"(none)": ""})
    logs = Table("time", "level", "component", "message", title="log lines", title_justify="left")
    for line in story["logs"]:
        logs.add_row(
            str(line["created_at"])[:TIME_CHARS], str(line["level"]), str(line["component"]), str(line["message"])
        )
    console.print(logs if story["logs"] else "[bold]log lines[/bold]: none indexed")
    if story["log_search_error"]:
        console.print(f"log search failed: {story['log_search_error']}", markup=False)
    scanned = "; ".join(
        f"{s['topic']} {', '.join(f'{p}:{a}..{b}' for p, (a, b) in s['ranges'].items())} ({s['messages']} messages)"
        for s in story["scanned"]
    )
    console.print(f"scanned: {scanned}", markup=False, style="dim")


@app.command("explain")
def explain(
    generation_id: Annotated[str, typer.Argument(help="the generation to explain")],
    *,
    as_json: Annotated[bool, typer.Option("--json", help="print the story as one JSON document")] = False,
    policy: Annotated[
        list[Path] | None, typer.Option("--policy", help="policy file(s) to find the reward's policy in (repeatable)")
    ] = None,
    scan_limit: Annotated[
        int, typer.Option("--scan-limit", min=1, help="most messages read per topic partition")
    ] = DEFAULT_SCAN_LIMIT,
    log_limit: Annotated[int, typer.Option("--log-limit", min=1, max=10_000, help="most log lines")] = 200,
) -> None:
    """Show everything about one generation: events, verdicts, judge, reward math, logs, artifacts (and an
    agent episode's steps)."""
    from streams.explain.story import build_story

    settings = load_settings()
    logs, log_error = _logs(settings, {"term": {"generation_id": generation_id}}, log_limit)
    located = locate(
        settings.kafka_client_config(),
        settings.kafka.topic_prefix,
        generation_id,
        hints=_hints(logs),
        scan_limit=scan_limit,
    )
    if located.generation() is None and not logs:
        where = "; ".join(f"{s.topic} ({s.messages} messages)" for s in located.scanned)
        raise GenerationNotFoundError(f"generation {generation_id} not found: no log lines, and not in {where}")
    episode = _episode(settings, located, scan_limit)
    if episode is not None and log_error is None:
        logs, log_error = _with_episode_logs(settings, episode["episode_id"], logs, log_limit)
    story = build_story(located, logs, _policies(list(policy or [])), log_error, episode)
    if as_json:
        print_json(story)
    else:
        _render(story, Console(soft_wrap=True))
