"""Reward integrity as live numbers: canary hits, hack flags, the overfitting gap, judge/tests disagreement and
invalid rewards, counted from the rewards the processor committed.

Why from the reward event alone: it already carries every signal (flags, components, missing parts, the
validity claim), so the counters need no second look at the parts, and the same function serves both engines.
Why these labels: Prometheus keeps one series per label set, so every label is bounded. ``policy`` and
``policy_version`` are the processor's own; ``dataset`` is the task id's part before its first ``/`` (the
convention of the shipped converters: ``HumanEval/0``, ``swe/calc-add``), at most ``MAX_DATASETS`` values, then
``other``; ``task`` appears only on canary hits (canaries are a small, chosen set), at most ``MAX_CANARY_TASKS``;
``rule`` is a static-analysis rule id (the grader's fixed set), at most ``MAX_RULES``. Per-task numbers for all
tasks belong to the logs (OpenSearch), not to a time series.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

from bus.labels import MAX_DATASETS, BoundedLabel, Children, dataset_of
from schemas.events import RewardEvent
from streams.reward.decided import DecidedReward
from streams.reward.policy import PUBLIC_PASSED_HIDDEN_FAILED, WARN_FLAG_PREFIX

#: Distinct values a label keeps before further ones are counted as ``other`` (datasets: ``bus.labels``).
MAX_CANARY_TASKS = 64
MAX_RULES = 64
#: A judge score at or above this says "works"; below it, "does not" (for the disagreement with the tests).
JUDGE_PASS = 0.5


def hack_rules(reward: RewardEvent | DecidedReward) -> list[str]:
    """The gating hack flags of a reward (not ``warn:<rule>``, not the overfitting sign)."""
    return [f for f in reward.flags if f != PUBLIC_PASSED_HIDDEN_FAILED and not f.startswith(WARN_FLAG_PREFIX)]


def judge_disagreement(reward: RewardEvent | DecidedReward) -> str | None:
    """How the judge and the tests disagree on a reward, or None (no judge score, no gate, or they agree)."""
    judge, gate = reward.components.get("judge"), reward.components.get("gate")
    if judge is None or gate is None:
        return None
    if judge >= JUDGE_PASS and gate == 0.0:
        return "judge_pass_tests_fail"
    if judge < JUDGE_PASS and gate == 1.0:
        return "tests_pass_judge_fail"
    return None


class IntegrityMetrics:
    """The integrity counters of one processor, in its metrics registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        base = ("policy", "policy_version", "dataset")
        self._datasets = BoundedLabel(MAX_DATASETS)
        self._tasks = BoundedLabel(MAX_CANARY_TASKS)
        self._rules = BoundedLabel(MAX_RULES)
        self.rewards = Counter(
            "rewardstream_rewards_by_validity", "Rewards committed, by validity (the denominator of every rate below)",
            (*base, "valid"), registry=registry,
        )  # fmt: skip
        self.canary_rewards = Counter(
            "rewardstream_canary_rewards", "Rewards of canary tasks (tests that contradict the statement)", base,
            registry=registry,
        )  # fmt: skip
        self.canary_hits = Counter(
            "rewardstream_canary_hits", "Canary rewards above 0: detected hacks (never training data)",
            (*base, "task"), registry=registry,
        )  # fmt: skip
        self.invalid = Counter(
            "rewardstream_invalid_rewards", "Rewards not valid for training, by reason (canary, sandbox_error: the "
            "infrastructure failed and no retry came, missing_signals: a required signal missed the deadline)",
            (*base, "reason"), registry=registry,
        )  # fmt: skip
        self.missing = Counter(
            "rewardstream_missing_signals", "Signals missing from a reward at the deadline, by part (the judge's "
            "absence leaves a reward valid; a required part's does not)", (*base, "part"), registry=registry,
        )  # fmt: skip
        self.hack_flags = Counter(
            "rewardstream_hack_flags", "Gating static-analysis hack flags on rewards, by rule", (*base, "rule"),
            registry=registry,
        )  # fmt: skip
        self.static_gate = Counter(
            "rewardstream_static_gate_hits", "Rewards gated to 0 by at least one static-analysis hack flag", base,
            registry=registry,
        )  # fmt: skip
        self.overfit = Counter(
            "rewardstream_public_pass_hidden_fail", "Rewards whose public tests all passed and a hidden one failed "
            "(the overfitting gap)", base, registry=registry,
        )  # fmt: skip
        self.judge_disagree = Counter(
            "rewardstream_judge_tests_disagreements", "Rewards where the judge and the tests disagree, by direction "
            "(judge_pass_tests_fail, tests_pass_judge_fail)", (*base, "direction"), registry=registry,
        )  # fmt: skip
        self._rewards = Children(self.rewards)
        self._invalid = Children(self.invalid)
        self._canary_rewards = Children(self.canary_rewards)
        self._canary_hits = Children(self.canary_hits)
        self._missing = Children(self.missing)
        self._hack_flags = Children(self.hack_flags)
        self._static_gate = Children(self.static_gate)
        self._overfit = Children(self.overfit)
        self._judge_disagree = Children(self.judge_disagree)

    def observe(self, reward: RewardEvent | DecidedReward) -> None:
        """Count one committed reward."""
        base = (reward.policy_name, reward.policy_version, self._datasets(dataset_of(reward.task_id)))
        self._rewards(*base, "unknown" if reward.valid is None else str(reward.valid).lower()).inc()
        if reward.invalid_reason is not None:
            self._invalid(*base, reward.invalid_reason).inc()
        if reward.canary:
            self._canary_rewards(*base).inc()
            if reward.reward > 0:
                self._canary_hits(*base, self._tasks(reward.task_id)).inc()
        for part in reward.missing:
            self._missing(*base, part).inc()
        rules = hack_rules(reward)
        for rule in rules:
            self._hack_flags(*base, self._rules(rule)).inc()
        if rules:
            self._static_gate(*base).inc()
        if PUBLIC_PASSED_HIDDEN_FAILED in reward.flags:
            self._overfit(*base).inc()
        direction = judge_disagreement(reward)
        if direction is not None:
            self._judge_disagree(*base, direction).inc()
