"""The episode worker on real Kafka, S3 and sandbox: many episodes, the issue's scale, kill -9 and forks."""

from __future__ import annotations

import signal
import time
from collections import Counter
from collections.abc import Callable

import pytest

from schemas.codec import decode
from schemas.episodes import ActionEvent, ObservationEvent
from schemas.events import LogRecord
from tests.integration.episode_worker_env import EpisodeEnv, action, appending_step, open_action

pytestmark = [pytest.mark.integration, pytest.mark.sandbox, pytest.mark.slow]


def in_order_once(found: list[ObservationEvent], last_turn: int) -> dict[int, ObservationEvent]:
    """The episode's observations, checked to be turns 0..last_turn, each once, in order."""
    turns = [o.turn for o in found]
    assert turns == list(range(last_turn + 1)), turns
    return {o.turn: o for o in found}


# ---- (a) many episodes, mixed steps ---------------------------------------------------------------------------

EPISODES = 20


def mixed_steps(episode: str) -> list[ActionEvent]:
    """Turns 1-5 of the mixed script: write, exec on it, read, exec again, argv exec counting what exists."""
    return [
        action(episode, 1, {"action": "write", "path": "notes/a.txt", "text": f"{episode}\n"}),
        action(episode, 2, {"action": "exec", "command": "echo 2 >> log.txt && cat notes/a.txt log.txt"}),
        action(episode, 3, {"action": "read", "path": "notes/a.txt"}),
        action(episode, 4, {"action": "exec", "command": "echo 4 >> log.txt; cat log.txt; exit 3"}),
        action(episode, 5, {"action": "exec", "command": ["python3", "-c", "import os; print(sorted(os.listdir()))"]}),
    ]


def check_mixed(episode: str, seen: dict[int, ObservationEvent]) -> None:
    assert (seen[0].action, seen[0].status) == ("open", "ok"), seen[0]
    assert seen[0].workspace_ref, seen[0]
    assert (seen[1].action, seen[1].status) == ("write", "ok"), seen[1]
    assert (seen[2].status, seen[2].exit_code, seen[2].stdout) == ("ok", 0, f"{episode}\n2\n"), seen[2]
    assert (seen[3].status, seen[3].content) == ("ok", f"{episode}\n"), seen[3]
    assert (seen[4].status, seen[4].exit_code, seen[4].stdout) == ("nonzero_exit", 3, "2\n4\n"), seen[4]
    assert seen[5].stdout == "['calc', 'log.txt', 'notes', 'tests']\n", seen[5]
    assert seen[2].workspace_ref != seen[1].workspace_ref != seen[0].workspace_ref
    assert seen[3].workspace_ref == seen[2].workspace_ref  # a read changes nothing


@pytest.mark.timeout(240)
def test_concurrent_episodes_every_observation_once_in_order_with_its_content(episodes: EpisodeEnv) -> None:
    names = [f"ep{i}" for i in range(EPISODES)]
    episodes.spawn("worker")
    started = time.monotonic()
    # Everything is published up front, episodes interleaved: the worker keeps each episode's turns in order.
    episodes.send([open_action(e) for e in names])
    for turn in range(5):
        episodes.send([mixed_steps(e)[turn] for e in names])
    episodes.wait_turns(dict.fromkeys(names, 5), 180)
    took = time.monotonic() - started
    episodes.stop(episodes.procs[0])
    episodes.wait(episodes.reader.at_end, 60, lambda: "the end of the topics")
    found = episodes.observations()
    assert set(found) == set(names)
    for e in names:
        check_mixed(e, in_order_once(found[e], 5))
    assert not episodes.generations()
    assert not episodes.dead_letters()
    records = [decode(m.value() or b"", LogRecord) for m in episodes.reader.messages[episodes.topics["logs"]]]
    steps = Counter((r.episode_id, r.fields["turn"]) for r in records if r.component == "episode")
    assert steps == {(e, t): 1 for e in names for t in range(6)}  # one log line per action, for SREs
    print(f"\n{EPISODES} episodes x 6 actions: {EPISODES * 6} observations in {took:.1f}s")


# ---- (a') the issue's scale: 200 episodes x 10 mixed steps, 8 forks of one from turn 3 ----------------------

SCALE_EPISODES = 200
SCALE_FORKS = 8


def scale_steps(episode: str) -> list[ActionEvent]:
    """Turns 1-10: writes, execs (shell and argv, one failing), reads; each output depends on every earlier
    step of this episode only, so a step lost, doubled, reordered or run on another's workspace shows."""
    return [
        action(episode, 1, {"action": "write", "path": "notes/a.txt", "text": f"{episode}\n"}),
        action(episode, 2, {"action": "exec", "command": "echo 2 >> log.txt && cat notes/a.txt log.txt"}),
        action(episode, 3, {"action": "read", "path": "notes/a.txt"}),
        action(episode, 4, {"action": "exec", "command": "echo 4 >> log.txt; cat log.txt; exit 3"}),
        action(episode, 5, {"action": "write", "path": "notes/b.txt", "text": f"{episode}-5\n"}),
        action(episode, 6, {"action": "exec", "command": ["python3", "-c", "import os; print(sorted(os.listdir()))"]}),
        action(episode, 7, {"action": "read", "path": "log.txt"}),
        action(episode, 8, {"action": "exec", "command": "echo 8 >> log.txt && cat notes/b.txt log.txt"}),
        action(episode, 9, {"action": "write", "path": "notes/a.txt", "text": f"{episode} again\n"}),
        action(episode, 10, {"action": "read", "path": "notes/a.txt"}),
    ]


def check_scale(episode: str, seen: dict[int, ObservationEvent]) -> None:
    expected: dict[int, tuple[str, int | None, str | None, str | None]] = {
        1: ("ok", None, None, None),
        2: ("ok", 0, f"{episode}\n2\n", None),
        3: ("ok", None, None, f"{episode}\n"),
        4: ("nonzero_exit", 3, "2\n4\n", None),
        5: ("ok", None, None, None),
        6: ("ok", 0, "['calc', 'log.txt', 'notes', 'tests']\n", None),
        7: ("ok", None, None, "2\n4\n"),
        8: ("ok", 0, f"{episode}-5\n2\n4\n8\n", None),
        9: ("ok", None, None, None),
        10: ("ok", None, None, f"{episode} again\n"),
    }
    for turn, (status, code, stdout, content) in expected.items():
        got = seen[turn]
        assert got.status == status, (episode, got)
        if code is not None:
            assert (got.exit_code, got.stdout) == (code, stdout), (episode, got)
        if content is not None:
            assert got.content == content, (episode, got)


@pytest.mark.timeout(900)
def test_200_episodes_of_10_mixed_steps_and_8_forks_each_once_in_order(episodes: EpisodeEnv) -> None:
    names = [f"s{i}" for i in range(SCALE_EPISODES)]
    forks = [f"sf{i}" for i in range(SCALE_FORKS)]
    source = names[0]
    episodes.spawn("worker")
    started = time.monotonic()
    episodes.send([open_action(e) for e in names])
    scripts = {e: scale_steps(e) for e in names}
    episodes.send([scripts[e][t] for t in range(3) for e in names])  # turns 1-3 of every episode, interleaved
    episodes.wait_turns({source: 3}, 300)
    # The forks start from the source's turn 3 while the other 199 episodes (and the source) go on.
    episodes.send([action(f, 0, {"action": "fork", "from_episode": source, "turn": 3}) for f in forks])
    episodes.send([scripts[e][t] for t in range(3, 10) for e in names])
    episodes.send([action(f, 1, {"action": "exec", "command": f"echo {f} >> log.txt && cat notes/a.txt log.txt"})
                   for f in forks])  # fmt: skip
    episodes.send([action(f, 2, {"action": "read", "path": "log.txt"}) for f in forks])
    episodes.wait_turns({**dict.fromkeys(names, 10), **dict.fromkeys(forks, 2)}, 780)
    took = time.monotonic() - started
    episodes.stop(episodes.procs[0])
    episodes.wait(episodes.reader.at_end, 60, lambda: "the end of the topics")
    found = episodes.observations()
    assert set(found) == {*names, *forks}
    for e in names:
        check_scale(e, in_order_once(found[e], 10))
    for f in forks:
        seen = in_order_once(found[f], 2)
        assert (seen[0].action, seen[0].status) == ("fork", "ok"), seen[0]
        assert seen[1].stdout == f"{source}\n2\n{f}\n", seen[1]  # the source's turn 3, then its own step only
        assert seen[2].content == f"2\n{f}\n", seen[2]
    assert not episodes.generations()
    assert not episodes.dead_letters()
    actions = len(names) * 11 + len(forks) * 3
    print(
        f"\n{SCALE_EPISODES} episodes x 11 actions + {SCALE_FORKS} forks x 3: {actions} observations in "
        f"{took:.1f}s ({actions / took:.1f}/s)"
    )


# ---- (b) kill -9 mid-run --------------------------------------------------------------------------------------

KILL_EPISODES = 8
KILL_TURNS = 8


@pytest.mark.timeout(400)
def test_kill_9_twice_mid_run_loses_and_repeats_no_step(episodes: EpisodeEnv) -> None:
    names = [f"k{i}" for i in range(KILL_EPISODES)]
    # After a death the crash guard runs the next buffer_limit messages of each partition alone (any of them
    # may have been the killer): a small buffer keeps that window, and this test, short.
    episodes.env["RS_WORKER_MAX_IN_FLIGHT"] = "8"
    worker = episodes.spawn("worker-0")
    episodes.send([open_action(e) for e in names])
    # The steps go out in three parts, the next one only after a kill: whatever the machine's speed, each kill
    # finds work not done (seen once: a loaded reader's first poll came after every step was already done).
    parts = [range(1, 4), range(4, 7), range(7, KILL_TURNS + 1)]
    for turn in parts[0]:
        episodes.send([appending_step(e, turn) for e in names])
    total = KILL_EPISODES * (KILL_TURNS + 1)

    def count() -> int:
        return sum(len(v) for v in episodes.observations().values())

    def at_least(floor: int) -> Callable[[], bool]:
        return lambda: count() >= floor

    kills: list[int] = []
    for n in range(2):  # the second kill lands once the restarted worker has committed something of its own
        floor = total // 5 if not kills else kills[-1] + 4
        episodes.wait(at_least(floor), 180, lambda: f"{count()} observations before a kill")
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=30)
        kills.append(count())
        assert kills[-1] < total, f"everything was done before kill {n + 1}"
        worker = episodes.spawn(f"worker-{n + 1}")
        for turn in parts[n + 1]:
            episodes.send([appending_step(e, turn) for e in names])
    episodes.wait_turns(dict.fromkeys(names, KILL_TURNS), 240)
    episodes.stop(worker)
    episodes.wait(episodes.reader.at_end, 60, lambda: "the end of the topics")
    found = episodes.observations()
    for e in names:
        seen = in_order_once(found[e], KILL_TURNS)  # exactly once each: nothing lost, nothing doubled
        for turn in range(1, KILL_TURNS + 1):
            expected = "".join(f"{n}\n" for n in range(1, turn + 1))
            assert (seen[turn].status, seen[turn].stdout) == ("ok", expected), (e, seen[turn])
    print(f"\nkill -9 after {kills} of {total} observations; the restarted workers finished them, none twice")


# ---- (c) forks ------------------------------------------------------------------------------------------------

FORKS = 4


@pytest.mark.timeout(240)
def test_forks_from_turn_n_evolve_independently(episodes: EpisodeEnv) -> None:
    episodes.spawn("worker")
    source = "src"
    episodes.send([open_action(source), *[appending_step(source, t) for t in (1, 2, 3)]])
    episodes.wait_turns({source: 3}, 120)
    forks = [f"fork{i}" for i in range(FORKS)]
    episodes.send([action(f, 0, {"action": "fork", "from_episode": source, "turn": 2}) for f in forks])
    episodes.send([action(f, 1, {"action": "exec", "command": f"echo {f} >> log.txt && cat log.txt"}) for f in forks])
    episodes.send([action(f, 2, {"action": "read", "path": "log.txt"}) for f in forks])
    episodes.send([appending_step(source, 4)])
    bad = [action("fork-late", 0, {"action": "fork", "from_episode": source, "turn": 9}),
           action("fork-none", 0, {"action": "fork", "from_episode": "no-such-episode", "turn": 0})]  # fmt: skip
    episodes.send(bad)
    episodes.wait_turns({**dict.fromkeys(forks, 2), source: 4, "fork-late": 0, "fork-none": 0}, 120)
    found = episodes.observations()
    for f in forks:
        seen = in_order_once(found[f], 2)
        assert (seen[0].action, seen[0].status) == ("fork", "ok"), seen[0]
        assert seen[1].stdout == f"1\n2\n{f}\n", seen[1]  # turn 2 of the source, then its own step only
        assert seen[2].content == f"1\n2\n{f}\n", seen[2]
    src = in_order_once(found[source], 4)
    assert src[4].stdout == "1\n2\n3\n4\n", src[4]  # the forks changed nothing of the source
    late, none = found["fork-late"][0], found["fork-none"][0]
    assert (late.status, none.status) == ("rejected", "rejected")
    assert "not a committed turn" in (late.reason or ""), late
    assert "unknown episode" in (none.reason or ""), none
