"""Chaos on a three-broker cluster of the test's own: a node SIGKILLed in the middle of a mixed load (one-shot
generations and agent episodes through the SDK, /run_code calls through the gateway, the pipeline as processes
under their supervisor): the leader of the generations topic, of the rewards topic, the reward processor's
transaction coordinator; or that leader SIGSTOPped until the controllers fence it, then resumed; a rolling
restart of the three. Afterwards every generation has exactly one reward, every episode step exactly one
observation, nothing dead-lettered, every reward the fault-free one (a 0.0 decided at the join deadline fails
too), and nobody helped: the cluster keeps two of three nodes until the scenario's end, when ``up`` restores
the third for the next one.

The figures (time to the first reward after the fault, to the backlog drained) are printed: run with ``-s``.
"""

from __future__ import annotations

import time

import pytest

from tests.integration.chaos.cluster import ChaosCluster, wait_for
from tests.integration.chaos.load import MixedLoad
from tests.integration.chaos.scenario import generations_leader, recovered, rewards_leader, topic, under_fault
from tests.integration.sdk_env import Pipeline, Problems

pytestmark = [pytest.mark.integration, pytest.mark.sandbox, pytest.mark.slow, pytest.mark.chaos]


def _processor_coordinator(cluster: ChaosCluster, pipe: Pipeline) -> int:
    """The reward processor's transaction coordinator (its transactional id: ``<app id>-<pid>-<random>``)."""
    return cluster.coordinator(f"{pipe.env.app_id}-{pipe.env.live('processor').pid}-")


#: Which node each scenario kills: what it leads when the fault comes.
VICTIMS = {
    "leader of generations/0": generations_leader,
    "leader of rewards/0": rewards_leader,
    "the reward processor's transaction coordinator": _processor_coordinator,
}


@pytest.mark.parametrize(
    "victim_of",
    [
        pytest.param("leader of generations/0", id="generations-leader"),
        pytest.param("leader of rewards/0", id="rewards-leader"),
        pytest.param("the reward processor's transaction coordinator", id="txn-coordinator", marks=pytest.mark.ci),
    ],
)
@pytest.mark.timeout(600)
def test_kill_9_a_node_mid_run(cluster: ChaosCluster, pipe: Pipeline, problems: Problems, victim_of: str) -> None:
    assert cluster.replicas(topic(pipe, "generations")) == {3}
    # Found before the load (nothing moves it before the fault): finding the coordinator reads every partition of
    # __transaction_state, which on a busy machine outlasted the whole load, and the kill then hit no work at all.
    victim = VICTIMS[victim_of](cluster, pipe)
    load = MixedLoad(pipe, problems, run_id=f"{pipe.env.prefix}run")
    fault_at = under_fault(load, lambda: cluster.kill(victim))
    recovered(load, fault_at, f"kill -9 node {victim}, {victim_of}")


@pytest.mark.timeout(600)
def test_sigstop_a_node_past_its_session_timeout(cluster: ChaosCluster, pipe: Pipeline, problems: Problems) -> None:
    """The leader of generations/0 paused (SIGSTOP) until the controllers fenced it (no heartbeat within
    ``broker.session.timeout.ms``: its partitions get other leaders), then resumed (SIGCONT)."""
    generations = topic(pipe, "generations")
    load = MixedLoad(pipe, problems, run_id=f"{pipe.env.prefix}run")
    paused: dict[str, float] = {}

    def pause() -> float:
        victim = paused["node"] = generations_leader(cluster, pipe)
        fault_at = cluster.pause(victim)
        try:
            wait_for(lambda: cluster.leads_none_of(victim, generations), 120, f"node {victim} fenced")
            paused["s"] = time.monotonic() - fault_at
        finally:
            cluster.resume(victim)
        return fault_at

    fault_at = under_fault(load, pause)
    recovered(load, fault_at, f"SIGSTOP node {paused['node']:.0f} for {paused['s']:.1f}s (until fenced), then SIGCONT")


@pytest.mark.timeout(600)
def test_a_rolling_restart_of_every_broker(cluster: ChaosCluster, pipe: Pipeline, problems: Problems) -> None:
    """Each node in turn stopped (SIGTERM), started again and caught up before the next, while the load runs
    (at one generation per 3 s, so that it spans the restarts)."""
    topics = [topic(pipe, role) for role in ("generations", "rewards", "actions", "observations")]
    load = MixedLoad(pipe, problems, run_id=f"{pipe.env.prefix}run", pace_s=3.0)
    rolled: list[float] = []

    def roll() -> float:
        fault_at = time.monotonic()
        for node in sorted(n["id"] for n in cluster.nodes()):
            cluster.restart(node, topics)
        rolled.append(time.monotonic() - fault_at)
        return fault_at

    fault_at = under_fault(load, roll)
    recovered(load, fault_at, f"rolling restart of the three nodes in {rolled[0]:.1f}s")
