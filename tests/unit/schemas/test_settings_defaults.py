"""A setting's default is written once, in ``schemas.settings``: the component configs built from Settings
take theirs from it (``defaults``), so the two can never disagree."""

from __future__ import annotations

import dataclasses
import inspect

from bus.crash_guard import DEFAULT_ATTEMPTS
from schemas.settings import (
    GatewaySettings,
    JudgeSettings,
    OpenSearchSettings,
    Settings,
    WorkerSettings,
    defaults,
    shared_fields,
)
from streams.gateway.config import GatewayConfig
from streams.gateway.guard import Guard
from workers.judge.cache import CachedJudge
from workers.judge.openai_client import OpenAIJudgeConfig
from workers.logs.indexer import IndexerConfig
from workers.loop_config import WorkerConfig
from workers.roles.episodes import EpisodeHandler


def _dataclass_defaults(cls: type) -> dict[str, object]:
    return {f.name: f.default for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING}


def test_defaults_are_the_declared_defaults() -> None:
    for group in (WorkerSettings, JudgeSettings, GatewaySettings, OpenSearchSettings):
        declared = {name: f.get_default(call_default_factory=True) for name, f in group.model_fields.items()}
        assert defaults(group).model_dump() == declared


def test_component_configs_default_to_the_settings() -> None:
    worker, judge, gateway = defaults(WorkerSettings), defaults(JudgeSettings), defaults(GatewaySettings)
    loop = _dataclass_defaults(WorkerConfig)
    assert (loop["concurrency"], loop["max_in_flight"], loop["commit_interval_s"], loop["drain_timeout_s"]) == (
        worker.concurrency, worker.max_in_flight, worker.commit_interval_s, worker.drain_timeout_s,
    )  # fmt: skip
    assert loop["crash_attempts"] == DEFAULT_ATTEMPTS == worker.crash_attempts
    client = _dataclass_defaults(OpenAIJudgeConfig)
    assert (client["timeout_s"], client["retries"], client["concurrency"]) == (
        judge.timeout_s, judge.retries, judge.concurrency,
    )  # fmt: skip
    assert _dataclass_defaults(IndexerConfig)["batch_size"] == defaults(OpenSearchSettings).indexer_batch_size
    guard = inspect.signature(Guard).parameters
    assert guard["body_timeout_s"].default == gateway.body_timeout_s
    assert guard["peer_body_reads"].default == gateway.peer_body_reads
    assert inspect.signature(CachedJudge).parameters["max_entries"].default == judge.cache_size
    assert _dataclass_defaults(EpisodeHandler)["retention_s"] == worker.episode_retention_s


def test_a_component_config_takes_every_setting_it_shares_with_its_group() -> None:
    settings = Settings(gateway_max_batch=7, gateway_instance_id="gw-1", judge_retries=5)
    config = GatewayConfig.from_settings(settings, port=1)
    assert (config.max_batch, config.instance_id, config.port) == (7, "gw-1", 1)
    shared = shared_fields(settings.gateway, GatewayConfig)
    assert {"max_batch", "body_timeout_s", "kafka_timeout_s"} <= set(shared)
    assert shared_fields(settings.judge, OpenAIJudgeConfig)["retries"] == 5
