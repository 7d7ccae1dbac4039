"""Every query of every panel of the committed Grafana dashboard against a real Prometheus (Debian's) scraping a
real roles: each one parses and runs (``/api/v1/query`` says ``success``), and each metric name it uses is one
the roles really export, one the rules record, or one of the few named below that appear only after an event.

The roles are ``rewardstream worker indexer`` (``prometheus_env``, as ``test_alerts`` runs it) and the reward
processor (``rewardstream reward run``, ``reward_env``), with the repo's rules as they ship. A poison message and a
log record make the indexer dead-letter (firing RewardstreamDeadLetters, so ``ALERTS`` exists), index and report
its lag; generations whose parts say canary hack, hack flag, overfitting, judge doubt and missing parts make the
processor count every integrity counter; so those series are checked as scraped, not taken on trust.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from bus.clients import make_producer
from bus.metrics import WorkerMetrics
from infra.monitoring.config import Intervals, ScrapeTarget
from infra.monitoring.dashboard import DASHBOARD, RATE, queries
from infra.monitoring.promql import metric_names
from infra.monitoring.rules import RULES
from infra.monitoring.services import AlertmanagerService, PrometheusService
from schemas.events import Event
from tests.integration.prometheus_env import get_json, query, wait_for
from tests.integration.reward_env import RewardEnv, reward_env, short_deadline_policy
from tests.unit.reward_events import execution, judgement, verdict
from workers.audits.metrics import AuditMetrics
from workers.logs.shipper import LogShipper

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

#: Names neither role here exports before the event that creates them (prometheus_client shows a labelled series
#: once it is used), each with that event. Every other name must be scraped here or recorded by a rule.
EVENT_ONLY = {
    "rewardstream_retries_total": "born at a role's first retry of a dependency that was down (S3, OpenSearch)",
    "rewardstream_sandbox_wait_seconds_bucket": "a sandbox role's, observed at its first graded run",
    # The auditor does not run here (it needs both sandbox backends); its counters are born at its first audit.
    "rewardstream_audits_total": "the auditor's, born at its first committed audit",
    "rewardstream_audit_disagreements_total": "the auditor's, born at its first disagreement",
    "rewardstream_audits_skipped_total": "the auditor's, born at its first sampled verdict it cannot re-grade",
}
#: Queries that stay empty with only the indexer and the processor scraped, though every name they use is here.
EMPTY_HERE = {"Sandbox run time": "it selects the sandbox roles' run times (role!=indexer); no sandbox role runs here"}
#: Grafana's own variables, as Grafana would substitute them (4 x a 15 s scrape interval).
GRAFANA = {RATE: "1m"}
#: Series this test's events create: waited for before the queries run.
AFTER_EVENTS = {
    "rewardstream_dead_letters_total", "rewardstream_run_seconds_bucket", "rewardstream_consumer_lag", "ALERTS",
    "role:rewardstream_consumer_lag:sum", "role_reason:rewardstream_dead_letters:new5m",
    "rewardstream_rewards_total", "rewardstream_reward_seconds_bucket", "rewardstream_canary_hits_total",
    "rewardstream_canary_rewards_total", "rewardstream_invalid_rewards_total", "rewardstream_hack_flags_total",
    "rewardstream_static_gate_hits_total", "rewardstream_public_pass_hidden_fail_total",
    "rewardstream_judge_tests_disagreements_total", "rewardstream_missing_signals_total",
    "rewardstream_rewards_by_validity_total",
}  # fmt: skip


def _recorded() -> set[str]:
    groups = (yaml.safe_load(RULES.read_text()) or {}).get("groups") or []
    return {rule["record"] for group in groups for rule in group.get("rules") or [] if "record" in rule}


def _names(prometheus: PrometheusService) -> set[str]:
    return set(get_json(f"{prometheus.url}/api/v1/label/__name__/values")["data"])


def _substituted(expr: str) -> str:
    for variable, value in GRAFANA.items():
        expr = expr.replace(variable, value)
    assert "$" not in expr, f"a Grafana variable the test does not substitute: {expr}"
    return expr


def test_event_only_names_are_real_exports() -> None:
    """The names excused above are what the code exports once its event happens, so the list holds no typo."""
    metrics = WorkerMetrics("executor")
    metrics.retry("s3")
    metrics.sandbox_run(0.1, 0)
    exported = {s.name for f in text_string_to_metric_families(metrics.exposition().decode()) for s in f.samples}
    auditor = WorkerMetrics("auditor")
    audits = AuditMetrics(auditor.registry)
    audits.audits.labels("humaneval", "docker", "disagree").inc()
    audits.disagreements.labels("humaneval", "pass_flip").inc()
    audits.skip("humaneval/0", "backend_unavailable")
    exported |= {s.name for f in text_string_to_metric_families(auditor.exposition().decode()) for s in f.samples}
    assert set(EVENT_ONLY) - exported == set()


def _integrity_events() -> list[Event]:
    """Generations whose parts make the processor count each integrity counter: a canary hack, a hack flag (the
    judge liked it: a disagreement), public pass with a hidden fail, a missing judge, a missing verdict."""
    canary = [e.model_copy(update={"task_id": "canary/add"})
              for e in (execution("canary"), verdict("canary", canary=True), judgement("canary"))]  # fmt: skip
    return [
        *canary,
        execution("flagged"), verdict("flagged", flags=("builtins_patch",)), judgement("flagged"),
        execution("overfit"), verdict("overfit", passed=1), judgement("overfit", score=0.9),
        execution("no-judge"), verdict("no-judge"),
        execution("no-verdict"), judgement("no-verdict"),
    ]  # fmt: skip


def _processor_metrics(env: RewardEnv) -> str:
    """The /metrics URL the processor's banner logged (it binds a free port)."""

    def found() -> str | None:
        urls = re.findall(r"rewards: policy .*metrics on (http://\S+/metrics)", env.logs(tail=None))
        return urls[-1] if urls else None

    url: str = wait_for("the reward processor's metrics banner", found, timeout_s=60.0)
    return url


@pytest.fixture
def processor_url(kafka_config: dict[str, str], unique_name: str, tmp_path: Path) -> Iterator[str]:
    """A real reward processor (deadline 2 s) on topics of its own, given ``_integrity_events``: its /metrics."""
    (tmp_path / "processor").mkdir()
    with reward_env(kafka_config, f"{unique_name}-rw", tmp_path / "processor") as env:
        env.start(short_deadline_policy(tmp_path, deadline_s=2.0))
        env.produce(_integrity_events())
        yield _processor_metrics(env)


def test_every_dashboard_query_runs_on_a_real_prometheus(
    scraped_indexer: tuple[subprocess.Popen[bytes], int],
    indexer_topics: str,
    kafka_config: dict[str, str],
    own_monitoring: tuple[PrometheusService, AlertmanagerService],
    processor_url: str,
) -> None:
    _, port = scraped_indexer
    prometheus, _ = own_monitoring
    targets = [ScrapeTarget("indexer", f"http://127.0.0.1:{port}/metrics"), ScrapeTarget("rewards", processor_url)]
    prometheus.configure(targets, None, Intervals(scrape_s=1.0, evaluation_s=1.0), RULES)
    assert prometheus.start()
    wait_for("ready Prometheus", lambda: prometheus.health().healthy)
    live = 'count(up{job="rewardstream", role=~"indexer|rewards"} == 1) == 2'
    wait_for("scrapes of both live roles", lambda: query(prometheus, live)["data"]["result"])

    producer = make_producer(kafka_config)
    producer.produce(f"{indexer_topics}logs", key=b"poison", value=b"not a log record")
    LogShipper(producer, f"{indexer_topics}logs", "executor", worker="dashboard-test:1").log(
        "info", "a record to index", episode_id="ep-1", run_id="dashboard"
    )
    assert producer.flush(30) == 0
    wait_for(f"series {sorted(AFTER_EVENTS)}", lambda: _names(prometheus) >= AFTER_EVENTS, timeout_s=40.0)

    panels = queries(json.loads(DASHBOARD.read_text()))
    assert len(panels) >= 20
    # A rate needs two scrapes of a series and the alert one more evaluation: empty answers are asked again.
    deadline = time.monotonic() + 20.0
    while (problems := _problems(prometheus, panels)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not problems, "\n".join(problems)
    used = set().union(*(metric_names(expr) for _, expr in panels))
    assert set(EVENT_ONLY) <= used, f"excused names no query uses: {sorted(set(EVENT_ONLY) - used)}"
    print(f"\n{len(panels)} queries checked; names used: {len(used)}, event-only: {len(EVENT_ONLY)}")


def _problems(prometheus: PrometheusService, panels: list[tuple[str, str]]) -> list[str]:
    """What is wrong with each query now: an error, a name nobody exports or records, or no series though every
    name it uses is scraped (a wrong ``job`` or ``role`` matcher)."""
    scraped = _names(prometheus)
    known = scraped | _recorded()
    problems: list[str] = []
    for title, expr in panels:
        answer: dict[str, Any] = query(prometheus, _substituted(expr))
        names = metric_names(expr)
        if answer.get("status") != "success":
            problems.append(f"{title}: {expr}: {answer.get('errorType')}: {answer.get('error')}")
            continue
        if unknown := names - known - set(EVENT_ONLY):
            problems.append(f"{title}: {expr}: names nobody exports or records: {sorted(unknown)}")
        if names <= scraped and title not in EMPTY_HERE and not answer["data"]["result"]:
            problems.append(f"{title}: {expr}: no series, though every name it uses is scraped")
    return problems
