"""An episode's life in the worker: a bad action dead-lettered, submit, retention and the broker-clock timers."""

from __future__ import annotations

import hashlib
import io
import tarfile
import time
from collections import Counter
from typing import Any

import orjson
import pytest

from bus.partition_reader import read_to_end
from schemas.codec import encode
from schemas.settings import Settings
from tests.integration.episode_worker_env import (
    IDLE_TASK_ID,
    LATE_TASK_ID,
    SHORT_TASK_ID,
    TASK_ID,
    EpisodeEnv,
    action,
    appending_step,
    open_action,
)
from tests.integration.helpers import PARTITIONS
from tests.integration.workers_pipeline_env import publish
from workers.artifacts import parse_url
from workers.episodes.transcript import steps_of
from workers.roles.episode_worker import state_changelog

pytestmark = [pytest.mark.integration, pytest.mark.sandbox, pytest.mark.slow]


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
