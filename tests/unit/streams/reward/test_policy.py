"""Reward policy files: loading, validation, and parity of the default with the grader's old interim rule."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from schemas.events import StaticFlag
from streams.reward.policy import (
    PUBLIC_PASSED_HIDDEN_FAILED,
    WARN_FLAG_PREFIX,
    Policy,
    PolicyError,
    Scored,
    Signals,
    Withheld,
    awaited,
    default_policy_path,
    evaluate,
    load_policy,
)
from tests.unit.interim_reward import interim_reward
from tests.unit.reward_events import execution, judgement, verdict, verified
from workers.grading.static_analysis import RULES


@pytest.fixture(scope="module")
def default() -> Policy:
    return load_policy()


def scored(outcome: Scored | Withheld) -> Scored:
    assert isinstance(outcome, Scored), outcome
    return outcome


def test_default_file_loads(default: Policy) -> None:
    assert (default.name, default.version) == ("default", "2")
    assert default.join.wait_for == ("execution", "verdict", "judgement")
    assert default.score.judge_weight == 0.0


def test_default_warn_rules_are_the_graders_warn_severity(default: Policy) -> None:
    """The policy cannot see severities (events carry rule ids only): its list must match the grader's."""
    assert set(default.gates.warn_rules) == {rule for rule, (sev, _) in RULES.items() if sev == "warn"}


@pytest.mark.parametrize(
    ("public_ok", "hidden_passed", "hidden_total", "rules"),
    [*itertools.product([True, False], [0, 2, 3], [3], [(), ("exit_call",), ("file_access",)]), (True, 0, 0, ())],
)
def test_default_reproduces_the_grader_policy(
    default: Policy, public_ok: bool, hidden_passed: int, hidden_total: int, rules: tuple[str, ...]
) -> None:
    gid = "g1"
    signals = Signals(
        execution(gid, passed=2 if public_ok else 1, total=2),
        verdict(gid, passed=hidden_passed, total=hidden_total, flags=rules),
        judgement(gid, score=0.3),
    )
    all_pass = public_ok and hidden_passed == hidden_total
    reward, hacks = interim_reward("pass" if all_pass else "fail", hidden_total, rules)
    got = scored(evaluate(default, signals))
    assert got.reward == reward
    gating = {f for f in got.flags if f != PUBLIC_PASSED_HIDDEN_FAILED and not f.startswith(WARN_FLAG_PREFIX)}
    assert gating == set(hacks)
    assert {f for f in got.flags if f.startswith(WARN_FLAG_PREFIX)} == {
        f"{WARN_FLAG_PREFIX}{r}" for r in rules if RULES[r][0] == "warn"
    }


def test_public_passed_hidden_failed_is_flagged(default: Policy) -> None:
    got = scored(evaluate(default, Signals(execution("g"), verdict("g", passed=1), judgement("g"))))
    assert got.reward == 0.0
    assert PUBLIC_PASSED_HIDDEN_FAILED in got.flags
    assert "public passed, hidden failed" in got.reasons
    assert got.components["hidden_pass_rate"] == pytest.approx(1 / 3)


def test_sandbox_error_is_withheld_never_zero(default: Policy) -> None:
    for signals in (
        Signals(execution("g"), verdict("g", status="sandbox_error"), judgement("g")),
        Signals(execution("g", status="sandbox_error"), verdict("g"), judgement("g")),
    ):
        outcome = evaluate(default, signals)
        assert isinstance(outcome, Withheld)
        assert "sandbox_error" in outcome.reasons[0]


def test_missing_judge_does_not_gate_but_missing_verdict_does(default: Policy) -> None:
    got = scored(evaluate(default, Signals(execution("g"), verdict("g")), missing=("judgement",)))
    assert got.reward == 1.0
    assert any("judgement missing" in r for r in got.reasons)
    got = scored(evaluate(default, Signals(execution("g"), None, judgement("g")), missing=("verdict",)))
    assert got.reward == 0.0
    assert any("verdict missing at the deadline" in r for r in got.reasons)


def test_zero_hidden_cases_prove_nothing(default: Policy) -> None:
    assert scored(evaluate(default, Signals(execution("g"), verdict("g", passed=0, total=0)))).reward == 0.0


def test_an_empty_public_suite_proves_nothing(default: Policy) -> None:
    """The grader fails a task whose public suite has no cases; a task without a public suite is fine."""
    empty = execution("g", passed=0, total=0)
    got = scored(evaluate(default, Signals(empty, verdict("g"), judgement("g"))))
    assert got.reward == 0.0
    assert "public: 0 cases, fewer than 1: no proof" in got.reasons
    no_suite = empty.model_copy(update={"suite_kind": None})
    assert scored(evaluate(default, Signals(no_suite, verdict("g"), judgement("g")))).reward == 1.0
    lenient = default.model_copy(update={"gates": default.gates.model_copy(update={"min_public_cases": 0})})
    assert scored(evaluate(lenient, Signals(empty, verdict("g"), judgement("g")))).reward == 1.0


def test_judge_weight_partial_credit_and_penalties(default: Policy) -> None:
    policy = default.model_copy(
        update={
            "score": default.score.model_copy(update={"judge_weight": 0.2, "partial_credit": 0.5}),
            "penalties": {"file_access": 0.1},
        }
    )
    passing = scored(evaluate(policy, Signals(execution("g"), verdict("g"), judgement("g", score=0.5))))
    assert passing.reward == pytest.approx(0.8 + 0.2 * 0.5)
    partial = scored(evaluate(policy, Signals(execution("g"), verdict("g", passed=2), judgement("g"))))
    assert partial.reward == pytest.approx(0.5 * 2 / 3)
    penalised = scored(evaluate(policy, Signals(execution("g"), verdict("g", flags=("file_access",)))))
    assert penalised.reward == pytest.approx(0.9)
    assert penalised.flags == ("warn:file_access",)  # shown on the reward, never gating
    hacked = scored(evaluate(policy, Signals(execution("g"), verdict("g", passed=2, flags=("exit_call",)))))
    assert hacked.reward == 0.0
    assert hacked.flags == ("exit_call",) or "exit_call" in hacked.flags


def test_flags_are_static_rule_ids(default: Policy) -> None:
    v = verdict("g")
    v = v.model_copy(update={"static_flags": [StaticFlag(rule="builtins_patch", message="x", line=3)]})
    got = scored(evaluate(default, Signals(execution("g"), v, judgement("g"))))
    assert got.flags == ("builtins_patch",)
    assert "hack flag: builtins_patch" in got.reasons


def test_rules_only_counted_still_gate(default: Policy) -> None:
    """A verdict shows a capped list of flags; a rule that is only in the per-rule counts gates all the same."""
    v = verdict("g", passed=2, flags=("file_access",))
    v = v.model_copy(update={"static_flag_counts": {"file_access": 70, "native_code": 1}})
    got = scored(evaluate(default, Signals(execution("g"), v, judgement("g"))))
    assert got.reward == 0.0
    assert "native_code" in got.flags
    assert "hack flag: native_code" in got.reasons


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ('name = "x"\nversion = "1"\nbogus = 1\n', "bogus"),
        ('name = "x"\nversion = "1"\n[join]\ndeadline_s = -1\n', "join.deadline_s"),
        ('name = "x"\nversion = "1"\n[join]\nwait_for = ["verdict"]\nrequired = ["execution"]\n', "subset"),
        ('name = "x"\n', "version"),
        ("name = ", "not valid TOML"),
        ('schema = "other/v9"\nname = "x"\nversion = "1"\n', "schema"),
    ],
)
def test_invalid_policy_files_say_what_is_wrong(tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "p.toml"
    path.write_text(text)
    with pytest.raises(PolicyError, match=needle.replace(".", r"\.")):
        load_policy(path)


def test_missing_policy_file(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="cannot read"):
        load_policy(tmp_path / "nope.toml")


def test_packaged_default_path_exists() -> None:
    assert default_policy_path().is_file()


def test_io_only_tasks_do_not_gate_on_self_only_rules(default: Policy) -> None:
    v = verdict("g", flags=("exit_call", "signal_tricks")).model_copy(update={"suite_kind": "io"})
    ex = execution("g").model_copy(update={"suite_kind": "io"})
    got = scored(evaluate(default, Signals(ex, v, judgement("g"))))
    assert got.reward == 1.0
    assert got.flags == ("warn:exit_call", "warn:signal_tricks")
    assert any("not gating" in r for r in got.reasons)
    call_public = execution("g")  # a call suite: exiting early could skip checks, so it gates
    assert scored(evaluate(default, Signals(call_public, v, judgement("g")))).reward == 0.0
    other = verdict("g", flags=("builtins_patch",)).model_copy(update={"suite_kind": "io"})
    assert scored(evaluate(default, Signals(ex, other, judgement("g")))).reward == 0.0


def test_an_image_tasks_reward_is_its_verifiers_value(default: Policy) -> None:
    got = scored(evaluate(default, Signals(verdict=verified("g", 0.5))))
    assert got.reward == 0.5
    assert got.components == {"verifier_reward": 0.5}
    assert got.reasons == ("verifier: reward.txt: 0.5",)
    assert got.flags == ()


def test_an_image_tasks_zero_says_why(default: Policy) -> None:
    why = "the verifier wrote neither reward.json nor reward.txt"
    got = scored(evaluate(default, Signals(verdict=verified("g", 0.0, reason=why))))
    assert (got.reward, got.reasons) == (0.0, (f"verifier: {why}",))


def test_an_image_tasks_sandbox_error_is_withheld_never_zero(default: Policy) -> None:
    outcome = evaluate(default, Signals(verdict=verified("g", None, status="sandbox_error")))
    assert isinstance(outcome, Withheld)


def test_an_image_tasks_hack_flag_still_gates(default: Policy) -> None:
    got = scored(evaluate(default, Signals(verdict=verified("g", 1.0, flags=("exit_call",)))))
    assert got.reward == 0.0
    assert got.flags == ("exit_call",)


def test_an_image_task_awaits_its_verdict_alone(default: Policy) -> None:
    assert awaited(default, Signals(verdict=verified("g"))) == ("verdict",)
    assert awaited(default, Signals(verdict=verdict("g"))) == default.join.wait_for
    assert awaited(default, Signals()) == default.join.wait_for
