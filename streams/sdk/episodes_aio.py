"""The asyncio face of the episode client: thousands of episodes from one event loop, no thread per episode.

Why a wrapper and not a second Kafka client: actions must go out through the same idempotent producer and
observations come back through the same single consumer as in the sync client (same turn numbering, same
de-duplication). An action is published without blocking (``Episode.begin``: an enqueue, which waits only
while the producer's queue is full) and awaited with
``asyncio.wrap_future`` on the future the sync client's consumer resolves; only the blocking setup, a resume
(it reads the topic back) and close run in ``asyncio.to_thread``.

    async with await AsyncEpisodeClient.connect(config, trainer) as client:
        rewards = await asyncio.gather(*(play(await client.open(task_id)) for task_id in batch))
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from concurrent.futures import Future
from typing import Any

from schemas.episodes import AnyAction, ObservationEvent
from schemas.events import RewardEvent
from streams.sdk.aio import AsyncTrainerClient
from streams.sdk.claims import Claim
from streams.sdk.client import TrainerClient
from streams.sdk.episodes import (
    Episode,
    EpisodeClient,
    EpisodeConfig,
    exec_action,
    fork_action,
    new_episode_id,
    open_action,
    started,
    write_action,
)


class AsyncEpisodeClient:
    """``async with await AsyncEpisodeClient.connect(config, trainer) as client: ep = await client.open(t)``."""

    def __init__(self, client: EpisodeClient) -> None:
        self.sync = client

    @classmethod
    async def connect(
        cls, config: EpisodeConfig, trainer: TrainerClient | AsyncTrainerClient | None = None, **kwargs: Any
    ) -> AsyncEpisodeClient:
        """Start the client (its blocking setup in a thread); ``trainer`` brings the submits' rewards."""
        sync_trainer = trainer.sync if isinstance(trainer, AsyncTrainerClient) else trainer
        return cls(await asyncio.to_thread(EpisodeClient, config, sync_trainer, **kwargs))

    async def open(
        self, task_id: str, *, episode_id: str | None = None, timeout_s: float | None = None
    ) -> AsyncEpisode:
        """A new episode of ``task_id`` (a fresh id unless given), once the worker answered its open."""
        episode = AsyncEpisode(self, Episode(self.sync, episode_id or new_episode_id(), 0))
        body = open_action(task_id, self.sync.config.run_id, self.sync.config.policy_version)
        episode.sync.opened = started(await episode.act(body, timeout_s=timeout_s), f"open task {task_id!r}")
        return episode

    async def fork(
        self, from_episode: str, turn: int, *, episode_id: str | None = None, timeout_s: float | None = None
    ) -> AsyncEpisode:
        """A new episode of this client's run from ``from_episode``'s workspace after ``turn`` (see
        ``EpisodeClient.fork``)."""
        child = AsyncEpisode(self, Episode(self.sync, episode_id or new_episode_id(), 0))
        body = fork_action(from_episode, turn, self.sync.config.run_id, self.sync.config.policy_version)
        what = f"fork episode {from_episode!r} at turn {turn}"
        child.sync.opened = started(await child.act(body, timeout_s=timeout_s), what)
        return child

    async def resume(self, episode_id: str, *, timeout_s: float = 60.0) -> AsyncEpisode:
        """The episode as its observations say (see ``EpisodeClient.resume``); the topic is read in a thread."""
        return AsyncEpisode(self, await asyncio.to_thread(self.sync.resume, episode_id, timeout_s=timeout_s))

    async def answer(
        self, key: tuple[str, int], future: Future[ObservationEvent], timeout_s: float | None
    ) -> ObservationEvent:
        """The observation ``future`` stands for; EpisodeError naming the episode and turn if it does not come."""
        wait_s = self.sync.wait_s(timeout_s)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), wait_s)
        except TimeoutError:
            raise self.sync.no_answer(key, wait_s) from None
        finally:
            self.sync.forget(key, future)

    async def close(self, flush_timeout_s: float = 30.0) -> None:
        """Send what is queued and stop reading (in a thread: it flushes and joins)."""
        await asyncio.to_thread(self.sync.close, flush_timeout_s)

    async def __aenter__(self) -> AsyncEpisodeClient:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()


class AsyncEpisode:
    """One episode, awaited: each call is one turn (exactly one observation back), in order."""

    def __init__(self, client: AsyncEpisodeClient, episode: Episode) -> None:
        self.client = client
        self.sync = episode

    @property
    def episode_id(self) -> str:
        return self.sync.episode_id

    @property
    def turn(self) -> int:
        """The last answered turn."""
        return self.sync.turn

    @property
    def opened(self) -> ObservationEvent | None:
        """The answer to the open or fork."""
        return self.sync.opened

    @property
    def ended(self) -> str | None:
        """Why the episode ended, once it has."""
        return self.sync.ended

    async def act(self, action: Mapping[str, Any] | AnyAction, *, timeout_s: float | None = None) -> ObservationEvent:
        """Send ``action`` (the contract's JSON object, or a model) as the next turn; await its observation. A
        write too large for one message has its bytes uploaded in a thread (``Episode.prepare``)."""
        out = self.sync.prepare(action)
        if isinstance(out, Claim):
            out = await asyncio.to_thread(self.sync.client.claimed, out)
        key, future = self.sync.publish(out)
        return self.sync.settle(await self.client.answer(key, future, timeout_s))

    async def exec(self, command: str | list[str], timeout_s: float | None = None) -> ObservationEvent:
        """Run ``command`` in the workspace (a string under /bin/sh -c, a list as argv)."""
        return await self.act(exec_action(command, timeout_s))

    async def write(self, path: str, text: str | None = None, *, base64: str | None = None) -> ObservationEvent:
        """Write one file (text, or base64 for bytes)."""
        return await self.act(write_action(path, text, base64))

    async def read(self, path: str) -> ObservationEvent:
        """Read one file; its text is the observation's ``content``."""
        return await self.act({"action": "read", "path": path})

    async def fork(self, turn: int, *, episode_id: str | None = None) -> AsyncEpisode:
        """A new episode from this one's workspace after ``turn`` (a committed turn of it), of the client's run."""
        return await self.client.fork(self.episode_id, turn, episode_id=episode_id)

    async def submit(self, timeout_s: float = 600.0) -> RewardEvent:
        """End the episode and await its one reward (needs the client's trainer)."""
        reward = asyncio.wrap_future(self.sync.reward_future())  # registered before the reward can arrive
        self.sync.check_submitted(await self.act({"action": "submit"}))
        try:
            return await asyncio.wait_for(reward, timeout_s)
        except TimeoutError:
            raise self.sync.no_reward(timeout_s) from None
