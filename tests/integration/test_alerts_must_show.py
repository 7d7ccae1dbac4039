"""Issue 28's "must show", in one real Prometheus (Debian's) with the shipped rules: a role is killed, a DLQ
filled and a canary hacked through the real reward processor, and RewardstreamRoleDown, RewardstreamDeadLetters
and RewardstreamCanaryHit fire, in Prometheus and in ``rewardstream status`` (``--json`` and text).

The roles are real processes: ``rewardstream worker indexer`` (the role killed) and ``rewardstream reward run``
(the processor) on topics of this test's own. The canary hack is what the verifier publishes for a hacking
candidate on a canary task (every hidden case passed, ``canary`` set from the task), with its execution and
judgement, on the processor's input topics; the DLQ is filled by an undecodable message on one of them. Rules as
``test_alerts`` loads them: ``for:`` capped at 2 s, scrape and evaluation every second (CanaryHit and
DeadLetters have no ``for:``, so they fire as shipped).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from infra.monitoring.config import Intervals, ScrapeTarget
from infra.monitoring.rules import with_short_for
from infra.monitoring.services import AlertmanagerService, PrometheusService
from tests.integration.prometheus_env import get_json, query, wait_for
from tests.integration.reward_env import Reader, RewardEnv, reward_env
from tests.unit.reward_events import execution, judgement, verdict

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

FOR_S = 2
#: The contract: RewardstreamCanaryHit fires within two minutes of the hacked reward.
CANARY_CONTRACT_S = 120.0
CANARY_TASK = "canary/add"


def _active(prometheus: PrometheusService, name: str) -> list[dict[str, Any]]:
    alerts = get_json(f"{prometheus.url}/api/v1/alerts")["data"]["alerts"]
    return [a for a in alerts if a["labels"].get("alertname") == name]


def _firing(prometheus: PrometheusService, name: str) -> list[dict[str, Any]]:
    return [a for a in _active(prometheus, name) if a["state"] == "firing"]


def _status(prometheus: PrometheusService, tmp_path: Path, *args: str) -> str:
    env = {**os.environ, "RS_PROMETHEUS_URL": prometheus.url, "RS_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-m", "rewardstream", "status", *args], env=env, capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip
    return done.stdout


def _processor_metrics_url(env: RewardEnv) -> str:
    """The /metrics URL the processor's banner logged (it binds a free port)."""

    def found() -> str | None:
        urls = re.findall(r"rewards: policy .*metrics on (http://\S+/metrics)", env.logs(tail=None))
        return urls[-1] if urls else None

    url: str = wait_for("the reward processor's metrics banner", found, timeout_s=60.0)
    return url


def _canary_hack(gid: str) -> list[Any]:
    """A hacking candidate's results on a canary: the verifier read ``canary`` from the task, every hidden case
    passed (what no honest candidate can do), public tests passed, the judge liked it."""
    events = [execution(gid), verdict(gid, canary=True), judgement(gid)]
    return [event.model_copy(update={"task_id": CANARY_TASK}) for event in events]


def test_a_killed_role_a_dead_letter_and_a_canary_hack_fire_in_prometheus_and_status(
    scraped_indexer: tuple[subprocess.Popen[bytes], int],
    kafka_config: dict[str, str],
    own_monitoring: tuple[PrometheusService, AlertmanagerService],
    unique_name: str,
    tmp_path: Path,
) -> None:
    indexer, indexer_port = scraped_indexer
    prometheus, _ = own_monitoring
    (tmp_path / "processor").mkdir()
    with reward_env(kafka_config, f"{unique_name}-rw", tmp_path / "processor") as env:
        env.start()
        targets = [ScrapeTarget("indexer", f"http://127.0.0.1:{indexer_port}/metrics"),
                   ScrapeTarget("rewards", _processor_metrics_url(env))]  # fmt: skip
        rules = with_short_for(tmp_path / "rules.yml", FOR_S)
        prometheus.configure(targets, None, Intervals(scrape_s=1.0, evaluation_s=1.0), rules)
        assert prometheus.start()
        wait_for("ready Prometheus", lambda: prometheus.health().healthy)
        both = 'count(up{job="rewardstream", role=~"indexer|rewards"} == 1) == 2'
        wait_for("scrapes of both live roles", lambda: query(prometheus, both)["data"]["result"])
        watched = {"RewardstreamRoleDown", "RewardstreamDeadLetters", "RewardstreamCanaryHit"}
        # Before the first scrape nothing of rewardstream is known (RoleDown's "all" branch, for 2 s here); once
        # both roles are scraped and the rules evaluated again, none of the three is active.
        wait_for("none of the three active", lambda: not any(_active(prometheus, name) for name in watched))
        quiet = json.loads(_status(prometheus, tmp_path, "--json"))
        assert [a for a in quiet["alerts"] if a["name"] in watched] == []

        # The canary hack: its reward is marked (canary, not valid) and counted, and the alert fires in time.
        rewards = Reader(kafka_config, env.name("rewards"))
        try:
            env.produce(_canary_hack("hack"))
            rewards.wait(lambda: len(rewards.values) >= 1, 60, "the canary's reward", env)
            rewarded_at = time.monotonic()
            [hacked] = rewards.rewards()
        finally:
            rewards.close()
        assert (hacked.task_id, hacked.canary, hacked.valid, hacked.invalid_reason) == (
            CANARY_TASK, True, False, "canary"
        )  # fmt: skip
        assert hacked.reward > 0, hacked
        [canary] = wait_for("RewardstreamCanaryHit firing", lambda: _firing(prometheus, "RewardstreamCanaryHit"),
                            timeout_s=CANARY_CONTRACT_S)  # fmt: skip
        canary_s = time.monotonic() - rewarded_at
        assert canary_s < CANARY_CONTRACT_S
        assert (canary["labels"]["role"], canary["labels"]["task"]) == ("rewards", CANARY_TASK)

        # A dead letter: an undecodable message on the processor's input goes to the DLQ, counted by reason.
        env.produce_raw("executions", b"poison", b"not an event")
        [dead] = wait_for("RewardstreamDeadLetters firing", lambda: _firing(prometheus, "RewardstreamDeadLetters"))
        assert dead["labels"]["role"] == "rewards"

        # A killed role: the indexer's only member dies.
        indexer.send_signal(signal.SIGKILL)
        indexer.wait(timeout=30)
        killed_at = time.monotonic()
        [down] = wait_for("RewardstreamRoleDown firing", lambda: _firing(prometheus, "RewardstreamRoleDown"))
        down_s = time.monotonic() - killed_at
        assert down["labels"]["role"] == "indexer"

        report = json.loads(_status(prometheus, tmp_path, "--json"))
        assert report["services"]["prometheus"]["healthy"] is True
        # Others may fire too (RewardstreamHostRunQueue on a busy test host, labelled by instance only).
        firing = {(a["name"], a["labels"].get("role")) for a in report["alerts"] if a["state"] == "firing"}
        assert firing >= {("RewardstreamCanaryHit", "rewards"), ("RewardstreamDeadLetters", "rewards"),
                          ("RewardstreamRoleDown", "indexer")}, report["alerts"]  # fmt: skip
        [listed] = [a for a in report["alerts"] if a["name"] == "RewardstreamCanaryHit"]
        assert listed["labels"]["task"] == CANARY_TASK
        assert listed["since"]
        text = _status(prometheus, tmp_path)
        for name in watched:
            assert name in text, text
        assert f"task={CANARY_TASK}" in text
    print(f"\nCanaryHit firing {canary_s:.1f}s after the hacked reward (contract: {CANARY_CONTRACT_S:.0f}s); "
          f"RoleDown firing {down_s:.1f}s after the kill (scrape and evaluation every 1 s, for: {FOR_S}s)")  # fmt: skip
