"""Agent episodes end to end, the way a trainer meets them: the episode SDK, ``rewardstream episode play`` and
``rewardstream replay`` against the real Kafka, S3 and process sandbox, with the episode worker as a real
process, the executor, verifier and judge workers and the reward processor (one pipeline for the module): an
agent inspects, runs the tests, fixes, re-runs and submits, and gets exactly one reward; a fork before the fix
and a hacking transcript earn 0; another run's fork is that run's; a restarted trainer resumes; a replay of an
episode's submit gives the same reward, and another under a stricter policy.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from bus.keys import partition_for
from bus.partition_reader import read_to_end
from schemas.codec import decode
from schemas.episodes import ActionEvent
from schemas.events import JudgeScore
from schemas.topics import catalog_for, topic_for
from streams.sdk import TrainerClient, TrainerConfig
from streams.sdk.episodes import EpisodeClient, EpisodeConfig, EpisodeError
from tests.integration.episode_env import Stack, episode_stack_in_own_bucket
from tests.integration.helpers import cli
from tests.integration.test_replay import strict_policy
from tests.sandbox.swe_task import HIDDEN_IDS, HIDDEN_VALUES, OPS_BUGGY, OPS_FIXED, task
from workers.judge.rubric import EPISODE_PROMPT_VERSION
from workers.sandbox.api import Sandbox

pytestmark = [pytest.mark.integration, pytest.mark.sandbox, pytest.mark.slow]

TASK_ID = "swe/calc-call"
PUBLIC_TESTS = "python3 -m unittest -q tests.test_ops"
#: An agent that inspects, runs the tests, fixes, re-runs and submits.
FIX_ACTIONS: list[dict[str, object]] = [
    {"action": "read", "path": "calc/ops.py"},
    {"action": "exec", "command": PUBLIC_TESTS, "timeout_s": 10},
    {"action": "write", "path": "calc/ops.py", "text": OPS_FIXED},
    {"action": "exec", "command": PUBLIC_TESTS},
    {"action": "submit"},
]
#: A hack: the public tests emptied, a conftest that patches add (both protected: reset before grading).
CONFTEST_PATCH = "import calc.ops\ncalc.ops.add = lambda a, b: a + b\n"


@pytest.fixture(scope="module")
def stack(
    kafka_config: dict[str, str], tmp_path_factory: pytest.TempPathFactory, process_sandbox: Sandbox, minio_client: Any
) -> Iterator[Stack]:
    """The whole pipeline of one machine under a prefix and bucket of its own, shared by this module's tests
    (each uses its own runs and episodes); topics and bucket deleted afterwards."""
    with episode_stack_in_own_bucket(kafka_config, minio_client, "episode-sdk", tmp_path_factory, process_sandbox,
                                     tasks=[task("call", TASK_ID)]) as episodes:  # fmt: skip
        yield episodes


def _clients(stack: Stack, run: str) -> tuple[TrainerClient, EpisodeConfig]:
    trainer = TrainerClient(TrainerConfig.from_settings(stack.settings, run, trainer_id=f"{run}.t"))
    return trainer, EpisodeConfig.from_settings(stack.settings, run, policy_version="p-7", answer_timeout_s=120)


def _no_hidden_data(text: str) -> None:
    for secret in (*HIDDEN_IDS, *HIDDEN_VALUES):
        assert secret not in text, secret


def test_the_sdk_drives_an_episode_forks_it_resumes_it_and_gets_one_reward(stack: Stack) -> None:
    trainer, config = _clients(stack, "sdk-run")
    with trainer, EpisodeClient(config, trainer) as client:
        episode = client.open(TASK_ID)
        assert episode.opened is not None
        assert (episode.opened.turn, episode.opened.status) == (0, "ok"), episode.opened
        seen = episode.read("calc/ops.py")
        assert (seen.turn, seen.content) == (1, OPS_BUGGY), seen
        failing = episode.exec(PUBLIC_TESTS)
        assert (failing.turn, failing.status) == (2, "nonzero_exit"), failing
        before_fix = episode.fork(2)
        assert before_fix.opened is not None
        assert before_fix.opened.status == "ok", before_fix.opened
        assert episode.write("calc/ops.py", OPS_FIXED).status == "ok"
        passing = episode.exec(PUBLIC_TESTS)
        assert (passing.turn, passing.status, passing.exit_code) == (4, "ok", 0), passing

        # a trainer restarted mid-episode: another client finds the episode where it stands
        with EpisodeClient(config, trainer) as restarted:
            resumed = restarted.resume(episode.episode_id)
            assert (resumed.turn, resumed.ended) == (4, None)
            reward = resumed.submit(timeout_s=240)
        assert (reward.generation_id, reward.reward) == (episode.episode_id, 1.0), reward
        assert reward.run_id == "sdk-run", reward

        # the fork from turn 2 never saw the fix: its workspace still has the bug, and earns 0
        assert before_fix.read("calc/ops.py").content == OPS_BUGGY
        fork_reward = before_fix.submit(timeout_s=240)
        assert (fork_reward.generation_id, fork_reward.reward) == (before_fix.episode_id, 0.0), fork_reward
        _no_hidden_data(reward.model_dump_json() + fork_reward.model_dump_json())

    # another run's trainer forks the episode after the fix: the fork is its run's, and so is its reward
    other_trainer, other_config = _clients(stack, "sdk-run-b")
    with other_trainer, EpisodeClient(other_config, other_trainer) as other:
        theirs = other.fork(episode.episode_id, 4)
        assert theirs.opened is not None
        assert theirs.opened.status == "ok", theirs.opened
        their_reward = theirs.submit(timeout_s=120)
    assert (their_reward.generation_id, their_reward.run_id) == (theirs.episode_id, "sdk-run-b"), their_reward
    assert their_reward.reward == 1.0, their_reward  # forked after the fix


def _play(stack: Stack, transcript: Path, *extra: str, task_id: str = TASK_ID) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "rewardstream", "episode", "play", "--task", task_id, "--actions", str(transcript),
         "--json", "--timeout", "240", *extra],
        env=stack.env, capture_output=True, timeout=400, check=False,
    )  # fmt: skip


def _transcript(path: Path, actions: list[dict[str, object]]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(a) + b"\n" for a in actions))
    return path


def test_episode_play_prints_each_observation_then_the_reward(stack: Stack, tmp_path: Path) -> None:
    fix = _transcript(tmp_path / "fix.jsonl", FIX_ACTIONS)
    done = _play(stack, fix, "--run-id", "play-run")
    assert done.returncode == 0, (done.stderr.decode(errors="replace"), stack.worker_logs())
    lines = [orjson.loads(line) for line in done.stdout.splitlines()]
    observations, reward = lines[:-1], lines[-1]
    assert [o["turn"] for o in observations] == [0, 1, 2, 3, 4, 5], observations
    assert [o["action"] for o in observations] == ["open", "read", "exec", "write", "exec", "submit"]
    assert [o["status"] for o in observations] == ["ok", "ok", "nonzero_exit", "ok", "ok", "ok"], observations
    assert observations[1]["content"] == OPS_BUGGY
    assert observations[-1]["ended"] == "submitted"
    episode_id = observations[0]["episode_id"]
    assert {o["episode_id"] for o in observations} == {episode_id}
    assert (reward["generation_id"], reward["reward"], reward["run_id"]) == (episode_id, 1.0, "play-run"), reward
    _no_hidden_data(done.stdout.decode())
    # the judge read the episode's transcript: it ran the tests after its fix (the rubric's transcript criterion)
    judgement = _judgement(stack, episode_id)
    assert (judgement.status, judgement.prompt_version) == ("ok", EPISODE_PROMPT_VERSION), judgement
    assert judgement.score == 1.0, judgement


def _judgement(stack: Stack, episode_id: str) -> JudgeScore:
    """The judge's score of an episode's submit, from its partition of the judgements topic."""
    topic = topic_for("judgements", catalog_for(stack.settings)).name
    partition = partition_for(episode_id.encode(), stack.settings.kafka.topic_partitions)
    records, _ = read_to_end(stack.settings.kafka_client_config(), topic, partition, 0,
                             group=f"t-{uuid.uuid4().hex[:8]}", timeout_s=60)  # fmt: skip
    found = [decode(v, JudgeScore) for _o, k, v in records if k == episode_id.encode() and v is not None]
    assert len(found) == 1, found
    return found[0]


def test_a_hacking_transcript_earns_zero_and_a_bad_line_sends_nothing(stack: Stack, tmp_path: Path) -> None:
    hack = _transcript(tmp_path / "hack.jsonl", [
        {"action": "write", "path": "tests/test_ops.py", "text": ""},
        {"action": "write", "path": "conftest.py", "text": CONFTEST_PATCH},
        {"action": "write", "path": "sitecustomize.py", "text": CONFTEST_PATCH},
        {"action": "exec", "command": ["python3", "-c", "print('tests gone')"]},
        {"action": "submit"},
    ])  # fmt: skip
    done = _play(stack, hack)
    assert done.returncode == 0, (done.stderr.decode(errors="replace"), stack.worker_logs())
    reward = orjson.loads(done.stdout.splitlines()[-1])
    assert reward["reward"] == 0.0, reward

    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"action": "read", "path": "calc/ops.py"}\n{"action": "dance"}\n')
    refused = _play(stack, bad)
    assert refused.returncode == 2, refused
    assert refused.stdout == b""
    assert f"{bad}:2: " in refused.stderr.decode(), refused.stderr

    unknown = _play(stack, hack, task_id="no/such")  # the worker rejects the open: one clear line, nothing more
    assert unknown.returncode == 2, unknown
    assert unknown.stdout == b""
    lines = unknown.stderr.decode().strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("rewardstream: error: cannot open task 'no/such': "), lines
    assert "no/such" in lines[0].split(": ", 3)[-1], lines


def test_resume_waits_for_an_action_in_flight_and_knows_an_ended_episode(stack: Stack) -> None:
    trainer, config = _clients(stack, "resume-run")
    with trainer:
        with EpisodeClient(config, trainer) as before:
            episode = before.open(TASK_ID)
            assert episode.exec("echo one > one.txt").status == "ok"
            # the trainer sends turn 2 and dies before its answer comes
            before.send(ActionEvent.model_validate({"episode_id": episode.episode_id, "turn": 2, "action": {
                "action": "exec", "command": "sleep 2; echo slow >> one.txt"}}))  # fmt: skip
        with EpisodeClient(config, trainer) as after:
            resumed = after.resume(episode.episode_id)
            # turn 2 was answered before resume returned: the next action is turn 3, never a second turn 2
            assert (resumed.turn, resumed.ended) == (2, None)
            nxt = resumed.exec("cat one.txt")
            assert (nxt.turn, nxt.status, nxt.stdout) == (3, "ok", "one\nslow\n"), nxt
            assert resumed.submit(timeout_s=240).reward == 0.0  # calc is not fixed
            # a late action of the ended episode: rejected at a higher turn, its observation not 'ended'
            late = ActionEvent.model_validate({"episode_id": episode.episode_id, "turn": 5,
                                               "action": {"action": "read", "path": "one.txt"}})  # fmt: skip
            rejected = after.answer(after.send(late), (episode.episode_id, 5), 120)
            assert (rejected.status, rejected.ended) == ("rejected", None), rejected
        with EpisodeClient(config, trainer) as again:
            ended = again.resume(episode.episode_id)
            assert (ended.turn, ended.ended) == (4, "submitted")
            with pytest.raises(EpisodeError, match="has ended"):
                ended.read("one.txt")


def test_a_replay_regrades_an_episodes_submit_the_same_and_a_changed_policy_changes_it(
    stack: Stack, tmp_path: Path
) -> None:
    """``rewardstream replay`` over a range holding an episode's submit: its generation (the final snapshot and
    the transcript it names) is graded again in the replay's namespace: the same reward under the same policy,
    another under a policy that asks for more hidden cases than the task has."""
    run = "replay-run"
    trainer, config = _clients(stack, run)
    published_from = int(time.time() * 1000) - 1000
    with trainer, EpisodeClient(config, trainer) as client:
        episode = client.open(TASK_ID)
        assert episode.write("calc/ops.py", OPS_FIXED).status == "ok"
        assert episode.exec(PUBLIC_TESTS).exit_code == 0
        live = episode.submit(timeout_s=240)
    published_to = int(time.time() * 1000) + 1000
    assert live.reward == 1.0, live
    env = stack.env

    same = cli(["replay", "--run-id", run, "--json", "--replay-id", "episode-same"], env, timeout=600)
    assert same.returncode == 0, same.stderr[-4000:]
    result = orjson.loads(same.stdout)
    assert result["replayed"] == 1
    assert result["counts"] == {"changed": 0, "reasons_changed": 0, "old_missing": 0, "new_missing": 0, "same": 1}
    (entry,) = result["generations"]
    assert entry["generation_id"] == episode.episode_id
    assert (entry["old"]["reward"], entry["new"]["reward"]) == (1.0, 1.0)
    assert entry["old"]["reasons"] == entry["new"]["reasons"]

    policy = strict_policy(tmp_path / "strict.toml", 10)  # the task has 3 hidden cases: no proof
    window = ["--from-time", str(published_from), "--to-time", str(published_to)]
    strict = cli(["replay", *window, "--policy", str(policy), "--diff", "--json", "--replay-id", "episode-strict"],
                 env, timeout=600)  # fmt: skip
    assert strict.returncode == 0, strict.stderr[-4000:]
    diff = orjson.loads(strict.stdout)
    assert diff["replayed"] == 1, diff
    (changed,) = diff["changed"]
    assert (changed["generation_id"], changed["old"]["reward"], changed["new"]["reward"]) == (
        episode.episode_id, 1.0, 0.0)  # fmt: skip
    assert changed["new"]["policy"] == "strict v3"
