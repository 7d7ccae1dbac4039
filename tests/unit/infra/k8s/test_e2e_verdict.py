"""The e2e's verdict: exactly one right reward per expected generation, and the contract's JSON line."""

from __future__ import annotations

from infra.k8s.e2e_verdict import Outcome, tally


def test_one_right_reward_each_is_ok() -> None:
    got = tally([("a", 1.0), ("b", 0.0)], {"a": 1.0, "b": 0.0})
    assert got.ok
    assert (got.rewards, got.duplicates) == (2, 0)


def test_a_second_reward_is_a_duplicate_even_with_the_same_value() -> None:
    got = tally([("a", 1.0), ("a", 1.0), ("a", 0.0), ("b", 0.0)], {"a": 1.0, "b": 0.0})
    assert (got.rewards, got.duplicates) == (4, 2)
    assert not got.ok
    assert got.wrong == ()  # the first one counts


def test_missing_wrong_and_unknown_rewards_are_each_reported() -> None:
    got = tally([("a", 0.0), ("zz", 1.0)], {"a": 1.0, "b": 0.0})
    assert got.missing == ("b",)
    assert got.wrong == ("a: 0, expected 1",)
    assert got.unexpected == ("zz",)
    assert len(got.problems()) == 3


def _passing() -> Outcome:
    outcome = Outcome(tally=tally([("a", 1.0)], {"a": 1.0}), max_replicas=4, scaled_down=True, pod_killed="p")
    outcome.stopped = outcome.host_restored = True
    outcome.seconds = 12.345
    return outcome


def test_the_json_line_has_exactly_the_contracts_keys() -> None:
    line = _passing().line()
    assert line == {"rewards_ok": True, "rewards": 1, "duplicates": 0, "max_replicas": 4, "scaled_down": True,
                    "seconds": 12.3}  # fmt: skip


def test_it_passes_only_when_every_check_holds() -> None:
    assert _passing().passed
    assert _passing().failures() == []
    for change in ({"max_replicas": 1}, {"scaled_down": False}, {"pod_killed": None}, {"stopped": False},
                   {"host_restored": False}, {"errors": ["boom"]}, {"tally": None}):  # fmt: skip
        outcome = _passing()
        for name, value in change.items():
            setattr(outcome, name, value)
        assert not outcome.passed, change
        assert outcome.failures(), change


def test_nothing_read_is_not_ok() -> None:
    line = Outcome().line()
    assert line["rewards_ok"] is False
    assert line["rewards"] == 0
