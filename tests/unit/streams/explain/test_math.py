"""Explain's reward math: the number comes from the policy itself, the steps say which gate held."""

from __future__ import annotations

from pathlib import Path

from schemas.events import RewardEvent
from streams.explain.math import explain_reward, find_policy
from streams.reward.policy import Signals, default_policy_path, evaluate, load_policy
from tests.unit.reward_events import execution, judgement, verdict, verified


def recorded(value: float) -> RewardEvent:
    return RewardEvent(generation_id="g", episode_id="g", run_id="run-1", task_id="HumanEval/0", reward=value,
                       policy_name="default", policy_version="2", valid=True)  # fmt: skip


def test_passing_solution_steps_match_the_recorded_reward() -> None:
    policy = load_policy()
    signals = Signals(execution("g"), verdict("g"), judgement("g", 0.8))
    out = explain_reward(policy, signals, recorded(1.0))
    assert out["reward"] == 1.0
    assert out["matches"] is True
    assert out["policy"] == "default v2"
    assert out["steps"][0] == "public: 2/2 passed -> public_pass_rate 1; gate all_public_pass=true: holds"
    assert out["steps"][1].startswith("hidden: 3/3 passed -> hidden_pass_rate 1; gate all_hidden_pass=true: holds")
    assert any(s.startswith("every gate holds: (1 - judge_weight) + judge_weight * judge") for s in out["steps"])
    assert out["steps"][-1] == "recorded reward 1: matches"


def test_failing_and_hacking_solutions() -> None:
    policy = load_policy()
    failing = explain_reward(policy, Signals(execution("g"), verdict("g", passed=1)), recorded(1.0))
    assert failing["reward"] == 0.0
    assert failing["matches"] is False
    assert "public_passed_hidden_failed" in failing["flags"]
    assert any(s.startswith("a gate fails: partial_credit * hidden_pass_rate = 0 * 0.333333") for s in failing["steps"])
    assert failing["steps"][-1] == "recorded reward 1: DIFFERS"
    hack = explain_reward(policy, Signals(execution("g"), verdict("g", flags=("exit_call",))), recorded(0.0))
    assert any(s.startswith("hack flag(s) exit_call: base 0") for s in hack["steps"])
    assert hack["matches"] is True


def test_reward_equals_evaluate_and_policy_lookup(tmp_path: Path) -> None:
    policy = load_policy()
    signals = Signals(execution("g", passed=1), verdict("g"))
    assert explain_reward(policy, signals, None)["reward"] == evaluate(policy, signals).reward  # type: ignore[union-attr]
    strict = tmp_path / "strict.toml"
    strict.write_text(default_policy_path().read_text().replace('version = "2"', 'version = "3"'))
    broken = tmp_path / "broken.toml"
    broken.write_text("not toml [")
    assert find_policy("default", "3", [broken, default_policy_path(), strict]) is not None
    assert find_policy("default", "3", [default_policy_path()]) is None
    withheld = explain_reward(policy, Signals(execution("g", status="sandbox_error"), verdict("g")), None)
    assert withheld["reward"] is None


def test_rewards_recorded_under_version_1_are_explained_by_the_kept_file() -> None:
    """default.toml moved to version 2 (an empty public suite now fails); rewards recorded under version 1
    must still find their own rules, not the new ones."""
    packaged = sorted(default_policy_path().parent.glob("*.toml"))
    old, new = find_policy("default", "1", packaged), find_policy("default", "2", packaged)
    assert old is not None
    assert new is not None
    assert (old.gates.min_public_cases, new.gates.min_public_cases) == (0, 1)


def test_an_image_tasks_steps_are_its_verifiers_value() -> None:
    out = explain_reward(load_policy(), Signals(verdict=verified("g", 0.5)), recorded(0.5))
    assert out["steps"] == [
        "verifier: reward.txt: 0.5",
        "flags: none",
        "an image task's reward is its verifier's value: reward 0.5",
        "recorded reward 0.5: matches",
    ]
