"""The roles' loop configs (``workers.roles.service``): which group assignment each role's consumer uses."""

from __future__ import annotations

from bus.config import COOPERATIVE, RANGE
from schemas.settings import Settings
from workers.roles.service import worker_config


def test_single_topic_roles_rebalance_incrementally_and_the_executor_per_topic() -> None:
    settings = Settings()
    # The executor reads generations and run requests: sticky would balance counts, not topics.
    assert worker_config(settings, "executor").assignment == RANGE
    assert not worker_config(settings, "executor").incremental
    for role in ("verifier", "judge"):
        assert worker_config(settings, role).assignment == COOPERATIVE
        assert worker_config(settings, role).incremental
