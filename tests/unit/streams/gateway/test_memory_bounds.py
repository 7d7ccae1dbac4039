"""What the gateway keeps per request and per reward, and its bound (docs/operations.md, "Memory that levels
off"): a /run_code or rewards request leaves no waiter behind, and the rewards cache holds at most
``RS_GATEWAY_REWARD_CACHE`` rewards, so once full, more rewards cost no memory (measured with tracemalloc)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import tracemalloc
import uuid

from schemas.codec import encode
from schemas.events import InputRef, RewardEvent
from streams.gateway.app import _Published
from streams.gateway.bridge import ReplyTail, RewardTail


class _Msg:
    """What the tail reads of a Kafka message: bytes of its own, as the consumer allocates them."""

    def __init__(self, value: bytes) -> None:
        self._value = bytes(memoryview(value))

    def value(self) -> bytes:
        return self._value


def _reward(gid: str) -> bytes:
    """A reward's wire bytes, shaped as the processor's (components, reasons, the ids of its inputs)."""
    return encode(
        RewardEvent(
            generation_id=gid, episode_id=gid, run_id="run-1", task_id="HumanEval/0", reward=0.9,
            policy_name="default", policy_version="1", components={"hidden_pass_rate": 1.0, "judge": 0.8},
            reasons=["hidden tests 3/3", "judge 0.80"], valid=True,
            inputs=[InputRef(role=r, event_id=uuid.uuid4().hex) for r in ("execution", "verdict", "judgement")],
        )
    )  # fmt: skip


def _tail(cache_size: int) -> RewardTail:
    return RewardTail({}, "rs.rewards", cache_size=cache_size, lookback=0, group="g")  # never started


def _read(tail: RewardTail, work: list[bytes]) -> int:
    """Traced bytes allocated after the tail read ``work`` (tracemalloc running), against before."""
    gc.collect()
    before = tracemalloc.get_traced_memory()[0]
    for raw in work:
        tail._handle(_Msg(raw))  # type: ignore[arg-type]
    gc.collect()
    return tracemalloc.get_traced_memory()[0] - before


def test_the_rewards_cache_stops_growing_at_its_bound() -> None:
    size = 1_000
    tail = _tail(size)
    first = [_reward(f"g{i:05}") for i in range(size)]
    more = [_reward(f"h{i:05}") for i in range(5 * size)]
    tracemalloc.start()
    try:
        filling = _read(tail, first)
        assert len(tail._cache) == size
        _read(tail, more[:size])  # the first evictions settle the dict's table
        full = _read(tail, more[size:])  # each new reward evicts the oldest
    finally:
        tracemalloc.stop()
    assert len(tail._cache) == size
    assert "g00000" not in tail._cache
    assert f"h{5 * size - 1:05}" in tail._cache
    # filling it costs per reward (the bytes the gateway answers polls with, the key, the entry), a full one
    # nothing more: what grew was the cache filling, not a leak
    assert filling / size > 500
    assert full / (4 * size) < 4, f"{full / (4 * size):.0f} bytes per reward past the bound"


def test_a_request_leaves_no_waiter_whether_answered_timed_out_or_cancelled() -> None:
    replies = ReplyTail({}, "rs.run_replies", 0, "gw-1")
    rewards = _tail(100)

    async def requests() -> None:
        for n in range(300):
            rid = uuid.uuid4().hex
            future = replies.expect(rid)
            if n % 3 == 0:
                replies.waiters.settle(rid, None)  # type: ignore[arg-type]  # answered
                await asyncio.sleep(0)
            elif n % 3 == 1:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(future, timeout=0)  # the 504
            replies.forget(rid, future)  # the route's finally
            gid = uuid.uuid4().hex
            waiting = rewards.expect(gid)
            if n % 2:
                rewards._handle(_Msg(_reward(gid)))  # type: ignore[arg-type]
                await asyncio.sleep(0)
            rewards.forget(gid, waiting)
            waiting.cancel()

    asyncio.run(requests())
    assert len(replies.waiters) == 0
    assert replies.waiters._futures == {}
    assert len(rewards.waiters) == 0
    assert rewards.waiters._futures == {}


def test_published_ids_are_bounded_like_the_cache() -> None:
    published = _Published(100)
    for n in range(10):
        published.add([f"g{n}-{i}" for i in range(50)])
    assert len(published._ids) == 100
    assert "g9-49" in published
    assert "g0-0" not in published
