"""The core as the Faust engine drives it: an agent and a deadline timer on one event loop.

What only the Faust engine needs lives here, not in the shared core: each processor step runs under one lock
(the agent's messages and the timer's ticks interleave at every ``await``), after emit-then-mark has re-marked
the partitions the step reads (a crash may have lost a reward's marker); what the step awaits, for stall
reports; and which inputs stalled (Faust's consumer can stop fetching after a rebalance).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from streams.reward.faust.emit_then_mark import EmitThenMark
from streams.reward.processor import RewardProcessor


class FaustJoin:
    """``processor`` over ``marks`` (its store and outputs), one step at a time."""

    def __init__(self, processor: RewardProcessor, marks: EmitThenMark) -> None:
        self.processor = processor
        self.marks = marks
        self._lock = asyncio.Lock()
        self._step = "idle"

    @property
    def doing(self) -> str:
        """What the join awaits right now (a rewards tail scan, a reward's ack, or its own step)."""
        return self.marks.doing or self._step

    async def handle(
        self, topic: str, partition: int, offset: int, *, timestamp: float, key: bytes | None, value: bytes | None
    ) -> None:
        """One input message, after its partition's rewards tail was re-marked."""
        async with self._lock:
            await self.marks.mark_sent(partition)
            self._step = f"handling {topic}[{partition}]@{offset}"
            try:
                await self.processor.handle(topic, partition, offset, timestamp=timestamp, key=key, value=value)
            finally:
                self._step = "idle"

    async def tick(self, partitions: set[int]) -> None:
        """Deadlines: planned outside the lock (it waits on the broker), carried out under it."""
        plan = await self.processor.plan_tick(partitions)
        if not plan.due and not plan.expire:
            return
        async with self._lock:
            for partition in sorted(plan.touched):
                await self.marks.mark_sent(partition)
            self._step = f"deciding {len(plan.due)} generations past their deadline"
            try:
                await self.processor.apply_tick(plan)
            finally:
                self._step = "idle"

    def stalled(self, backlog: Iterable[tuple[str, int]], stall_s: float) -> list[tuple[str, int]]:
        """Inputs with messages waiting that brought nothing for ``stall_s``."""
        limit = self.processor.clock() - stall_s
        return sorted(tp for tp in backlog if self.processor.last_progress(*tp) < limit)
