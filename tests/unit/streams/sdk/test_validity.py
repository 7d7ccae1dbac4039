"""Which rewards the SDK hands out as training data, and how it keeps the rest apart, bounded."""

from __future__ import annotations

from typing import Any

from schemas.events import RewardEvent
from streams.sdk import validity
from streams.sdk.validity import HeldOut, training_data


def reward(gid: str, value: float = 1.0, **claim: Any) -> RewardEvent:
    return RewardEvent(
        generation_id=gid, episode_id=gid, run_id="r", task_id="t/1", reward=value, policy_name="p",
        policy_version="1", **claim,
    )  # fmt: skip


def test_training_data_is_valid_or_claims_nothing() -> None:
    assert training_data(reward("a", valid=True))
    assert training_data(reward("b", schema_version="1.0"))  # written before the claim: as rewards always were
    assert not training_data(reward("c", valid=False, invalid_reason="missing_signals"))
    assert not training_data(reward("d", valid=False, canary=True, invalid_reason="canary"))


def test_held_out_counts_hits_and_stays_bounded(monkeypatch: Any) -> None:
    monkeypatch.setattr(validity, "MAX_HELD_OUT", 2)
    held = HeldOut()
    for i, value in enumerate((1.0, 0.0, 0.5)):
        r = reward(f"g{i}", value, valid=False, canary=True, invalid_reason="canary")
        held.count(r)
        held.add(r)
    held.count(reward("ok", valid=True))
    assert (held.invalid, held.canary_hits, held.dropped) == (3, 2, 1)
    assert [r.generation_id for r in held.take()] == ["g1", "g2"]
    assert held.take() == []
