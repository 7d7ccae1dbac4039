"""The reward math of one generation, step by step (pure): the policy re-evaluated on the joined signals.

The number comes from ``streams.reward.policy.evaluate`` itself (never a second implementation); the steps
only say, from the policy and the signals, which gate held and which formula produced it.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from schemas.events import RewardEvent
from schemas.signals import Signal
from streams.reward.policy import (
    PUBLIC_PASSED_HIDDEN_FAILED,
    Policy,
    PolicyError,
    Scored,
    Signals,
    evaluate,
    image_task,
    load_policy,
)

TOLERANCE = 1e-9


def find_policy(name: str, version: str, candidates: Iterable[Path]) -> Policy | None:
    """The first candidate file whose policy has this name and version (unreadable ones are skipped)."""
    for path in candidates:
        try:
            policy = load_policy(path)
        except PolicyError:
            continue
        if policy.name == name and policy.version == version:
            return policy
    return None


def _fmt(value: float) -> str:
    return f"{value:.6g}"


def _gate_steps(policy: Policy, signals: Signals, missing: tuple[Signal, ...]) -> list[str]:
    steps = []
    for part in missing:
        required = part in policy.join.required
        steps.append(f"{part} missing at the deadline: {'required, gate fails' if required else 'not required'}")
    ex = signals.execution
    if ex is not None:
        rate = ex.passed / ex.total if ex.total else 1.0
        if ex.suite_kind is not None and ex.total < policy.gates.min_public_cases:
            gate = f"only {ex.total} < min_public_cases {policy.gates.min_public_cases}: fails"
        else:
            ok = ex.passed == ex.total or not policy.gates.all_public_pass
            gate = f"all_public_pass={str(policy.gates.all_public_pass).lower()}: {'holds' if ok else 'fails'}"
        steps.append(f"public: {ex.passed}/{ex.total} passed -> public_pass_rate {_fmt(rate)}; gate {gate}")
    verdict = signals.verdict
    if verdict is not None:
        rate = verdict.passed / verdict.total if verdict.total else 0.0
        if verdict.total < policy.gates.min_hidden_cases:
            gate = f"only {verdict.total} < min_hidden_cases {policy.gates.min_hidden_cases}: fails"
        else:
            ok = verdict.passed == verdict.total or not policy.gates.all_hidden_pass
            gate = f"all_hidden_pass={str(policy.gates.all_hidden_pass).lower()}: {'holds' if ok else 'fails'}"
        steps.append(f"hidden: {verdict.passed}/{verdict.total} passed -> hidden_pass_rate {_fmt(rate)}; gate {gate}")
    return steps


def _formula(policy: Policy, scored: Scored, hacks: list[str]) -> list[str]:
    comps = scored.components
    if hacks:
        base, text = 0.0, f"hack flag(s) {', '.join(hacks)}: base 0"
    elif comps.get("gate") == 1.0:
        weight = policy.score.judge_weight if "judge" in comps else 0.0
        judge = comps.get("judge", 0.0)
        base = (1.0 - weight) + weight * judge
        text = f"every gate holds: (1 - judge_weight) + judge_weight * judge = (1 - {_fmt(weight)}) + "
        text += f"{_fmt(weight)} * {_fmt(judge)} = {_fmt(base)}"
    else:
        rate = comps.get("hidden_pass_rate", 0.0)
        base = policy.score.partial_credit * rate
        text = f"a gate fails: partial_credit * hidden_pass_rate = {_fmt(policy.score.partial_credit)} * {_fmt(rate)}"
        text += f" = {_fmt(base)}"
    steps = [text]
    penalty = comps.get("penalty", 0.0)
    if penalty:
        steps.append(f"minus penalties {_fmt(penalty)} for warn-severity flags: {_fmt(base - penalty)}")
    steps.append(f"clamped to [0, 1]: reward {_fmt(scored.reward)}")
    return steps


def explain_reward(policy: Policy, signals: Signals, recorded: RewardEvent | None) -> dict[str, Any]:
    """Each step from the signals to the number, and whether it matches the recorded reward."""
    missing = tuple(recorded.missing) if recorded is not None else ()
    outcome = evaluate(policy, signals, missing)
    out: dict[str, Any] = {
        "policy": f"{policy.name} v{policy.version}",
        "available": True,
        "inputs": list(signals.present()),
        "missing": list(missing),
    }
    if not isinstance(outcome, Scored):
        out.update(steps=[*outcome.reasons, "no reward: withheld until a retry"], reward=None, matches=recorded is None)
        return out
    hacks = [f for f in outcome.flags if f != PUBLIC_PASSED_HIDDEN_FAILED]
    if image_task(signals):  # no gates: the verifier's value, less what flags take
        steps = [*outcome.reasons, f"flags: {', '.join(outcome.flags) if outcome.flags else 'none'}",
                 f"an image task's reward is its verifier's value: reward {_fmt(outcome.reward)}"]  # fmt: skip
    else:
        steps = _gate_steps(policy, signals, missing)
        judge = signals.judgement
        if judge is not None:
            score = "error" if judge.score is None else _fmt(judge.score)
            steps.append(f"judge: {score} (judge_weight {_fmt(policy.score.judge_weight)})")
        steps.append(f"flags: {', '.join(outcome.flags) if outcome.flags else 'none'}")
        steps.extend(_formula(policy, outcome, hacks))
    matches = recorded is not None and abs(recorded.reward - outcome.reward) <= TOLERANCE
    if recorded is not None:
        steps.append(f"recorded reward {_fmt(recorded.reward)}: {'matches' if matches else 'DIFFERS'}")
    out.update(
        steps=steps,
        reward=outcome.reward,
        components=dict(sorted(outcome.components.items())),
        flags=list(outcome.flags),
        matches=matches,
    )
    return out
