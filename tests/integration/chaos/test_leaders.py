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
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from schemas.topics import catalog_for, topic_for
from tests.integration.chaos.cluster import CLIENT_ENV, ChaosCluster, wait_for
from tests.integration.chaos.load import MixedLoad, chaos_pipeline, describe, store_episode_task
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


def _under_fault(load: MixedLoad, fault: Callable[[], float]) -> float:
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


def _recovered(load: MixedLoad, fault_at: float, what: str) -> None:
    """What every scenario must show at its end: exactly one reward per generation and episode, one observation
    per step, nothing dead-lettered (``MixedLoad.check``), and every reward the fault-free one (a 0.0 decided at
    the join deadline is a failure too: the infrastructure's fault is withheld or retried, never scored)."""
    recovery = load.check(fault_at)
    print(f"\n{what}: {recovery.line()}")
    differing = load.differing()
    assert not differing, describe(differing)


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
    victims: list[int] = []

    def kill() -> float:
        victims.append(VICTIMS[victim_of](cluster, pipe))  # nothing moves it before the fault
        return cluster.kill(victims[0])

    fault_at = _under_fault(load, kill)
    _recovered(load, fault_at, f"kill -9 node {victims[0]}, {victim_of}")


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
    paused: dict[str, float] = {}

    def pause() -> float:
        victim = paused["node"] = _generations_leader(cluster, pipe)
        fault_at = cluster.pause(victim)
        try:
            wait_for(lambda: cluster.leads_none_of(victim, generations), 120, f"node {victim} fenced")
            paused["s"] = time.monotonic() - fault_at
        finally:
            cluster.resume(victim)
        return fault_at

    fault_at = _under_fault(load, pause)
    _recovered(load, fault_at, f"SIGSTOP node {paused['node']:.0f} for {paused['s']:.1f}s (until fenced), then SIGCONT")


@pytest.mark.timeout(600)
def test_a_rolling_restart_of_every_broker(cluster: ChaosCluster, pipe: Pipeline, problems: Problems) -> None:
    """Each node in turn stopped (SIGTERM), started again and caught up before the next, while the load runs
    (at one generation per 3 s, so that it spans the restarts)."""
    topics = [_topic(pipe, role) for role in ("generations", "rewards", "actions", "observations")]
    load = MixedLoad(pipe, problems, run_id=f"{pipe.env.prefix}run", pace_s=3.0)
    rolled: list[float] = []

    def roll() -> float:
        fault_at = time.monotonic()
        for node in sorted(n["id"] for n in cluster.nodes()):
            cluster.restart(node, topics)
        rolled.append(time.monotonic() - fault_at)
        return fault_at

    fault_at = _under_fault(load, roll)
    _recovered(load, fault_at, f"rolling restart of the three nodes in {rolled[0]:.1f}s")
