"""The asyncio face of the trainer client, for trainers whose rollout loop is async.

Why a wrapper and not a second Kafka client: the batching producer and the single rewards consumer must be
the same machinery either way (same commits, same de-duplication); asyncio only changes how callers wait.
Publishing is a non-blocking enqueue; waiting uses ``asyncio.wrap_future`` on the per-generation futures.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from typing import Any

from schemas.events import GenerationEvent, RewardEvent
from streams.sdk.client import TrainerClient
from streams.sdk.config import RewardTimeoutError, TrainerConfig


class AsyncTrainerClient:
    """``async with AsyncTrainerClient.connect(config) as client: reward = await client.publish(event)``."""

    def __init__(self, client: TrainerClient) -> None:
        self.sync = client

    @classmethod
    async def connect(cls, config: TrainerConfig, **kwargs: Any) -> AsyncTrainerClient:
        """Start the client (blocking setup runs in a thread, not on the event loop)."""
        return cls(await asyncio.to_thread(TrainerClient, config, **kwargs))

    def generation(self, task_id: str, code: str, **fields: Any) -> GenerationEvent:
        """A GenerationEvent of this run (see ``TrainerClient.generation``)."""
        return self.sync.generation(task_id, code, **fields)

    def publish(self, event: GenerationEvent) -> asyncio.Future[RewardEvent]:
        """Queue a generation; await the returned future for its reward."""
        return asyncio.wrap_future(self.sync.publish(event))

    def send(self, event: GenerationEvent) -> None:
        """Queue a generation whose reward comes out of ``rewards()``."""
        self.sync.send(event)

    async def flush(self, timeout_s: float = 30.0) -> None:
        """Wait until the brokers acknowledged everything queued."""
        await asyncio.to_thread(self.sync.flush, timeout_s)

    async def wait(self, generation_ids: Iterable[str], timeout_s: float) -> dict[str, RewardEvent]:
        """The reward of each id within ``timeout_s`` in all; RewardTimeoutError names what is missing."""
        futures = {gid: asyncio.wrap_future(self.sync.future_for(gid)) for gid in generation_ids}
        if futures:
            _done, pending = await asyncio.wait(futures.values(), timeout=timeout_s)
            if pending:
                missing = [gid for gid, f in futures.items() if not f.done()]
                for future in pending:
                    future.cancel()
                raise RewardTimeoutError(missing, timeout_s)
        return {gid: f.result() for gid, f in futures.items()}

    async def rewards(self, timeout_s: float | None = None, limit: int | None = None) -> AsyncIterator[RewardEvent]:
        """Unclaimed rewards of this run, each once; ``timeout_s`` bounds the wait for the next one."""
        yielded = 0
        while limit is None or yielded < limit:
            yield await asyncio.to_thread(self._next_reward, timeout_s)
            yielded += 1

    def _next_reward(self, timeout_s: float | None) -> RewardEvent:
        return next(self.sync.rewards(timeout_s=timeout_s, limit=1))

    def held_out(self) -> list[RewardEvent]:
        """Invalid rewards no future claimed, each once (see ``TrainerClient.held_out``)."""
        return self.sync.held_out()

    async def checkpoint(self) -> dict[int, int]:
        """Commit what was handed out (see ``TrainerClient.checkpoint``)."""
        return await asyncio.to_thread(self.sync.checkpoint)

    async def close(self) -> None:
        """Flush, commit, stop."""
        await asyncio.to_thread(self.sync.close)

    async def __aenter__(self) -> AsyncTrainerClient:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()
