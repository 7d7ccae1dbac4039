"""The local Prometheus scrapes every pipeline process, from the same source that gives each its port."""

from __future__ import annotations

from rewardstream.monitoring import scrape_targets
from rewardstream.pipeline import pipeline_processes
from schemas.settings import Settings


def test_every_pipeline_process_is_a_target_with_the_role_its_metrics_carry() -> None:
    settings = Settings().model_copy(update={"metrics_port": 21000, "gateway_port": 21010})
    targets = {t.role: t.url for t in scrape_targets(settings)}
    assert targets == {
        "executor": "http://127.0.0.1:21000/metrics", "verifier": "http://127.0.0.1:21001/metrics",
        "judge": "http://127.0.0.1:21002/metrics", "indexer": "http://127.0.0.1:21003/metrics",
        "rewards": "http://127.0.0.1:21004/metrics", "episode": "http://127.0.0.1:21005/metrics",
        "auditor": "http://127.0.0.1:21006/metrics",        "gateway": "http://127.0.0.1:21010/metrics",
    }  # fmt: skip
    assert len(targets) == len(pipeline_processes(settings))
