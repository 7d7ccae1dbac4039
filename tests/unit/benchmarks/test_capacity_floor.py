"""The Kafka floor produces records of the real processor's sizes: a real reward and its emitted marker."""

from __future__ import annotations

import orjson

from benchmarks.capacity_floor import sample_outputs, validation_us


def test_the_floor_produces_a_real_reward_and_its_emitted_marker() -> None:
    reward, marker = sample_outputs()
    assert orjson.loads(reward)["reward"] == 1.0
    stored = orjson.loads(marker)
    assert stored["status"] == "emitted"
    assert stored["reward_event_id"] == orjson.loads(reward)["event_id"]


def test_the_inputs_validation_is_timed_per_generation() -> None:
    assert validation_us(n=6, rounds=1) > 0
