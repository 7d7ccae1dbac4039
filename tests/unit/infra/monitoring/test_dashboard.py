"""The committed dashboard is what ``infra/monitoring/dashboard.py`` generates, and every panel reads its queries
from the dashboard's Prometheus variable. (Each query against a real Prometheus: tests/integration/test_dashboard.py.)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infra.monitoring import dashboard


def test_committed_json_is_what_the_module_generates() -> None:
    assert dashboard.DASHBOARD.read_text() == dashboard.render()
    assert dashboard.main(["--check"]) == 0


def test_a_stale_file_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stale = tmp_path / "rewardstream.json"
    stale.write_text(dashboard.render().replace("Rewards/s by outcome", "Rewards", 1))
    monkeypatch.setattr(dashboard, "DASHBOARD", stale)
    assert dashboard.main(["--check"]) == 1
    assert dashboard.main([]) == 0
    assert dashboard.main(["--check"]) == 0


def test_every_panel_queries_the_chosen_prometheus() -> None:
    document = json.loads(dashboard.render())
    assert (document["uid"], document["schemaVersion"]) == (dashboard.UID, dashboard.SCHEMA_VERSION)
    [variable] = document["templating"]["list"]
    assert (variable["name"], variable["type"], variable["query"]) == ("datasource", "datasource", "prometheus")
    panels = [p for p in document["panels"] if p["type"] != "row"]
    assert len(panels) == sum(len(section) for _, section in dashboard.SECTIONS)
    assert len({p["id"] for p in document["panels"]}) == len(document["panels"])
    for panel in panels:
        assert panel["targets"], panel["title"]
        assert panel["datasource"] == dashboard.DATASOURCE
        assert all(t["datasource"] == dashboard.DATASOURCE for t in panel["targets"])
        assert len({t["refId"] for t in panel["targets"]}) == len(panel["targets"])


def test_panels_tile_the_grid_without_overlap() -> None:
    taken: set[tuple[int, int]] = set()
    for panel in json.loads(dashboard.render())["panels"]:
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24, panel["title"]
        cells = {(x, y) for x in range(pos["x"], pos["x"] + pos["w"]) for y in range(pos["y"], pos["y"] + pos["h"])}
        assert not cells & taken, panel["title"]
        taken |= cells


def test_the_issue_asks_for_these_panels() -> None:
    exprs = " ".join(expr for _, expr in dashboard.queries(json.loads(dashboard.render())))
    for name in ("rewardstream_rewards_total", "rewardstream_reward_seconds_bucket", "consumer_lag", "up{",
                 "sandbox_errors", "retries", "dead_letters", 'dependency="s3"', 'role="indexer"',
                 "host_memory_available_ratio", "host_disk_free_ratio", "host_load_per_cpu",
                 "rewardstream_canary_hits_total", "ALERTS{",
                 # the integrity signals (issue 28, 2): canaries, invalid by reason, hack flags by rule, the
                 # overfitting gap, judge/tests disagreement, static-gate hits
                 "rewardstream_canary_rewards_total", "rewardstream_invalid_rewards_total",
                 "rewardstream_hack_flags_total", "rewardstream_public_pass_hidden_fail_total",
                 "rewardstream_judge_tests_disagreements_total", "rewardstream_static_gate_hits_total",
                 "rewardstream_rewards_by_validity_total",
                 # audits (issue 28, 4): verdict error per dataset, the alert's share, skips by reason
                 "rewardstream_audits_total", "rewardstream_audit_disagreements_total",
                 "rewardstream_audits_skipped_total", "dataset:rewardstream_audit_pass_flips:ratio1h"):  # fmt: skip
        assert name in exprs, name
