"""Chaos on a three-broker cluster of the test's own: a node SIGKILLed in the middle of a mixed load (one-shot
generations and agent episodes through the SDK, the pipeline as processes under their supervisor): the leader of
the generations topic, of the rewards topic, the reward processor's transaction coordinator; or that leader
SIGSTOPped until the controllers fence it, then resumed; a rolling restart of the three. Afterwards every
generation has exactly one reward, every episode step exactly one observation, nothing dead-lettered, every
reward the fault-free one, and nobody helped: the cluster keeps two of three nodes until the scenario's end,
when ``up`` restores the third for the next one.

The figures (time to the first reward after the fault, to the backlog drained) are printed: run with ``-s``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from schemas.topics import catalog_for, topic_for
from tests.integration.chaos.cluster import CLIENT_ENV, ChaosCluster, wait_for
from tests.integration.chaos.load import MixedLoad, chaos_pipeline, deadline_zeros, describe, store_episode_task
from tests.integration.sdk_env import Pipeline, Problems, convert_problems

pytestmark = [pytest.mark.integration, pytest.mark.sandbox, pytest.mark.slow]

#: Rewards in before the fault: the kill lands with work in every stage.
BEFORE_FAULT = 6


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChaosCluster]:
    made = ChaosCluster.in_dir(tmp_path_factory.mktemp("chaos-kafka"))
    try:
        print(f"\nthree nodes up in {made.up():.1f}s")
        yield made
    finally:
        made.down()


@pytest.fixture(scope="module")
def problems(tmp_path_factory: pytest.TempPathFactory) -> Problems:
    made = convert_problems(tmp_path_factory.mktemp("registry"), 4)
    store_episode_task(made.registry_dir)
    return made


@pytest.fixture
def pipe(
    cluster: ChaosCluster, problems: Problems, s3_bucket: str, unique_name: str, tmp_path: Path
) -> Iterator[Pipeline]:
    """The pipeline on the cluster (the shared S3, a bucket of its own); the cluster whole again after."""
    with pytest.MonkeyPatch.context() as env:
        for name, value in {**CLIENT_ENV, "RS_S3_BUCKET": s3_bucket}.items():
            env.setenv(name, value)
        try:
            with chaos_pipeline(cluster.config, unique_name, tmp_path, problems.registry_dir) as made:
                yield made
        finally:
            print(f"cluster whole again in {cluster.heal():.1f}s")


def _topic(pipe: Pipeline, role: str) -> str:
    return topic_for(role, catalog_for(pipe.settings)).name  # type: ignore[arg-type]


def _generations_leader(cluster: ChaosCluster, pipe: Pipeline) -> int:
    return cluster.leader(_topic(pipe, "generations"), 0)


def _rewards_leader(cluster: ChaosCluster, pipe: Pipeline) -> int:
    return cluster.leader(_topic(pipe, "rewards"), 0)


def _processor_coordinator(cluster: ChaosCluster, pipe: Pipeline) -> int:
    """The reward processor's transaction coordinator (its transactional id: ``<app id>-<pid>-<random>``)."""
    return cluster.coordinator(f"{pipe.env.app_id}-{pipe.env.live('processor').pid}-")


#: Which node each scenario kills: what it leads when the fault comes.
VICTIMS = {
    "leader of generations/0": _generations_leader,
    "leader of rewards/0": _rewards_leader,
    "the reward processor's transaction coordinator": _processor_coordinator,
}


#: Found by this test, not fixed yet (docs/operations.md, "Chaos"): run it with ``--runxfail``.
REWARDS_LEADER_STALLS = pytest.mark.xfail(
    run=False,
    reason="after the rewards leader dies, one-shot generations published later get no results within 180 s",
)


@pytest.mark.parametrize(
    "victim_of",
    [
        pytest.param("leader of generations/0", id="generations-leader"),
        pytest.param("leader of rewards/0", id="rewards-leader", marks=REWARDS_LEADER_STALLS),
        pytest.param("the reward processor's transaction coordinator", id="txn-coordinator"),
    ],
)
@pytest.mark.timeout(600)
def test_kill_9_a_node_mid_run(cluster: ChaosCluster, pipe: Pipeline, problems: Problems, victim_of: str) -> None:
    assert cluster.replicas(_topic(pipe, "generations")) == {3}
    load = MixedLoad(pipe, problems, run_id=f"{pipe.env.prefix}run")
    try:
        load.start()
        victim = VICTIMS[victim_of](cluster, pipe)  # nothing moves it before the fault
        wait_for(lambda: load.rewarded() >= BEFORE_FAULT or bool(load.errors), 240,
                 lambda: f"{BEFORE_FAULT} rewards before the fault\n{pipe.logs()}")  # fmt: skip
        fault_at = cluster.kill(victim)
        load.finish()
    finally:
        load.close()
    recovery = load.check(fault_at)
    print(f"\nkill -9 node {victim}, {victim_of}: {recovery.line()}")
    differing = load.differing()
    if deadline_zeros(differing):
        # Known (docs/operations.md, "Chaos"): a role fenced by the fault restarts and re-runs its backlog alone
        # (crash guard) for longer than the join deadline, and the processor's liveness hold does not cover it.
        pytest.xfail(f"rewards decided at the join deadline: {describe(differing)}")
    assert not differing, describe(differing)


@pytest.mark.xfail(
    run=False,
    reason="after the paused node is fenced and resumed, generations published later get no results within 180 s",
)
@pytest.mark.timeout(600)
def test_sigstop_a_node_past_its_session_timeout(cluster: ChaosCluster, pipe: Pipeline, problems: Problems) -> None:
    """The leader of generations/0 paused (SIGSTOP) until the controllers fenced it (no heartbeat within
    ``broker.session.timeout.ms``: its partitions get other leaders), then resumed (SIGCONT)."""
    generations = _topic(pipe, "generations")
    load = MixedLoad(pipe, problems, run_id=f"{pipe.env.prefix}run")
    try:
        load.start()
        victim = _generations_leader(cluster, pipe)
        wait_for(lambda: load.rewarded() >= BEFORE_FAULT or bool(load.errors), 240,
                 lambda: f"{BEFORE_FAULT} rewards before the fault\n{pipe.logs()}")  # fmt: skip
        fault_at = cluster.pause(victim)
        try:
            wait_for(lambda: cluster.leads_none_of(victim, generations), 120, f"node {victim} fenced")
            paused_s = time.monotonic() - fault_at
        finally:
            cluster.resume(victim)
        load.finish()
    finally:
        load.close()
    recovery = load.check(fault_at)
    print(f"\nSIGSTOP node {victim} for {paused_s:.1f}s (until fenced), then SIGCONT: {recovery.line()}")
    differing = load.differing()
    if deadline_zeros(differing):
        pytest.xfail(f"rewards decided at the join deadline: {describe(differing)}")
    assert not differing, describe(differing)


@pytest.mark.timeout(600)
def test_a_rolling_restart_of_every_broker(cluster: ChaosCluster, pipe: Pipeline, problems: Problems) -> None:
    """Each node in turn stopped (SIGTERM), started again and caught up before the next, while the load runs
    (at one generation per 3 s, so that it spans the restarts)."""
    topics = [_topic(pipe, role) for role in ("generations", "rewards", "actions", "observations")]
    load = MixedLoad(pipe, problems, run_id=f"{pipe.env.prefix}run", pace_s=3.0)
    try:
        load.start()
        wait_for(lambda: load.rewarded() >= BEFORE_FAULT or bool(load.errors), 240,
                 lambda: f"{BEFORE_FAULT} rewards before the fault\n{pipe.logs()}")  # fmt: skip
        fault_at = time.monotonic()
        for node in sorted(n["id"] for n in cluster.nodes()):
            cluster.restart(node, topics)
        rolled_s = time.monotonic() - fault_at
        load.finish()
    finally:
        load.close()
    recovery = load.check(fault_at)
    print(f"\nrolling restart of the three nodes in {rolled_s:.1f}s: {recovery.line()}")
    differing = load.differing()
    if deadline_zeros(differing):
        pytest.xfail(f"rewards decided at the join deadline: {describe(differing)}")
    assert not differing, describe(differing)
