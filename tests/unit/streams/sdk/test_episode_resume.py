"""Where an episode stands after a trainer restart, from its observations and the turns its actions were sent
at (pure: ``streams.sdk.episodes.standing``), and what ``resume`` reads to find out."""

from __future__ import annotations

from typing import Any

import pytest

from schemas.episodes import ObservationEvent
from streams.sdk.episodes import standing


def obs(turn: int, status: str = "ok", *, action: str | None = "exec", ended: Any = None) -> ObservationEvent:
    reason = "why" if status == "rejected" else ("idle" if action is None else None)
    return ObservationEvent.build(episode_id="e", turn=turn, action=action, status=status,  # type: ignore[arg-type]
                                  reason=reason, ended=ended)  # fmt: skip


def test_a_running_episode_stands_at_its_last_answered_turn() -> None:
    found = standing([obs(0, action="open"), obs(1), obs(2)], sent=[0, 1, 2])
    assert found is not None
    assert (found.turn, found.ended, found.pending) == (2, None, ())


def test_an_ended_episode_stays_ended_whatever_was_rejected_after_its_end() -> None:
    """A late action's 'has ended' rejection has a higher turn and no ``ended``: still ended."""
    seen = [obs(0, action="open"), obs(1), obs(2, action="submit", ended="submitted"),
            obs(3, "rejected", action="read")]  # fmt: skip
    found = standing(seen, sent=[0, 1, 2, 3])
    assert found is not None
    assert (found.turn, found.ended) == (2, "submitted")


def test_an_out_of_order_rejection_uses_no_turn() -> None:
    found = standing([obs(0, action="open"), obs(1), obs(7, "rejected")], sent=[0, 1, 7])
    assert found is not None
    assert (found.turn, found.pending) == (1, ())


def test_an_action_sent_before_the_restart_and_not_answered_is_pending() -> None:
    found = standing([obs(0, action="open"), obs(1)], sent=[0, 1, 2])
    assert found is not None
    assert (found.turn, found.pending) == (1, (2,))
    assert standing([], sent=[]) is None


def test_resume_reads_only_the_episodes_partition_of_each_topic(monkeypatch: pytest.MonkeyPatch) -> None:
    import threading
    from collections import OrderedDict
    from types import SimpleNamespace

    from bus.keys import partition_for
    from schemas.codec import encode
    from streams.sdk import episodes as sdk_episodes
    from streams.sdk.episodes import EpisodeClient

    reads: list[tuple[str, int]] = []
    answer = obs(0, action="open").model_copy(update={"episode_id": "ep-42"})

    def read_to_end(_config: Any, topic: str, partition: int, start: int, **_kw: Any) -> tuple[list[Any], int]:
        reads.append((topic, partition))
        records = [(0, b"ep-42", encode(answer))] if topic == "obs" else []
        return records, len(records)

    monkeypatch.setattr(sdk_episodes, "read_to_end", read_to_end)
    client = EpisodeClient.__new__(EpisodeClient)
    client.config = SimpleNamespace(kafka={}, observations_topic="obs", actions_topic="act")  # type: ignore[assignment]
    client._start = dict.fromkeys(range(6), 0)
    client._cond = threading.Condition()
    client._unclaimed = OrderedDict()
    client._futures = {}
    episode = client.resume("ep-42")
    assert (episode.turn, episode.ended) == (0, None)
    assert reads == [("obs", partition_for(b"ep-42", 6)), ("act", partition_for(b"ep-42", 6))]
