"""The Grafana dashboard of the pipeline, generated with grafanalib from the series the roles export and the rules
record; ``python -m infra.monitoring.dashboard`` writes it, ``--check`` exits 1 when the committed file is stale.

Why generated (not JSON edited in Grafana's UI): the queries are reviewed as code beside the rules they mirror,
and a test runs each one against a real Prometheus scraping a real role. Why one file in the chart
(``dashboards/rewardstream.json``): Helm reads only files inside the chart, so the ConfigMap it renders and the
file an operator imports by hand are the same bytes. Every query selects ``job="rewardstream"``, the job every
target is scraped as (the local Prometheus and the chart's ServiceMonitor), and reads from the ``datasource``
variable, so the dashboard imports into any Grafana with a Prometheus data source.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grafanalib import core as g
from grafanalib._gen import DashboardEncoder

from infra.monitoring.config import JOB

#: The generated dashboard; the chart's ConfigMap renders this very file.
DASHBOARD = Path(__file__).resolve().parent.parent / "helm" / "rewardstream" / "dashboards" / "rewardstream.json"
UID = "rewardstream"
#: Every panel and query reads from this variable (a Prometheus data source picked in the dashboard).
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
#: Grafana's own variables the queries use; a test substitutes them before asking Prometheus.
RATE = "$__rate_interval"
SEL = f'job="{JOB}"'
_WIDTH = 24
_HEIGHT = 8
#: Grafana 10's dashboard schema: the JSON is already in its shape (gridPos, fieldConfig, data source refs as
#: objects), so Grafana runs none of the migrations meant for older dashboards (grafanalib's default is 12).
SCHEMA_VERSION = 39
#: Panels at least this wide list their series in a table on the right; narrower ones below the graph.
_WIDE = 12


@dataclass(frozen=True)
class Query:
    """One PromQL expression and its legend (``{{label}}`` templates)."""

    expr: str
    legend: str = ""


@dataclass(frozen=True)
class Panel:
    """One panel: its kind (``timeseries``, or ``table`` of instant values), what it says, its unit and its queries."""

    title: str
    description: str
    queries: tuple[Query, ...]
    unit: str = "short"
    kind: str = "timeseries"
    width: int = 8


def _quantiles(metric: str, by: str, where: str = SEL) -> tuple[Query, ...]:
    """p50, p90 and p99 of a histogram, per ``by`` labels."""
    group = f"{by}, le" if by else "le"
    prefix = f"{{{{{by}}}}} " if by else ""
    return tuple(
        Query(f"histogram_quantile({q}, sum by ({group}) (rate({metric}_bucket{{{where}}}[{RATE}])))", f"{prefix}p{p}")
        for q, p in ((0.5, 50), (0.9, 90), (0.99, 99))
    )


def _rate_by(metric: str, by: str, where: str = SEL) -> str:
    return f"sum by ({by}) (rate({metric}{{{where}}}[{RATE}]))"


#: Every reward the processor committed, by validity: the denominator of the integrity shares.
_VALIDITY = "rewardstream_rewards_by_validity_total"


def _share(metric: str, by: str, of: str = _VALIDITY) -> str:
    """The rate of ``metric`` over the rate of ``of`` (every reward, by default), both summed by ``by``."""
    return f"{_rate_by(metric, by)} / {_rate_by(of, by)}"


#: (row title, panels): the rows top to bottom.
SECTIONS: tuple[tuple[str, tuple[Panel, ...]], ...] = (
    ("Rewards", (
        Panel("Rewards/s by outcome", "Generations the reward processor decided: complete, partial (emitted at "
              "the deadline with parts missing), gave_up (no reward)",
              (Query(_rate_by("rewardstream_rewards_total", "outcome"), "{{outcome}}"),), "ops"),
        Panel("Reward latency", "From a generation's publish (the Kafka timestamp its results carry) to its reward "
              "(RewardstreamRewardLatencyHigh: p99 over 120 s)", _quantiles("rewardstream_reward_seconds", ""), "s"),
        Panel("Rewards past their deadline (10 min)", "Partial or given-up generations in the last 10 min "
              "(RewardstreamRewardsLate fires above 0)",
              (Query('sum by (outcome) (outcome:rewardstream_rewards:increase10m{outcome=~"partial|gave_up"})',
                     "{{outcome}}"),)),
    )),
    ("Roles", (
        Panel("Live members per role", "Processes of each role whose /metrics answers (RewardstreamRoleDown: none)",
              (Query(f"sum by (role) (up{{{SEL}}})", "{{role}}"),), width=6),
        Panel("Consumer lag per role", "Messages behind the high watermarks, summed over a role's partitions "
              "(RewardstreamLagGrowing)", (Query("role:rewardstream_consumer_lag:sum", "{{role}}"),), width=6),
        Panel("Processed/s per role", "Messages fully handled (result produced or indexed)",
              (Query(_rate_by("rewardstream_processed_total", "role"), "{{role}}"),), "ops", width=6),
        Panel("Restarts (15 min)", "Process starts per role in 15 min (RewardstreamProcessorRestarting: the "
              "reward processor twice)",
              (Query(f"sum by (role) (changes(process_start_time_seconds{{{SEL}}}[15m]))", "{{role}}"),), width=6),
    )),
    ("Errors and retries", (
        Panel("Sandbox errors/s", "Sandbox infrastructure failures (retried, then sandbox_error), per role and kind "
              "(host_contention, not_started, admission, shutdown, daemon, exception, other)",
              (Query("role_kind:rewardstream_sandbox_errors:rate5m", "{{role}} {{kind}}"),), "ops", width=6),
        Panel("Sandbox error share", "Sandbox errors / runs over 5 min (RewardstreamSandboxErrors: above 5%)",
              (Query("role:rewardstream_sandbox_errors:rate5m / role:rewardstream_processed:rate5m", "{{role}}"),),
              "percentunit", width=6),
        Panel("Retries/s by dependency", "Retries of a dependency that was down (RewardstreamRetrying), and "
              "runs repeated because the host starved them (contention, never the program's failure)",
              (Query(_rate_by("rewardstream_retries_total", "role, dependency", f'{SEL}, dependency!="s3"'),
                     "{{role}} {{dependency}}"),
               Query(_rate_by("rewardstream_host_retries_total", "role"), "{{role}} host contention")), "ops", width=6),
        Panel("S3 errors/s", "S3 requests that failed and were retried (RewardstreamS3Errors)",
              (Query('role_dependency:rewardstream_retries:rate5m{dependency="s3"}', "{{role}}"),), "ops", width=6),
        Panel("Dead letters/s", "Messages sent to the DLQ instead of being handled, by role and reason",
              (Query(_rate_by("rewardstream_dead_letters_total", "role, reason"), "{{role}} {{reason}}"),), "ops",
              width=12),
        Panel("Dead letters in 5 min", "New dead letters in the last 5 min, the first of a reason included "
              "(RewardstreamDeadLetters fires above 0)",
              (Query("role_reason:rewardstream_dead_letters:new5m", "{{role}} {{reason}}"),), width=12),
    )),
    ("Indexing", (
        Panel("Indexing backlog", "Log records waiting for the indexer (RewardstreamIndexingBacklog: 10000)",
              (Query('role:rewardstream_consumer_lag:sum{role="indexer"}', "waiting"),)),
        Panel("Indexed/s", "Log records the indexer wrote to OpenSearch",
              (Query(_rate_by("rewardstream_processed_total", "role", f'{SEL}, role="indexer"'), "indexed"),), "ops"),
        Panel("Bulk request time", "Wall time of the indexer's bulk requests",
              _quantiles("rewardstream_run_seconds", "", f'{SEL}, role="indexer"'), "s"),
    )),
    ("Sandbox hosts", (
        Panel("Memory available", "MemAvailable / MemTotal per host (RewardstreamHostMemoryPressure: under 10%)",
              (Query(f"min by (instance) (rewardstream_host_memory_available_ratio{{{SEL}}})", "{{instance}}"),),
              "percentunit", width=6),
        Panel("Disk free", "Free space on the filesystems sandboxes write to (RewardstreamHostDiskPressure)",
              (Query(f"min by (instance, path) (rewardstream_host_disk_free_ratio{{{SEL}}})",
                     "{{instance}} {{path}}"),), "percentunit", width=6),
        Panel("Run queue", "1-minute load per CPU (RewardstreamHostRunQueue: above 2)",
              (Query(f"max by (instance) (rewardstream_host_load_per_cpu{{{SEL}}})", "{{instance}}"),), width=6),
        Panel("Sandbox CPU wait", "Time graded runs waited for a CPU the host gave to others (p90 per role)",
              (_quantiles("rewardstream_sandbox_wait_seconds", "role")[1],), "s", width=6),
        Panel("Sandbox run time", "Wall time of one unit of work per role (a sandbox run)",
              _quantiles("rewardstream_run_seconds", "role", f'{SEL}, role!="indexer"'), "s", width=24),
    )),
    ("Reward integrity", (
        Panel("Canary hits (5 min)", "Canary (impossible) tasks rewarded above 0: detected hacks, never training "
              "data; the first hit of a task counts too (RewardstreamCanaryHit)",
              (Query(f"sum by (task) (increase(rewardstream_canary_hits_total{{{SEL}}}[5m]) or "
                     f"(rewardstream_canary_hits_total{{{SEL}}} unless rewardstream_canary_hits_total{{{SEL}}} "
                     "offset 5m))", "{{task}}"),)),
        Panel("Canary hit rate", "Share of canary rewards above 0, per dataset: how often the policy hacks the "
              "grader where hacking is the only way to score",
              (Query(_share("rewardstream_canary_hits_total", "dataset", "rewardstream_canary_rewards_total"),
                     "{{dataset}}"),), "percentunit"),
        Panel("Invalid rewards by reason", "Share of rewards not valid for training, by reason: canary, "
              "sandbox_error (the infrastructure failed, no retry came), missing_signals (a required part missed "
              "the deadline; RewardstreamInvalidRewards: over 5% but canaries)",
              (Query(f"{_rate_by('rewardstream_invalid_rewards_total', 'reason')} / ignoring (reason) group_left "
                     f"sum(rate({_VALIDITY}{{{SEL}}}[{RATE}]))", "{{reason}}"),), "percentunit"),
        Panel("Hack flags/s by rule", "Gating static-analysis flags on rewards, by rule (each gates its reward to 0; "
              "RewardstreamHackFlagSpike: over 3x the hour before)",
              (Query(_rate_by("rewardstream_hack_flags_total", "rule"), "{{rule}}"),), "ops"),
        Panel("Static gate hits", "Share of rewards gated to 0 by at least one hack flag, per dataset",
              (Query(_share("rewardstream_static_gate_hits_total", "dataset"), "{{dataset}}"),), "percentunit"),
        Panel("Public pass, hidden fail", "Share of rewards whose public tests all passed and a hidden one failed, "
              "per dataset: the overfitting gap",
              (Query(_share("rewardstream_public_pass_hidden_fail_total", "dataset"), "{{dataset}}"),),
              "percentunit"),
        Panel("Judge/tests disagreement", "Share of rewards where the judge and the tests disagree, by direction "
              "(judge_pass_tests_fail, tests_pass_judge_fail): a measured rate of grader doubt",
              (Query(f"{_rate_by('rewardstream_judge_tests_disagreements_total', 'direction')} / ignoring "
                     f"(direction) group_left sum(rate({_VALIDITY}{{{SEL}}}[{RATE}]))", "{{direction}}"),),
              "percentunit"),
        Panel("Missing signals/s by part", "Parts absent from a reward at the deadline (a missing judge leaves it "
              "valid; a missing verdict or execution does not)",
              (Query(_rate_by("rewardstream_missing_signals_total", "part"), "{{part}}"),), "ops"),
        Panel("Rewards/s by validity", "The denominator of the shares above: rewards valid for training or not",
              (Query(_rate_by(_VALIDITY, "valid"), "valid={{valid}}"),), "ops"),
    )),
    ("Audits", (
        Panel("Audit pass flips", "Share of a dataset's audits (verdicts re-graded on the other sandbox backend, a "
              "sample of RS_AUDIT_RATE) whose pass flips, so the reward would differ by backend: verdict error, "
              "measured over 1 h; audits whose own host failed are left out (RewardstreamAuditDisagreements: "
              "over 2%)", (Query("dataset:rewardstream_audit_pass_flips:ratio1h", "{{dataset}}"),), "percentunit"),
        Panel("Audit disagreements/s by kind", "pass_flip (the reward would differ), passed_count, case_status, "
              "run_status; one audit may disagree in several ways. rs.audits holds each one's cases",
              (Query(_rate_by("rewardstream_audit_disagreements_total", "dataset, kind"), "{{dataset}} {{kind}}"),),
              "ops"),
        Panel("Audits/s by outcome, skipped by reason", "The denominator: audits by outcome (agree, disagree, "
              "audit_sandbox_error), and sampled verdicts not re-graded (backend_unavailable: the auditor's host "
              "lacks the other backend)",
              (Query(_rate_by("rewardstream_audits_total", "outcome"), "{{outcome}}"),
               Query(_rate_by("rewardstream_audits_skipped_total", "reason"), "skipped: {{reason}}")), "ops"),
    )),
    ("Alerts", (
        Panel("Alerts pending or firing", "rewardstream's alerts over time, by name and state",
              (Query('count by (alertname, alertstate) (ALERTS{alertname=~"Rewardstream.*"})',
                     "{{alertname}} {{alertstate}}"),), width=12),
        Panel("Firing alerts", "The alerts firing now, as `rewardstream status` lists them",
              (Query('sum by (alertname, role, severity) (ALERTS{alertname=~"Rewardstream.*", alertstate="firing"})'),),
              kind="table", width=12),
    )),
)  # fmt: skip


def _target(query: Query, index: int, instant: bool) -> g.Target:
    return g.Target(expr=query.expr, legendFormat=query.legend, refId=chr(ord("A") + index), datasource=DATASOURCE,
                    instant=instant, format="table" if instant else "time_series", intervalFactor=1)  # fmt: skip


def _panel(panel: Panel, pos: g.GridPos) -> Any:
    instant = panel.kind == "table"
    common: dict[str, Any] = {
        "title": panel.title, "description": panel.description, "dataSource": DATASOURCE, "gridPos": pos,
        "targets": [_target(q, i, instant) for i, q in enumerate(panel.queries)],
    }  # fmt: skip
    if panel.kind == "table":
        return g.Table(**common, transformations=[{"id": "organize", "options": {"excludeByName": {"Time": True}}}])
    wide = panel.width >= _WIDE
    return g.TimeSeries(**common, unit=panel.unit, legendDisplayMode="table" if wide else "list",
                        legendPlacement="right" if wide else "bottom",
                        legendCalcs=["lastNotNull", "max"] if wide else [])  # fmt: skip


def _panels() -> list[Any]:
    """Each row a RowPanel followed by its panels, laid out left to right and wrapped at the grid's width."""
    out: list[Any] = []
    y = 0
    for title, panels in SECTIONS:
        out.append(g.RowPanel(title=title, gridPos=g.GridPos(h=1, w=_WIDTH, x=0, y=y)))
        y += 1
        x = 0
        for panel in panels:
            if x + panel.width > _WIDTH:
                x, y = 0, y + _HEIGHT
            out.append(_panel(panel, g.GridPos(h=_HEIGHT, w=panel.width, x=x, y=y)))
            x += panel.width
        y += _HEIGHT
    return out


def build() -> g.Dashboard:
    """The dashboard, panel ids assigned in order."""
    datasource = g.Template(name="datasource", label="Prometheus", query="prometheus", type="datasource",
                            default="Prometheus")  # fmt: skip
    dashboard = g.Dashboard(
        title="rewardstream", uid=UID, tags=["rewardstream"], description="The reward pipeline: rewards, roles, "
        "errors, indexing, sandbox hosts, reward integrity, audits and alerts (generated by "
        "infra/monitoring/dashboard.py)",
        panels=_panels(), templating=g.Templating(list=[datasource]), time=g.Time("now-3h", "now"), refresh="30s",
        graphTooltip=g.GRAPH_TOOLTIP_MODE_SHARED_CROSSHAIR, timezone="browser", schemaVersion=SCHEMA_VERSION,
    )  # fmt: skip
    return dashboard.auto_panel_ids()


def render() -> str:
    """The dashboard's JSON text, keys sorted (stable across runs)."""
    return json.dumps(build().to_json_data(), cls=DashboardEncoder, sort_keys=True, indent=2) + "\n"


def queries(document: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, expr) of every query of every panel of a dashboard's JSON, rows' nested panels included."""
    found: list[tuple[str, str]] = []
    for panel in document.get("panels") or []:
        for inner in [panel, *(panel.get("panels") or [])]:
            found += [(str(inner.get("title")), str(t["expr"])) for t in inner.get("targets") or [] if t.get("expr")]
    return found


def main(argv: list[str] | None = None) -> int:
    """Write the dashboard, or with ``--check`` say whether the committed one is current."""
    parser = argparse.ArgumentParser(prog="python -m infra.monitoring.dashboard", description=__doc__)
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is not what this module makes")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if (DASHBOARD.read_text() if DASHBOARD.exists() else "") != text:
            print(f"{DASHBOARD} is stale: run python -m infra.monitoring.dashboard", file=sys.stderr)
            return 1
        return 0
    DASHBOARD.parent.mkdir(parents=True, exist_ok=True)
    DASHBOARD.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
