"""What every chaos scenario does around its fault: the load run through it, and what must hold afterwards."""

from __future__ import annotations

from collections.abc import Callable

from schemas.topics import catalog_for, topic_for
from tests.integration.chaos.cluster import ChaosCluster, wait_for
from tests.integration.chaos.load import MixedLoad, describe
from tests.integration.sdk_env import Pipeline

#: Rewards in before the fault: it lands with work in every stage.
BEFORE_FAULT = 6


def topic(pipe: Pipeline, role: str) -> str:
    return topic_for(role, catalog_for(pipe.settings)).name  # type: ignore[arg-type]


def generations_leader(cluster: ChaosCluster, pipe: Pipeline) -> int:
    return cluster.leader(topic(pipe, "generations"), 0)


def rewards_leader(cluster: ChaosCluster, pipe: Pipeline) -> int:
    return cluster.leader(topic(pipe, "rewards"), 0)


def under_fault(load: MixedLoad, fault: Callable[[], float]) -> float:
    """Run ``load`` with ``fault`` (it returns when the fault started) once ``BEFORE_FAULT`` rewards came:
    the fault lands with work in every stage. Every answer waited for; the monotonic time of the fault."""
    try:
        load.start()
        wait_for(lambda: load.rewarded() >= BEFORE_FAULT or bool(load.errors), 240,
                 lambda: f"{BEFORE_FAULT} rewards before the fault\n{load.pipe.logs()}")  # fmt: skip
        fault_at = fault()
        load.finish()
    finally:
        load.close()
    return fault_at


def recovered(load: MixedLoad, fault_at: float, what: str) -> None:
    """What every scenario must show at its end: exactly one reward per generation and episode, one observation
    per step, nothing dead-lettered (``MixedLoad.check``), and every reward the fault-free one (a 0.0 decided at
    the join deadline is a failure too: the infrastructure's fault is withheld or retried, never scored)."""
    recovery = load.check(fault_at)
    print(f"\n{what}: {recovery.line()}")
    differing = load.differing()
    assert not differing, describe(differing)
