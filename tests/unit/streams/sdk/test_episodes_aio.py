"""The asyncio episode face waits on the sync client's futures: thousands of episodes on one event loop with
no thread per episode, and a missing answer is an EpisodeError naming the episode and turn."""

from __future__ import annotations

import asyncio
import queue
import threading
from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

import pytest

from schemas.episodes import ActionEvent, ObservationEvent
from schemas.status import SandboxStatus
from streams.sdk.episodes import Episode, EpisodeClient, EpisodeError
from streams.sdk.episodes_aio import AsyncEpisode, AsyncEpisodeClient


class _Answering:
    """The part of EpisodeClient the async face uses; one thread answers every action (or none, if mute)."""

    def __init__(self, *, mute: bool = False) -> None:
        self.config = SimpleNamespace(answer_timeout_s=30.0, run_id="r", policy_version="0")
        self.trainer = None
        self.forgotten = 0
        self.sent: list[ActionEvent] = []
        self._sent: queue.Queue[tuple[ActionEvent, Future[ObservationEvent]] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._answer, daemon=True)
        if not mute:
            self._thread.start()

    def send(self, event: ActionEvent) -> Future[ObservationEvent]:
        self.sent.append(event)
        future: Future[ObservationEvent] = Future()
        future.set_running_or_notify_cancel()
        self._sent.put((event, future))
        return future

    def wait_s(self, timeout_s: float | None) -> float:
        return EpisodeClient.wait_s(self, timeout_s)  # type: ignore[arg-type]

    no_answer = staticmethod(EpisodeClient.no_answer)

    def answer(
        self, future: Future[ObservationEvent], key: tuple[str, int], timeout_s: float | None
    ) -> ObservationEvent:
        return EpisodeClient.answer(self, future, key, timeout_s)  # type: ignore[arg-type]

    def fork(self, from_episode: str, turn: int, **kwargs: Any) -> Episode:
        return EpisodeClient.fork(self, from_episode, turn, **kwargs)  # type: ignore[arg-type]

    def forget(self, _key: tuple[str, int], _future: Future[ObservationEvent]) -> None:
        self.forgotten += 1

    def _answer(self) -> None:
        while (item := self._sent.get()) is not None:
            event, future = item
            kind = event.action.action
            content = "x = 1\n" if kind == "read" else None
            future.set_result(ObservationEvent.build(episode_id=event.episode_id, turn=event.turn, action=kind,
                                                     status=SandboxStatus.OK, content=content))  # fmt: skip

    def stop(self) -> None:
        self._sent.put(None)
        self._thread.join(timeout=10)


def test_two_thousand_episodes_on_one_loop_use_no_thread_each() -> None:
    fake = _Answering()
    client = AsyncEpisodeClient(fake)  # type: ignore[arg-type]
    peak = [threading.active_count()]

    async def play(i: int) -> AsyncEpisode:
        episode = await client.open("swe/calc-add")
        await episode.write("calc/ops.py", f"x = {i}\n")
        peak[0] = max(peak[0], threading.active_count())
        assert (await episode.read("calc/ops.py")).content == "x = 1\n"
        return episode

    async def main() -> list[AsyncEpisode]:
        return await asyncio.gather(*(play(i) for i in range(2000)))

    before = threading.active_count()
    try:
        episodes = asyncio.run(main())
    finally:
        fake.stop()
    assert [e.turn for e in episodes] == [2] * 2000
    assert len({e.episode_id for e in episodes}) == 2000
    assert peak[0] <= before + 1, (before, peak)  # the loop's default executor is never used
    assert fake.forgotten == 3 * 2000


def test_a_missing_answer_is_an_episode_error_naming_episode_and_turn() -> None:
    client = AsyncEpisodeClient(_Answering(mute=True))  # type: ignore[arg-type]
    with pytest.raises(EpisodeError, match=r"no observation for episode 'ep-x' turn 0 within 0.05s"):
        asyncio.run(client.open("swe/calc-add", episode_id="ep-x", timeout_s=0.05))


def test_a_fork_is_of_the_forking_clients_run_and_policy_sync_and_async() -> None:
    """Another run's trainer forking an episode gets the fork's reward: the fork names its own run."""
    fake = _Answering()
    fake.config.run_id, fake.config.policy_version = "run-b", "step-9"
    try:
        source = Episode(fake, "ep-a", 3)  # type: ignore[arg-type]
        child = source.fork(2, episode_id="ep-b")
        assert (child.episode_id, child.turn) == ("ep-b", 0)

        async def fork_async() -> None:
            client = AsyncEpisodeClient(fake)  # type: ignore[arg-type]
            await client.fork("ep-a", 1, episode_id="ep-c")

        asyncio.run(fork_async())
    finally:
        fake.stop()
    forks = [(e.episode_id, e.action.model_dump(mode="json")) for e in fake.sent]
    assert forks == [
        ("ep-b", {"action": "fork", "from_episode": "ep-a", "turn": 2, "run_id": "run-b", "policy_version": "step-9"}),
        ("ep-c", {"action": "fork", "from_episode": "ep-a", "turn": 1, "run_id": "run-b", "policy_version": "step-9"}),
    ]


def test_a_rejected_open_or_fork_is_an_episode_error_not_an_episode() -> None:
    class Refusing(_Answering):
        def _answer(self) -> None:
            while (item := self._sent.get()) is not None:
                event, future = item
                future.set_result(ObservationEvent.build(
                    episode_id=event.episode_id, turn=event.turn, action=event.action.action, status="rejected",
                    reason="unknown task 'no/such'" if event.action.action == "open" else "unknown episode 'x'",
                ))  # fmt: skip

    fake = Refusing()
    try:
        with pytest.raises(EpisodeError, match=r"cannot open task 'no/such': unknown task 'no/such'"):
            EpisodeClient.open(fake, "no/such")  # type: ignore[arg-type]
        with pytest.raises(EpisodeError, match=r"cannot fork episode 'x' at turn 2: unknown episode 'x'"):
            EpisodeClient.fork(fake, "x", 2)  # type: ignore[arg-type]
        client = AsyncEpisodeClient(fake)  # type: ignore[arg-type]
        with pytest.raises(EpisodeError, match=r"cannot open task 'no/such'"):
            asyncio.run(client.open("no/such"))
        with pytest.raises(EpisodeError, match=r"cannot fork episode 'x' at turn 2"):
            asyncio.run(client.fork("x", 2))
    finally:
        fake.stop()
