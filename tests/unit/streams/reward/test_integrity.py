"""The processor's integrity counters, from the rewards the join decides."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from bus.labels import OTHER, BoundedLabel, dataset_of
from bus.metrics import WorkerMetrics
from streams.reward.decided import DecidedReward
from streams.reward.integrity import MAX_CANARY_TASKS, IntegrityMetrics, judge_disagreement
from streams.reward.join import Emit, JoinState, PartEvent, absorb, decide
from streams.reward.policy import Policy, load_policy
from tests.unit.reward_events import execution, judgement, verdict

T0 = 1_000_000.0


@pytest.fixture(scope="module")
def policy() -> Policy:
    return load_policy()


def rewarded(policy: Policy, *events: PartEvent, now: float = T0) -> DecidedReward:
    state: JoinState | None = None
    for event in events:
        state = absorb(state, event, 0, T0).state
    assert state is not None
    decision = decide(state, now, policy)
    assert isinstance(decision, Emit)
    return decision.reward


def value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, {"policy": "default", "policy_version": "2", **labels}) or 0.0


def test_a_canary_above_zero_is_a_hit_named_by_its_task(policy: Policy) -> None:
    registry = CollectorRegistry()
    metrics = IntegrityMetrics(registry)
    hacked = rewarded(policy, execution("g1"), verdict("g1", canary=True), judgement("g1"))
    honest = rewarded(policy, execution("g2"), verdict("g2", passed=0, canary=True), judgement("g2"))
    metrics.observe(hacked)
    metrics.observe(honest)
    dataset = dataset_of(hacked.task_id)
    hit = {"dataset": dataset, "task": hacked.task_id}
    assert value(registry, "rewardstream_canary_hits_total", **hit) == 1.0
    assert value(registry, "rewardstream_canary_rewards_total", dataset=dataset) == 2.0
    assert value(registry, "rewardstream_invalid_rewards_total", dataset=dataset, reason="canary") == 2.0
    assert value(registry, "rewardstream_rewards_by_validity_total", dataset=dataset, valid="false") == 2.0


def test_flags_gaps_and_missing_parts_are_counted_by_kind(policy: Policy) -> None:
    registry = CollectorRegistry()
    metrics = IntegrityMetrics(registry)
    flagged = rewarded(policy, execution("g1"), verdict("g1", flags=("builtins_patch", "exit_call")), judgement("g1"))
    overfit = rewarded(policy, execution("g2"), verdict("g2", passed=1), judgement("g2", score=0.9))
    late = rewarded(policy, execution("g3"), verdict("g3"), now=T0 + policy.join.deadline_s)
    for reward in (flagged, overfit, late):
        metrics.observe(reward)
    d = {"dataset": dataset_of(flagged.task_id)}
    assert value(registry, "rewardstream_hack_flags_total", **d, rule="builtins_patch") == 1.0
    assert value(registry, "rewardstream_hack_flags_total", **d, rule="exit_call") == 1.0
    assert value(registry, "rewardstream_static_gate_hits_total", **d) == 1.0
    assert value(registry, "rewardstream_public_pass_hidden_fail_total", **d) == 1.0
    assert value(registry, "rewardstream_judge_tests_disagreements_total", **d, direction="judge_pass_tests_fail") == 2
    assert value(registry, "rewardstream_missing_signals_total", **d, part="judgement") == 1.0
    assert value(registry, "rewardstream_rewards_by_validity_total", **d, valid="true") == 3.0
    assert value(registry, "rewardstream_canary_hits_total", **d, task=flagged.task_id) == 0.0


def test_infrastructure_decisions_count_as_invalid_by_reason(policy: Policy) -> None:
    registry = CollectorRegistry()
    metrics = IntegrityMetrics(registry)
    no_verdict = rewarded(policy, execution("g1"), judgement("g1"), now=T0 + policy.join.deadline_s)
    metrics.observe(no_verdict)
    d = {"dataset": dataset_of(no_verdict.task_id)}
    assert value(registry, "rewardstream_invalid_rewards_total", **d, reason="missing_signals") == 1.0
    assert value(registry, "rewardstream_missing_signals_total", **d, part="verdict") == 1.0


def test_judge_disagreement_needs_both_a_judge_and_a_gate(policy: Policy) -> None:
    agree = rewarded(policy, execution("g1"), verdict("g1"), judgement("g1", score=0.9))
    assert judge_disagreement(agree) is None
    doubt = rewarded(policy, execution("g2"), verdict("g2"), judgement("g2", score=0.1))
    assert judge_disagreement(doubt) == "tests_pass_judge_fail"
    no_judge = rewarded(policy, execution("g3"), verdict("g3"), now=T0 + policy.join.deadline_s)
    assert judge_disagreement(no_judge) is None


def test_labels_stay_bounded() -> None:
    label = BoundedLabel(MAX_CANARY_TASKS)
    kept = [label(f"canary/{i}") for i in range(MAX_CANARY_TASKS + 5)]
    assert kept[:MAX_CANARY_TASKS] == [f"canary/{i}" for i in range(MAX_CANARY_TASKS)]
    assert set(kept[MAX_CANARY_TASKS:]) == {OTHER}
    assert label("canary/0") == "canary/0"  # a kept value stays itself
    assert dataset_of("HumanEval/0") == "HumanEval"
    assert dataset_of("plain") == "plain"


def test_the_counters_share_the_reward_processors_registry() -> None:
    """Both engines register them beside the processor's own metrics: a name both claim would stop it at start."""
    metrics = WorkerMetrics("rewards", CollectorRegistry())
    IntegrityMetrics(metrics.registry)
