"""The SDK's reward bookkeeping without Kafka: one delivery per generation id, commits cover only what was
handed out, duplicates and other runs' rewards are dropped, timeouts name what is missing."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from schemas.codec import encode
from schemas.events import RewardEvent
from streams.sdk import RewardTimeoutError, TrainerClient, TrainerConfig
from streams.sdk.config import SdkError, producer_config


@dataclass
class FakeMessage:
    value_: bytes
    partition_: int
    offset_: int

    def value(self) -> bytes:
        return self.value_

    def partition(self) -> int:
        return self.partition_

    def offset(self) -> int:
        return self.offset_

    def topic(self) -> str:
        return "rs.rewards"


def reward(gid: str, run: str = "run-1", value: float = 1.0, **claim: Any) -> bytes:
    return encode(
        RewardEvent(
            generation_id=gid, episode_id=gid, run_id=run, task_id="t/1", reward=value,
            policy_name="default", policy_version="1", **({"valid": True} | claim),
        )
    )  # fmt: skip


CANARY: dict[str, Any] = {"valid": False, "canary": True, "invalid_reason": "canary"}


@pytest.fixture
def client() -> Iterator[TrainerClient]:
    config = TrainerConfig(
        kafka={"bootstrap.servers": "127.0.0.1:1"}, generations_topic="rs.generations",
        rewards_topic="rs.rewards", run_id="run-1", producer_overrides={"log_level": 0},
    )  # fmt: skip
    c = TrainerClient(config, consume=False)
    yield c
    c.close(flush_timeout_s=0)


def feed(client: TrainerClient, *messages: FakeMessage) -> None:
    for msg in messages:
        client._handle(msg)  # type: ignore[arg-type]


def test_futures_iterator_duplicates_and_commit_positions(client: TrainerClient) -> None:
    future = client.future_for("a")
    feed(client, FakeMessage(reward("a"), 0, 10), FakeMessage(reward("b"), 0, 11), FakeMessage(reward("c"), 1, 5))
    assert future.result(timeout=0).generation_id == "a"
    # b and c were not handed out yet: commits stop before them.
    assert client._positions() == {0: 11, 1: 5}
    feed(client, FakeMessage(reward("a"), 0, 12), FakeMessage(reward("x", run="other"), 1, 6))
    assert [r.generation_id for r in client.rewards(timeout_s=0.01, limit=1)] == ["b"]
    assert client._positions() == {0: 13, 1: 5}
    assert client.future_for("c").result(timeout=0).generation_id == "c"
    assert client._positions() == {0: 13, 1: 7}
    feed(client, FakeMessage(reward("c"), 1, 7), FakeMessage(b"not json", 1, 8))
    assert client.stats == {
        "delivered": 3, "pending": 0, "unclaimed": 0, "duplicates_dropped": 2, "undecodable": 1, "held_out": 0,
        "invalid": 0, "canary_hits": 0,
    }  # fmt: skip
    with pytest.raises(SdkError, match="already delivered"):
        client.future_for("a")


def test_rebuild_below_committed_offset_drops_rewards_delivered_before_a_restart(client: TrainerClient) -> None:
    client._state.rebuild_until = {0: 2}
    client._state.consumed = {0: 2}
    feed(client, FakeMessage(reward("old"), 0, 0), FakeMessage(reward("old2"), 0, 1))
    assert client._positions() == {0: 2}  # re-reading never moves the position back
    feed(client, FakeMessage(reward("old"), 0, 2), FakeMessage(reward("new"), 0, 3))
    assert [r.generation_id for r in client.rewards(timeout_s=0.01, limit=1)] == ["new"]
    assert client.stats["duplicates_dropped"] == 1


def test_wait_names_missing_generations(client: TrainerClient) -> None:
    feed(client, FakeMessage(reward("here"), 0, 0))
    with pytest.raises(RewardTimeoutError) as err:
        client.wait(["here", "gone-1", "gone-2"], timeout_s=0.05)
    assert err.value.missing == ["gone-1", "gone-2"]
    assert "2 reward(s) missing after 0.05s: gone-1, gone-2" in str(err.value)
    with pytest.raises(RewardTimeoutError):
        next(client.rewards(timeout_s=0.01))


def test_producer_is_idempotent_compressed_and_batching() -> None:
    config = TrainerConfig(kafka={}, generations_topic="g", rewards_topic="r", run_id="r1", compression="zstd")
    conf = producer_config(config)
    assert conf["enable.idempotence"] is True
    assert conf["acks"] == "all"
    assert conf["compression.type"] == "zstd"
    assert int(conf["linger.ms"]) > 0


def test_generation_builds_events_of_the_run(client: TrainerClient) -> None:
    event = client.generation("HumanEval/0", "def f(): pass\n", generation_id="g1", sample_index=3)
    assert (event.run_id, event.episode_id, event.sample_index) == ("run-1", "g1", 3)
    with pytest.raises(Exception, match="bad generation"):
        client.generation("HumanEval/0", "x", generation_id="bad id with spaces")


def test_async_iterator_and_wait(client: TrainerClient) -> None:
    import asyncio

    from streams.sdk import AsyncTrainerClient

    async def run() -> list[str]:
        aclient = AsyncTrainerClient(client)
        feed(client, FakeMessage(reward("a"), 0, 0), FakeMessage(reward("b"), 0, 1), FakeMessage(reward("c"), 1, 0))
        got = [r.generation_id async for r in aclient.rewards(timeout_s=1, limit=2)]
        waited = await aclient.wait(["c"], timeout_s=1)
        with pytest.raises(RewardTimeoutError):
            await aclient.wait(["d"], timeout_s=0.05)
        with pytest.raises(RewardTimeoutError):
            await anext(aclient.rewards(timeout_s=0.05))
        return [*got, *waited]

    assert asyncio.run(run()) == ["a", "b", "c"]


def test_the_default_stream_holds_invalid_rewards_apart(client: TrainerClient) -> None:
    feed(
        client,
        FakeMessage(reward("hack", value=1.0, **CANARY), 0, 1),
        FakeMessage(reward("honest", value=0.0, **CANARY), 0, 2),
        FakeMessage(reward("infra", value=0.0, valid=False, invalid_reason="sandbox_error"), 0, 3),
        FakeMessage(reward("ok"), 0, 4),
        FakeMessage(reward("hack", value=1.0, **CANARY), 0, 5),  # a duplicate stays one
    )
    assert [r.generation_id for r in client.rewards(timeout_s=0.05, limit=1)] == ["ok"]
    with pytest.raises(RewardTimeoutError):
        next(client.rewards(timeout_s=0.05))  # nothing invalid ever comes out of it
    stats = client.stats
    assert (stats["held_out"], stats["invalid"], stats["canary_hits"], stats["duplicates_dropped"]) == (3, 3, 1, 1)
    assert client._positions() == {0: 6}  # held-out rewards never hold commits back
    held = client.held_out()
    assert [(r.generation_id, r.invalid_reason) for r in held] == [
        ("hack", "canary"), ("honest", "canary"), ("infra", "sandbox_error"),
    ]  # fmt: skip
    assert client.held_out() == []
    with pytest.raises(SdkError, match="already delivered"):
        client.future_for("hack")


def test_a_future_gets_its_reward_marked_even_when_invalid(client: TrainerClient) -> None:
    early = client.future_for("hack")
    feed(client, FakeMessage(reward("hack", **CANARY), 0, 1), FakeMessage(reward("late", **CANARY), 0, 2))
    got = early.result(timeout=0)
    assert (got.valid, got.canary, got.reward) == (False, True, 1.0)
    late = client.future_for("late").result(timeout=0)  # claimed from the held-out rewards
    assert late.invalid_reason == "canary"
    assert client.held_out() == []
    assert client.stats["canary_hits"] == 2
