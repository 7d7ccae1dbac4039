"""Where the alerting and recording rules live, and a copy of them with shorter ``for:`` durations.

One source: the chart carries the rules (``infra/helm/rewardstream/rules/``, rendered into its PrometheusRule)
and the local Prometheus loads the same file. A test that must see an alert fire in seconds loads a copy whose
``for:`` durations are capped, never an edited rule.
"""

from __future__ import annotations

from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
#: The rules: recording rules first, then the alerts.
RULES = HERE.parent / "helm" / "rewardstream" / "rules" / "rewardstream.yml"
#: ``promtool test rules`` cases: every alert fires in one case and stays silent in another.
RULE_TESTS = HERE / "rule_tests"


def alert_names(rules: Path = RULES) -> list[str]:
    """Every alert the rule file defines, in order."""
    groups = (yaml.safe_load(rules.read_text()) or {}).get("groups") or []
    return [rule["alert"] for group in groups for rule in group.get("rules") or [] if "alert" in rule]


def with_short_for(target: Path, for_s: int, rules: Path = RULES) -> Path:
    """Write ``rules`` to ``target`` with every ``for:`` capped at ``for_s`` seconds (for tests); return it."""
    document = yaml.safe_load(rules.read_text())
    for group in document.get("groups") or []:
        for rule in group.get("rules") or []:
            if "for" in rule:
                rule["for"] = f"{for_s}s"
    target.write_text(yaml.safe_dump(document, sort_keys=False))
    return target
