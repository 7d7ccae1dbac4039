"""The audit sample: deterministic by generation id, at the configured rate, on the other backend."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.errors import ConfigError
from workers.audits.sample import audited, fraction_of, other_backend

ids = st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=128)
rates = st.floats(min_value=0.0, max_value=1.0)


@given(ids, rates)
def test_the_same_id_is_always_sampled_the_same_way(generation_id: str, rate: float) -> None:
    assert audited(generation_id, rate) == audited(generation_id, rate)
    assert 0.0 <= fraction_of(generation_id) < 1.0


@given(ids, rates, rates)
def test_a_higher_rate_keeps_every_id_a_lower_one_kept(generation_id: str, a: float, b: float) -> None:
    low, high = sorted((a, b))
    assert not audited(generation_id, low) or audited(generation_id, high)


@given(ids)
def test_rate_zero_is_off_and_one_is_all(generation_id: str) -> None:
    assert not audited(generation_id, 0.0)
    assert audited(generation_id, 1.0)


@settings(max_examples=6)
@given(st.sampled_from([0.01, 0.1, 0.5]), st.integers(min_value=0, max_value=1_000_000))
def test_the_sample_is_the_rate(rate: float, seed: int) -> None:
    """Over 20 000 ids the share sampled is the rate, within five binomial standard deviations."""
    n = 20_000
    got = sum(audited(f"gen-{seed}-{i}", rate) for i in range(n)) / n
    assert abs(got - rate) <= 5 * (rate * (1 - rate) / n) ** 0.5


@pytest.mark.parametrize("rate", [-0.1, 1.5])
def test_a_rate_outside_zero_one_is_refused(rate: float) -> None:
    with pytest.raises(ConfigError):
        audited("g", rate)


def test_the_audit_runs_on_the_other_backend() -> None:
    assert other_backend("process") == "docker"
    assert other_backend("docker") == "process"
    assert other_backend("?") is None
