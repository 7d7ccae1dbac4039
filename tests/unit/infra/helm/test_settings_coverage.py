"""Every setting a deployment runs with is either set by the chart or left to ``settings:`` on purpose, and the
schema keeps the chart's own names out of ``settings:``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from infra.helm import check, settings_coverage
from infra.helm.settings_coverage import LEFT_TO_SETTINGS, chart_variables, deployment_settings, problems


def test_the_shipped_chart_accounts_for_every_setting() -> None:
    assert problems(check.CHART) == []


def test_the_worker_and_sandbox_settings_are_all_covered() -> None:
    """The groups the brief of issue 27's leftovers named, field by field (the rest follow the same rule)."""
    from schemas.settings import SandboxSettings, WorkerSettings, env_name

    written = chart_variables(check.CHART / "templates")
    for group, kind in (("worker", WorkerSettings), ("sandbox", SandboxSettings)):
        for field in kind.model_fields:
            name = env_name(f"{group}.{field}")
            assert name in written or name in LEFT_TO_SETTINGS, name
    assert "RS_WORKER_REBALANCE_DRAIN_S" in written
    assert {"RS_TASKS_REGISTRY", "RS_SANDBOX_START_RATE"} <= written <= deployment_settings() | {"RS_TASKS_DIR"}


@pytest.fixture
def chart_copy(tmp_path: Path) -> Path:
    copy = tmp_path / "rewardstream"
    shutil.copytree(check.CHART, copy)
    return copy


def test_a_setting_the_templates_drop_is_reported(chart_copy: Path) -> None:
    configmap = chart_copy / "templates" / "configmap.yaml"
    configmap.write_text(configmap.read_text().replace("RS_WORKER_REBALANCE_DRAIN_S", "RS_X_NOT_A_SETTING"))
    found = problems(chart_copy)
    assert any(p.startswith("RS_WORKER_REBALANCE_DRAIN_S: set by no template") for p in found), found
    assert any(p.startswith("RS_X_NOT_A_SETTING: a template sets it, yet") for p in found), found


def test_a_listed_setting_the_chart_sets_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(settings_coverage.LEFT_TO_SETTINGS, "RS_SANDBOX_SLOTS", "stale reason")
    monkeypatch.setitem(settings_coverage.LEFT_TO_SETTINGS, "RS_WORKER_GONE", "a removed setting")
    found = problems(check.CHART)
    assert "RS_SANDBOX_SLOTS: in LEFT_TO_SETTINGS but a template sets it" in found
    assert "RS_WORKER_GONE: in LEFT_TO_SETTINGS but no such setting" in found


def test_the_schema_keeps_the_charts_names_out_of_settings(chart_copy: Path) -> None:
    schema = chart_copy / "values.schema.json"
    doc = json.loads(schema.read_text())
    doc["properties"]["settings"]["propertyNames"]["not"]["enum"].remove("RS_WORKER_DRAIN_TIMEOUT_S")
    schema.write_text(json.dumps(doc))
    assert problems(chart_copy) == [
        "RS_WORKER_DRAIN_TIMEOUT_S: a template sets it, yet values.schema.json lets settings: set it too"
    ]
