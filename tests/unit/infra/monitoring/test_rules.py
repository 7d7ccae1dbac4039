"""The rules pass ``promtool check rules`` and their ``promtool test rules`` cases (Debian's ``prometheus``).

Skipped only where promtool is absent outside CI; in CI (``CI=true``) a missing promtool fails: `.ci/run`
installs it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from infra.monitoring.config import Intervals
from infra.monitoring.rules import RULE_TESTS, RULES, alert_names, with_short_for

#: The alerts the issue's contract names (checks are written against them).
CONTRACT = ("RewardstreamRoleDown", "RewardstreamCanaryHit", "RewardstreamDeadLetters", "RewardstreamRewardsLate",
            "RewardstreamSandboxErrors", "RewardstreamLagGrowing")  # fmt: skip


def _promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("CI must run the rule tests: promtool is missing (apt-get install prometheus)")
        pytest.skip("promtool is missing: apt-get install prometheus")
    return found


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([_promtool(), *args], capture_output=True, text=True, check=False, timeout=120)


def test_rules_are_valid() -> None:
    result = _run("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_rule_test_passes() -> None:
    files = sorted(str(p) for p in RULE_TESTS.glob("*.yml"))
    assert files
    result = _run("test", "rules", *files)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_contract_alerts_exist() -> None:
    assert set(CONTRACT) <= set(alert_names())


def test_every_alert_has_a_firing_and_a_silent_case() -> None:
    firing: set[str] = set()
    silent: set[str] = set()
    for path in RULE_TESTS.glob("*.yml"):
        for case in yaml.safe_load(path.read_text())["tests"]:
            for check in case.get("alert_rule_test") or []:
                (firing if check.get("exp_alerts") else silent).add(check["alertname"])
    names = set(alert_names())
    assert names - firing == set(), "alerts without a case where they fire"
    assert names - silent == set(), "alerts without a case where they stay silent"


def test_a_short_for_copy_keeps_every_rule_and_is_valid(tmp_path: Path) -> None:
    copy = with_short_for(tmp_path / "rules.yml", 5)
    assert alert_names(copy) == alert_names()
    fors = {r["for"] for g in yaml.safe_load(copy.read_text())["groups"] for r in g["rules"] if "for" in r}
    assert fors == {"5s"}
    result = _run("check", "rules", str(copy))
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_canary_hit_fires_within_two_minutes_at_the_shipped_intervals() -> None:
    """The contract's two minutes, as shipped (the integration test runs 1 s intervals): CanaryHit waits for no
    ``for:``, so a hit counted just after a scrape fires at most one scrape and one evaluation later."""
    groups = yaml.safe_load(RULES.read_text())["groups"]
    [rule] = [r for g in groups for r in g["rules"] if r.get("alert") == "RewardstreamCanaryHit"]
    assert "for" not in rule
    shipped = Intervals()
    assert shipped.scrape_s + shipped.evaluation_s <= 60.0
