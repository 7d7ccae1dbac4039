"""One broker's disk filling up under the mixed load: its log dir on a small tmpfs of its own (root mounts it),
filled to the last byte mid-run. Kafka takes the dir offline; it is also the node's KRaft metadata log dir, so
the node stops, and its leaders move to the other two. The pipeline must recover without a human (exactly once,
every reward the fault-free one); then the space is freed, ``up`` starts the node, and it catches up.

The figures (the node offline after the fill, the first reward, the backlog, the node back) are printed: ``-s``.
"""

from __future__ import annotations

import os
import time

import pytest

from tests.integration.chaos.cluster import ChaosCluster, wait_for
from tests.integration.chaos.load import MixedLoad
from tests.integration.chaos.scenario import generations_leader, recovered, topic, under_fault
from tests.integration.sdk_env import Pipeline, Problems

pytestmark = [pytest.mark.integration, pytest.mark.sandbox, pytest.mark.slow, pytest.mark.chaos]

TOPICS = ("generations", "rewards", "actions", "observations")


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting the node's tmpfs needs root")
@pytest.mark.timeout(900)
def test_one_brokers_disk_fills_up(cluster: ChaosCluster, pipe: Pipeline, problems: Problems) -> None:
    topics = [topic(pipe, role) for role in TOPICS]
    victim = generations_leader(cluster, pipe)
    with cluster.small_disk(victim, topics) as disk:
        load = MixedLoad(pipe, problems, run_id=f"{pipe.env.prefix}run")
        offline: list[float] = []

        def fill() -> float:
            filled_at = disk.fill()
            wait_for(
                lambda: not cluster.serving(victim, topics[0]), 120, f"node {victim} offline after its disk filled"
            )
            offline.append(time.monotonic() - filled_at)
            return filled_at

        fault_at = under_fault(load, fill)
        disk.free()
        started = time.monotonic()
        cluster.stop(victim)  # it may still run with its only log dir offline
        cluster.heal(topics)
        back_s = time.monotonic() - started
    recovered(load, fault_at, f"node {victim}'s disk full, offline {offline[0]:.1f}s after, back {back_s:.1f}s after "
                              "the space was freed and `up`")  # fmt: skip
