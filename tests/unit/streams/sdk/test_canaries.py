"""Canaries mixed at a rate: every task kept in order, canaries at about the rate, the same mix from the same seed."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.sdk.canaries import CanaryMix
from streams.sdk.config import SdkError

CANARIES = ("canary/add", "canary/sort")


@given(st.lists(st.text(min_size=1, max_size=8), max_size=200), st.floats(0.0, 1.0), st.integers())
def test_tasks_keep_their_order_and_only_canaries_are_added(tasks: list[str], rate: float, seed: int) -> None:
    mix = CanaryMix(CANARIES, rate, seed=seed)
    out = mix.batch(tasks)
    it = iter(out)
    for task in tasks:  # each task appears, in order, with only canaries between
        for got in it:
            if got == task:
                break
            assert got in CANARIES
        else:
            pytest.fail(f"{task!r} lost")
    assert len(out) - len(tasks) == mix.mixed
    assert CanaryMix(CANARIES, rate, seed=seed).batch(tasks) == out  # reproducible


def test_the_rate_is_kept_and_canaries_alternate() -> None:
    mix = CanaryMix(CANARIES, 0.05, seed=7)
    tasks = [f"HumanEval/{i % 164}" for i in range(20_000)]
    out = mix.batch(tasks)
    added = [t for t in out if mix.is_canary(t)]
    assert 0.045 < len(added) / len(tasks) < 0.055
    assert added[:4] == [*CANARIES, *CANARIES]
    assert out[0] == tasks[0]  # a canary never leads: it follows a task


def test_rates_at_the_ends() -> None:
    assert CanaryMix((), 0.0).batch(["a", "b"]) == ["a", "b"]
    assert CanaryMix(["c"], 1.0).batch(["a", "b"]) == ["a", "c", "b", "c"]


@pytest.mark.parametrize(("canaries", "rate", "said"), [((), 0.1, "at least one canary"), (CANARIES, 1.5, "0..1"),
                                                          (CANARIES, -0.1, "0..1")])  # fmt: skip
def test_bad_settings_are_refused(canaries: tuple[str, ...], rate: float, said: str) -> None:
    with pytest.raises(SdkError, match=said):
        CanaryMix(canaries, rate)
