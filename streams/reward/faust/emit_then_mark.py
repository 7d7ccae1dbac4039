"""Exactly once for the Faust engine: emit a reward, then mark its generation; after a crash, re-mark.

Faust's exactly_once has open upstream bugs (duplicates after a kill, crashes on rebalance), so the Faust
engine gets exactly once from idempotent emission plus de-duplication: a reward is produced and
acknowledged first, then the generation is marked ``emitted`` in the table (changelog) together with a
per-partition watermark, "every reward below this rewards offset is marked". A crash between the two leaves
rewards that are not marked; before the processor touches a partition after (re)assignment, this layer reads
the rewards partition from the watermark to its end and marks them. Rewards go to the same partition number
as their inputs, and only the owner of that partition writes it, so that tail holds every unmarked reward.
Input offsets are committed only after the producer flushed (Faust's at_least_once), so nothing is lost.

The Kafka engine (``streams.reward.kafka_engine``) needs none of this: a reward and its marker commit together.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from schemas.codec import DecodeError, decode
from schemas.events import RewardEvent
from streams.reward.decided import DecidedReward
from streams.reward.join import PENDING_PREFIX, JoinState, Row, emitted, emitted_from_reward, row_bytes
from streams.reward.processor import InputEnds

log = logging.getLogger("rewardstream.rewards")


class BytesTable(Protocol):
    """The Faust table under this layer: its rows are bytes (a state is serialised before it is put)."""

    def get(self, key: str) -> bytes | None: ...
    async def put(self, partition: int, key: str, value: bytes) -> None: ...
    async def delete(self, partition: int, key: str) -> None: ...
    def items(self) -> Iterable[tuple[str, bytes]]: ...


class AckedOutputs(Protocol):
    """Outputs whose reward send returns once the broker acknowledged it (the Faust topics)."""

    async def send_reward(self, partition: int, key: bytes, value: bytes) -> int:
        """Produce and wait for the acknowledgement; return the reward's offset."""
        ...

    async def read_rewards(self, partition: int, start: int) -> tuple[list[tuple[int, bytes]], int]:
        """(offset, value) of every reward in ``partition`` from ``start`` to the end, and the end offset."""
        ...

    async def send_dlq(self, key: bytes | None, value: bytes) -> None: ...
    async def send_log(self, key: bytes, value: bytes) -> None: ...
    async def caught_up(self, partitions: set[int], processed: Mapping[tuple[str, int], int]) -> InputEnds: ...


def watermark_key(partition: int) -> str:
    """Table key of a partition's watermark; '#' never occurs in a generation id, so keys cannot collide."""
    return f"#watermark/{partition}"


class EmitThenMark:
    """The processor's StateStore and Outputs over the Faust table and topics (both: markers live in the table)."""

    def __init__(
        self,
        table: BytesTable,
        outputs: AckedOutputs,
        *,
        clock: Callable[[], float] = time.time,
        watermark_every: int = 200,
    ) -> None:
        self._table = table
        self._outputs = outputs
        self._clock = clock
        #: Rewards between two stored watermarks of a partition (at most this many are re-read after a crash).
        self.watermark_every = watermark_every
        self._scanned: set[int] = set()
        self._watermarks: dict[int, int] = {}
        #: Rewards found on the rewards topic without their marker (and marked since).
        self.recovered = 0
        #: What a tail scan awaits right now, for stall reports; None when no scan runs.
        self.doing: str | None = None
        #: Called with each reward once the broker acknowledged it: the integrity metrics.
        self.on_reward: Callable[[DecidedReward], None] = lambda _reward: None

    def forget_partitions(self) -> None:
        """After a rebalance: re-read each partition's rewards tail before using it again."""
        self._scanned.clear()

    def get(self, key: str) -> bytes | None:
        return self._table.get(key)

    async def put(self, partition: int, key: str, value: Row) -> None:
        await self._table.put(partition, key, row_bytes(value))  # a Faust table holds bytes

    async def delete(self, partition: int, key: str) -> None:
        await self._table.delete(partition, key)

    def items(self) -> Iterable[tuple[str, bytes]]:
        """Generation states only: the watermarks are this layer's bookkeeping."""
        return ((key, value) for key, value in self._table.items() if not key.startswith("#"))

    async def send_reward(self, state: JoinState, reward: DecidedReward) -> None:
        self.doing = f"waiting for the ack of the reward for {state.generation_id}"
        try:
            offset = await self._outputs.send_reward(state.partition, reward.key(), reward.encode())
        finally:
            self.doing = None
        self.on_reward(reward)
        await self._table.put(state.partition, state.generation_id, emitted(state, reward.event_id, offset).dumps())
        await self._advance_watermark(state.partition, offset + 1)

    async def send_dlq(self, key: bytes | None, value: bytes) -> None:
        await self._outputs.send_dlq(key, value)

    async def send_log(self, key: bytes, value: bytes) -> None:
        await self._outputs.send_log(key, value)

    async def caught_up(self, partitions: set[int], processed: Mapping[tuple[str, int], int]) -> InputEnds:
        return await self._outputs.caught_up(partitions, processed)

    async def mark_sent(self, partition: int) -> None:
        """Mark rewards produced after the partition's watermark (a crash may have lost their markers)."""
        if partition in self._scanned:
            return
        raw = self._table.get(watermark_key(partition))
        start = int(raw) if raw else 0
        self.doing = f"reading rewards partition {partition} from {start}"
        found, end = await self._outputs.read_rewards(partition, start)
        self.doing = None
        now = self._clock()
        for offset, value in found:
            try:
                reward = decode(value, RewardEvent)
            except DecodeError as exc:
                log.error("unreadable reward at partition %d offset %d: %s", partition, offset, exc)
                continue
            old = self._table.get(reward.generation_id)
            if old is not None and not old.startswith(PENDING_PREFIX):
                continue
            await self._table.put(
                partition, reward.generation_id, emitted_from_reward(reward, partition, offset, now).dumps()
            )
            self.recovered += 1
            log.info("reward for %s found on the rewards topic, marked emitted", reward.generation_id)
        if end > start:
            await self._table.put(partition, watermark_key(partition), str(end).encode())
        self._watermarks[partition] = max(start, end)
        self._scanned.add(partition)

    async def _advance_watermark(self, partition: int, end: int) -> None:
        """Store "every reward below ``end`` is marked" now and then: it only bounds the tail scan after a
        crash, so writing it per reward would double the changelog for nothing."""
        if end - self._watermarks.get(partition, 0) >= self.watermark_every:
            await self._table.put(partition, watermark_key(partition), str(end).encode())
            self._watermarks[partition] = end
