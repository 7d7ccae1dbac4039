"""The episode worker (``rewardstream worker episode``) against the real Kafka, S3 and process sandbox.

Each test has its own topic prefix (the whole catalog, plus the worker's state changelog, deleted after),
bucket and registry of workspace tasks; the worker runs as a real process that the test starts, kills and
restarts. Actions are published the way a trainer does (keyed by episode, turns numbered); observations,
generations and dead letters are read read_committed, so only what a transaction committed is seen.
"""

from __future__ import annotations

import hashlib
import io
import os
import signal
import subprocess
import sys
import tarfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest

from bus.admin import delete_topics
from bus.partition_reader import read_to_end
from schemas.codec import decode, encode
from schemas.episodes import ActionEvent, ObservationEvent
from schemas.events import DeadLetter, GenerationEvent, LogRecord
from schemas.settings import Settings
from schemas.tasks import Task
from schemas.topics import catalog, topic_for
from tests.integration.helpers import PARTITIONS
from tests.integration.test_workers_pipeline import Reader, publish
from workers.artifacts import parse_url
from workers.episodes.transcript import steps_of
from workers.roles.episode_worker import clock_topic, state_changelog
from workers.tasks.registry import TaskRegistry

pytestmark = [pytest.mark.integration, pytest.mark.sandbox, pytest.mark.slow]

TASK_ID = "swe/calc-1"
SHORT_TASK_ID = "swe/calc-short"  # max_turns 3: the worker ends it by itself
IDLE_TASK_ID = "swe/calc-idle"  # idle_timeout_s 3: abandoned when its trainer goes quiet
LATE_TASK_ID = "swe/calc-late"  # episode_timeout_s 6: submitted as it is when its time is up


def workspace_task(task_id: str, max_turns: int, **episode: float) -> Task:
    limits = {"max_turns": max_turns, "step_timeout_s": 5, "episode_timeout_s": 600, "idle_timeout_s": 300,
              "workspace_max_mb": 4, "workspace_max_files": 200, **episode}  # fmt: skip
    return Task.model_validate({
        "schema": "rewardstream.task/v1", "task_id": task_id, "prompt": "Fix add.", "entry_point": "calc.ops:add",
        "workspace": {"files": {"calc/__init__.py": "", "calc/ops.py": "def add(a, b):\n    return a - b\n",
                                "tests/test_ops.py": "from calc.ops import add\n\ndef test_add():\n"
                                                     "    assert add(1, 2) == 3\n"}},
        "episode": limits,
        "protected": ["tests/**"],
        "public_tests": {"kind": "command", "command": "python -m pytest -q tests"},
        "hidden_tests": {"kind": "call", "cases": [{"id": "h0", "args": [1, 2], "expected": 3}]},
        "limits": {"timeout_s": 10, "memory_mb": 256},
    })  # fmt: skip


@pytest.fixture(scope="module")
def registry_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("episode-registry")
    TaskRegistry(root).store([
        workspace_task(TASK_ID, 30), workspace_task(SHORT_TASK_ID, 3),
        workspace_task(IDLE_TASK_ID, 30, idle_timeout_s=3), workspace_task(LATE_TASK_ID, 30, episode_timeout_s=6),
    ])  # fmt: skip
    return root


def action(episode: str, turn: int, body: dict[str, Any]) -> ActionEvent:
    return ActionEvent.model_validate({"episode_id": episode, "turn": turn, "action": body})


def open_action(episode: str, task_id: str = TASK_ID) -> ActionEvent:
    return action(episode, 0, {"action": "open", "task_id": task_id, "run_id": "run-7", "policy_version": "step-3"})


@dataclass
class EpisodeEnv:
    """One worker environment: its topics, a reader of what it committed, the worker processes started."""

    prefix: str
    kafka_config: dict[str, str]
    env: dict[str, str]
    logs_dir: Path
    topics: dict[str, str]
    reader: Reader
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def spawn(self, name: str) -> subprocess.Popen[bytes]:
        """``rewardstream worker episode`` as a process (the same instance id each time: a restart fences the
        killed one's transaction at once)."""
        with (self.logs_dir / f"{name}.log").open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "rewardstream", "worker", "episode", "--concurrency", "2"],
                env=self.env, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        self.procs.append(proc)
        return proc

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace")[-4000:] for p in sorted(self.logs_dir.glob("*.log")))

    def send(self, actions: list[ActionEvent]) -> None:
        publish(self.kafka_config, self.topics["actions"], [(a.key(), encode(a)) for a in actions])

    def observations(self) -> dict[str, list[ObservationEvent]]:
        found: dict[str, list[ObservationEvent]] = defaultdict(list)
        for msg in self.reader.messages[self.topics["observations"]]:
            obs = decode(msg.value() or b"", ObservationEvent)
            found[obs.episode_id].append(obs)
        return found

    def generations(self) -> list[GenerationEvent]:
        return [decode(m.value() or b"", GenerationEvent) for m in self.reader.messages[self.topics["generations"]]]

    def dead_letters(self) -> list[DeadLetter]:
        return [decode(m.value() or b"", DeadLetter) for m in self.reader.messages[self.topics["dlq"]]]

    def wait(self, done: Callable[[], bool], timeout_s: float, what: Callable[[], str]) -> None:
        self.reader.poll_until(done, timeout_s, lambda: f"{what()}\n{self.logs()}")

    def wait_turns(self, wanted: dict[str, int], timeout_s: float) -> None:
        """Until every episode has observations up to its wanted turn."""

        def behind() -> dict[str, int]:
            seen = self.observations()
            return {e: max((o.turn for o in seen.get(e, [])), default=-1) for e, t in wanted.items()
                    if max((o.turn for o in seen.get(e, [])), default=-1) < t}  # fmt: skip

        self.wait(lambda: not behind(), timeout_s, lambda: f"episodes behind: {behind()}")

    def stop(self, proc: subprocess.Popen[bytes]) -> None:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, self.logs()


@pytest.fixture
def episodes(
    prefix: str, kafka_config: dict[str, str], s3_bucket: str, registry_dir: Path, tmp_path: Path
) -> Iterator[EpisodeEnv]:
    specs = catalog(prefix, PARTITIONS, 1)
    topics = {r: topic_for(r, specs).name for r in ("actions", "observations", "generations", "dlq", "logs")}
    env = {
        **os.environ, "RS_TOPIC_PREFIX": prefix, "RS_TOPIC_PARTITIONS": str(PARTITIONS),
        "RS_TASKS_DIR": str(registry_dir), "RS_S3_BUCKET": s3_bucket, "RS_METRICS_PORT": "0",
        "RS_WORKER_TRANSACTION_TIMEOUT_MS": "10000", "RS_WORKER_DRAIN_TIMEOUT_S": "20",
        "RS_WORKER_COMMIT_INTERVAL_S": "0.1", "RS_WORKER_INSTANCE_ID": f"episode-{prefix}",
    }  # fmt: skip
    reader = Reader(kafka_config, [topics["observations"], topics["generations"], topics["dlq"], topics["logs"]])
    logs_dir = tmp_path / "logs"
    logs_dir.mkdir()
    box = EpisodeEnv(prefix, kafka_config, env, logs_dir, topics, reader)
    try:
        yield box
    finally:
        for proc in box.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
        reader.close()
        settings = Settings(topic_prefix=prefix, topic_partitions=PARTITIONS)
        delete_topics([state_changelog(settings).name, clock_topic(settings).name], kafka_config)


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


def appending_step(episode: str, turn: int) -> ActionEvent:
    """Each turn appends its number and prints the whole file: a step applied twice, or on anything but the
    last committed workspace, prints another file."""
    return action(episode, turn, {"action": "exec", "command": f"echo {turn} >> log.txt && cat log.txt"})


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


# ---- (d) an undecodable action -------------------------------------------------------------------------------


@pytest.mark.timeout(240)
def test_an_undecodable_action_is_dead_lettered_and_the_rest_goes_on(episodes: EpisodeEnv) -> None:
    episodes.spawn("worker")
    episodes.send([open_action("d1"), appending_step("d1", 1)])
    publish(episodes.kafka_config, episodes.topics["actions"], [
        (b"d1", b"{not json"),
        (b"d1", encode(open_action("x")).replace(b'"open"', b'"teleport"')),
    ])  # fmt: skip
    episodes.send([appending_step("d1", 2), action("d1", 9, {"action": "read", "path": "log.txt"}),
                   action("d1", 3, {"action": "write", "path": "../escape", "text": "x"}),
                   action("d1", 4, {"action": "read", "path": "log.txt"})])  # fmt: skip
    # decodable but invalid (raw, as any producer may send them): the agent's to learn from, never dead letters
    publish(episodes.kafka_config, episodes.topics["actions"], [(b"d1", orjson.dumps({
        "episode_id": "d1", "turn": turn, "action": body,
    })) for turn, body in [(5, {"action": "write", "path": "a.txt", "text": "x", "base64": "eA=="}),
                           (6, {"action": "exec", "command": "true", "timeout_s": 1e6}),
                           (7, {"action": "exec", "command": "true", "timeout_s": 0})]])  # fmt: skip
    episodes.send([action("d1", 8, {"action": "read", "path": "log.txt"})])
    episodes.wait(lambda: len(episodes.observations()["d1"]) >= 10, 120, lambda: f"{episodes.observations()['d1']}")
    episodes.wait(lambda: len(episodes.dead_letters()) >= 2, 60, lambda: f"{episodes.dead_letters()}")
    letters = episodes.dead_letters()
    assert len(letters) == 2, letters
    assert all(d.source_topic == episodes.topics["actions"] and d.component == "episode" for d in letters)
    assert any("teleport" in d.error or "action" in d.error for d in letters), letters
    seen = episodes.observations()["d1"]
    assert [(o.turn, o.status) for o in seen[:6]] == [(0, "ok"), (1, "ok"), (2, "ok"), (9, "rejected"),
                                                      (3, "rejected"), (4, "ok")]  # fmt: skip
    assert "out of order" in (seen[3].reason or "")
    assert seen[5].content == "1\n2\n"  # the rejected write changed nothing; turn 3 was used
    assert [(o.turn, o.status) for o in seen[6:]] == [(5, "rejected"), (6, "rejected"), (7, "rejected"), (8, "ok")]
    assert "both text and base64" in (seen[6].reason or ""), seen[6]
    assert "at most 86400 s" in (seen[7].reason or ""), seen[7]
    assert "more than 0" in (seen[8].reason or ""), seen[8]
    assert seen[9].content == "1\n2\n"


# ---- (e) submit, and the end at max_turns ----------------------------------------------------------------------


def stored_bytes(minio_client: Any, url: str) -> bytes:
    bucket, key = parse_url(url)
    response = minio_client.get_object(bucket, key)
    try:
        return bytes(response.read())
    finally:
        response.close()
        response.release_conn()


def snapshot_files(minio_client: Any, url: str) -> tuple[str, dict[str, bytes]]:
    data = stored_bytes(minio_client, url)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        files = {m.name: (tar.extractfile(m) or io.BytesIO()).read() for m in tar.getmembers() if m.isfile()}
    return hashlib.sha256(data).hexdigest(), files


@pytest.mark.timeout(240)
def test_submit_publishes_one_generation_naming_a_stored_snapshot(episodes: EpisodeEnv, minio_client: Any) -> None:
    episodes.spawn("worker")
    fix = "def add(a, b):\n    return a + b\n"
    episodes.send([
        open_action("s1"), action("s1", 1, {"action": "write", "path": "calc/ops.py", "text": fix}),
        action("s1", 2, {"action": "submit"}), action("s1", 3, {"action": "read", "path": "calc/ops.py"}),
        action("s1", 2, {"action": "submit"}),  # a redelivered submit: a duplicate, nothing again
        # max_turns 3: the third action is carried out, then the episode is submitted as it is
        open_action("m1", SHORT_TASK_ID), *[appending_step("m1", t) for t in (1, 2, 3)],
        action("m1", 4, {"action": "read", "path": "log.txt"}),
    ])  # fmt: skip
    episodes.wait_turns({"s1": 3, "m1": 4}, 120)
    episodes.wait(lambda: len(episodes.generations()) >= 2, 60, lambda: f"{episodes.generations()}")
    episodes.stop(episodes.procs[0])
    episodes.wait(episodes.reader.at_end, 60, lambda: "the end of the topics")
    generations = {g.generation_id: g for g in episodes.generations()}
    assert Counter(g.generation_id for g in episodes.generations()) == {"s1": 1, "m1": 1}
    s1 = generations["s1"]
    assert (s1.episode_id, s1.task_id, s1.run_id, s1.policy_version, s1.turn) == ("s1", TASK_ID, "run-7", "step-3", 2)
    assert s1.workspace_ref
    assert s1.workspace_sha256
    assert s1.code is None
    sha, files = snapshot_files(minio_client, s1.workspace_ref)
    assert sha == s1.workspace_sha256
    assert s1.transcript_ref is not None  # what the judge reads of how the episode got there
    steps, _omitted = steps_of(stored_bytes(minio_client, s1.transcript_ref))
    assert [s.line() for s in steps] == [f"turn 0 open {TASK_ID}: ok", "turn 1 write calc/ops.py (32 bytes): ok",
                                         "turn 2 submit: ok"]  # fmt: skip
    assert files["calc/ops.py"] == fix.encode()
    assert b"assert add(1, 2) == 3" in files["tests/test_ops.py"]
    obs_s1 = episodes.observations()["s1"]
    assert [(o.turn, o.status, o.ended) for o in obs_s1] == [(0, "ok", None), (1, "ok", None), (2, "ok", "submitted"),
                                                            (3, "rejected", None)]  # fmt: skip
    assert obs_s1[2].workspace_ref == s1.workspace_ref
    m1 = generations["m1"]
    assert (m1.turn, m1.task_id) == (3, SHORT_TASK_ID)
    obs_m1 = episodes.observations()["m1"]
    assert [(o.turn, o.ended) for o in obs_m1] == [(0, None), (1, None), (2, None), (3, "max_turns"), (4, None)]
    assert obs_m1[3].stdout == "1\n2\n3\n"
    assert obs_m1[4].status == "rejected"
    assert snapshot_files(minio_client, m1.workspace_ref or "")[1]["log.txt"] == b"1\n2\n3\n"


# ---- (e') retention: an ended episode is deleted from the table and its changelog ----------------------------


def changelog_rows(episodes: EpisodeEnv) -> list[tuple[str, bytes | None]]:
    """Every record of the worker's state changelog, tombstones included, in offset order per partition."""
    settings = Settings(topic_prefix=episodes.prefix, topic_partitions=PARTITIONS)
    rows: list[tuple[str, bytes | None]] = []
    for partition in range(PARTITIONS):
        records, _end = read_to_end(episodes.kafka_config, state_changelog(settings).name, partition, 0,
                                    group=f"{episodes.prefix}check", timeout_s=60)  # fmt: skip
        rows += [((key or b"").decode(), value) for _offset, key, value in records]
    return rows


@pytest.mark.timeout(240)
def test_an_ended_episode_is_deleted_after_its_retention_and_a_running_one_is_not(episodes: EpisodeEnv) -> None:
    episodes.env["RS_EPISODE_RETENTION_S"] = "2"
    episodes.spawn("worker")
    episodes.send([open_action("r1"), appending_step("r1", 1), action("r1", 2, {"action": "submit"}),
                   open_action("r2"), appending_step("r2", 1)])  # fmt: skip
    episodes.wait_turns({"r1": 2, "r2": 1}, 120)

    def tombstoned() -> bool:
        return ("r1", None) in changelog_rows(episodes)

    episodes.wait(tombstoned, 60, lambda: f"no tombstone of r1 on the changelog: {changelog_rows(episodes)}")
    # r1 is gone: a fork from it and a late action to it find no episode; r2, idle 2 s but running, goes on.
    episodes.send([action("r1-fork", 0, {"action": "fork", "from_episode": "r1", "turn": 1}),
                   action("r1", 3, {"action": "read", "path": "log.txt"}), appending_step("r2", 2)])  # fmt: skip
    episodes.wait_turns({"r1-fork": 0, "r1": 3, "r2": 2}, 60)
    found = episodes.observations()
    assert found["r1-fork"][0].status == "rejected"
    assert "unknown episode" in (found["r1-fork"][0].reason or ""), found["r1-fork"]
    assert (found["r1"][-1].turn, found["r1"][-1].status) == (3, "rejected"), found["r1"]
    assert (found["r2"][-1].status, found["r2"][-1].stdout) == ("ok", "1\n2\n"), found["r2"]
    assert ("r2", None) not in changelog_rows(episodes)


# ---- (f) the timers: idle and overdue episodes, on the broker's clock ------------------------------------------


@pytest.mark.timeout(240)
def test_an_idle_episode_is_abandoned_and_an_overdue_one_submitted_on_the_brokers_clock(episodes: EpisodeEnv) -> None:
    episodes.spawn("worker")
    episodes.send([
        open_action("i1", IDLE_TASK_ID), appending_step("i1", 1), open_action("t1", LATE_TASK_ID),
        appending_step("t1", 1), open_action("alive", TASK_ID),
        # a step longer than idle_timeout_s (3 s) uses none of the trainer's idle time
        open_action("w1", IDLE_TASK_ID), action("w1", 1, {"action": "exec", "command": "sleep 4", "timeout_s": 5}),
    ])  # fmt: skip
    started = time.monotonic()
    episodes.wait_turns({"i1": 2, "t1": 2, "w1": 2}, 120)  # no action is sent: only the timers can answer turn 2
    took = time.monotonic() - started
    episodes.send([appending_step("i1", 2)])  # the trainer comes back too late
    episodes.wait(lambda: len(episodes.observations()["i1"]) >= 4, 60, lambda: f"{episodes.observations()['i1']}")
    episodes.stop(episodes.procs[0])
    episodes.wait(episodes.reader.at_end, 60, lambda: "the end of the topics")
    found = episodes.observations()
    idle = found["i1"]
    assert [(o.turn, o.action, o.status, o.ended) for o in idle] == [
        (0, "open", "ok", None), (1, "exec", "ok", None), (2, None, "timeout", "abandoned"),
        (2, "exec", "rejected", None),
    ]  # fmt: skip
    assert "abandoned" in (idle[3].reason or "")
    late = found["t1"]
    assert [(o.turn, o.action, o.ended) for o in late] == [(0, "open", None), (1, "exec", None),
                                                          (2, None, "episode_timeout")]  # fmt: skip
    assert [o.turn for o in found["alive"]] == [0]  # its limits are far away: nothing ends it
    waited = found["w1"]
    assert [(o.turn, o.action, o.status, o.ended) for o in waited] == [
        (0, "open", "ok", None), (1, "exec", "ok", None), (2, None, "timeout", "abandoned"),
    ]  # fmt: skip
    idle_s = (waited[2].created_at - waited[1].created_at).total_seconds()
    assert idle_s >= 3 - 0.2, f"abandoned {idle_s:.1f}s after its 4 s step was answered (idle_timeout_s is 3)"
    generations = episodes.generations()
    assert [(g.generation_id, g.turn) for g in generations] == [("t1", 1)]  # abandoned: no generation, no reward
    assert generations[0].workspace_ref == late[2].workspace_ref
    assert 3 <= took < 60, took
