"""Writes too large for one message, through the real pipeline (Kafka, S3, the process sandbox, the episode
worker as a process, the three roles and the reward processor): on ``rewardstream episode play``, the SDK sync
and asyncio, the gym env and the verl tool, a 70 MB write on a task whose workspace cap is 64 MB is a
``rejected`` observation and the episode goes on to its submit and its reward; a 5 MB write (five times the
message cap) travels by claim check, is applied and is there for a later ``exec`` and ``read``; a claim check
of a foreign, missing or mismatched object is rejected with the reason, and the episode goes on.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from schemas.codec import MAX_MESSAGE_BYTES
from schemas.content import content_key, content_url
from schemas.episodes import ObservationEvent
from schemas.tasks import Task
from streams.sdk import AsyncTrainerClient, TrainerClient, TrainerConfig
from streams.sdk.episodes import EpisodeClient, EpisodeConfig
from streams.sdk.episodes_aio import AsyncEpisodeClient
from streams.sdk.gym_env import EpisodeEnv
from streams.sdk.verl_tool import VerlEpisodeTool
from tests.integration.episode_env import Stack, episode_stack_in_own_bucket
from tests.sandbox.swe_task import OPS_FIXED, task
from workers.sandbox.api import Sandbox

pytestmark = [pytest.mark.integration, pytest.mark.sandbox, pytest.mark.slow]

TASK_ID = "swe/calc-64mb"
MIB = 1 << 20
#: 70 MB of text: over the task's 64 MiB workspace cap (the same bytes in every test: uploaded once).
HUGE = "0123456789abcdef\n" * (70 * MIB // 17)
#: 5 MiB: under the cap, five times the message cap.
BIG = "big line of text\n" * (5 * MIB // 17)
OVER_CAP = f"write of {len(HUGE)} bytes is over the workspace cap ({64 * MIB} bytes"
FIX = {"action": "write", "path": "calc/ops.py", "text": OPS_FIXED}


def big_task() -> Task:
    """The SWE calc task with a 64 MiB workspace cap (the issue's)."""
    body = task("call", TASK_ID).model_dump(mode="json", by_alias=True)
    return Task.model_validate({**body, "episode": {**body["episode"], "workspace_max_mb": 64}})


@pytest.fixture(scope="module")
def stack(
    kafka_config: dict[str, str], tmp_path_factory: pytest.TempPathFactory, process_sandbox: Sandbox, minio_client: Any
) -> Iterator[Stack]:
    """The whole pipeline of one machine under a prefix and bucket of its own; deleted afterwards."""
    with episode_stack_in_own_bucket(kafka_config, minio_client, "big-writes", tmp_path_factory, process_sandbox,
                                     tasks=[big_task()]) as episodes:  # fmt: skip
        yield episodes


def _configs(stack: Stack, run: str) -> tuple[TrainerConfig, EpisodeConfig]:
    trainer = TrainerConfig.from_settings(stack.settings, run, trainer_id=f"{run}.t")
    return trainer, EpisodeConfig.from_settings(stack.settings, run, answer_timeout_s=240)


def _rejected_over_cap(obs: ObservationEvent, turn: int) -> None:
    assert (obs.turn, obs.action, obs.status, obs.ended) == (turn, "write", "rejected", None), obs
    assert OVER_CAP in (obs.reason or ""), obs


def test_the_sdk_applies_a_5mb_write_rejects_a_70mb_one_and_bad_claims_and_the_episode_is_rewarded(
    stack: Stack, minio_client: Any
) -> None:
    bucket = stack.settings.s3.bucket
    trainer_config, config = _configs(stack, "big-sync")
    with TrainerClient(trainer_config) as trainer, EpisodeClient(config, trainer) as client:
        episode = client.open(TASK_ID)
        _rejected_over_cap(episode.write("huge.txt", HUGE), 1)
        written = episode.write("data/big.txt", BIG)
        assert (written.turn, written.status) == (2, "ok"), (written, stack.worker_logs())
        sha = hashlib.sha256(BIG.encode()).hexdigest()
        stored = minio_client.get_object(bucket, content_key(sha))  # the claim check's bytes, by content address
        assert hashlib.sha256(stored.read()).hexdigest() == sha
        stored.close()
        stored.release_conn()
        check = "import hashlib, os; print(hashlib.sha256(open('data/big.txt', 'rb').read()).hexdigest(), os.listdir())"
        counted = episode.exec(["python3", "-c", check])
        assert (counted.turn, counted.status) == (3, "ok"), counted
        assert counted.stdout.split()[0] == sha, counted  # the whole file, byte for byte
        assert "huge.txt" not in counted.stdout, counted  # the rejected write left nothing
        seen = episode.read("data/big.txt")
        assert (seen.turn, seen.status, seen.content_truncated) == (4, "ok", True), seen
        assert seen.content is not None
        assert BIG.startswith(seen.content), seen.content[:100]

        # claim checks the worker refuses: another bucket, nothing at our address, bytes not what the sha says
        data = b"x" * 100
        sha = hashlib.sha256(data).hexdigest()
        foreign = {"ref": f"s3://{bucket}x/{content_key(sha)}", "sha256": sha, "size": len(data)}
        missing = {"ref": content_url(bucket, sha), "sha256": sha, "size": len(data)}
        planted = b"y" * 100  # put at x's address behind the store's back
        minio_client.put_object(bucket, content_key(sha), io.BytesIO(planted), len(planted))
        for turn, claim, reason in [
            (5, foreign, "is not the content address of content.sha256"),
            (6, missing, "does not match its sha256"),
        ]:
            obs = episode.act({"action": "write", "path": "x.txt", "content": claim})
            assert (obs.turn, obs.status) == (turn, "rejected"), obs
            assert reason in (obs.reason or ""), obs
        minio_client.remove_object(bucket, content_key(sha))
        gone = episode.act({"action": "write", "path": "x.txt", "content": missing})
        assert (gone.turn, gone.status) == (7, "rejected"), gone
        assert "cannot be read" in (gone.reason or ""), gone

        assert episode.act(FIX).status == "ok"
        reward = episode.submit(timeout_s=300)
    assert (reward.generation_id, reward.reward) == (episode.episode_id, 1.0), (reward, stack.worker_logs())


def test_the_asyncio_client_sends_big_writes_from_one_event_loop(stack: Stack) -> None:
    trainer_config, config = _configs(stack, "big-aio")

    async def play() -> tuple[list[ObservationEvent], float]:
        trainer = await AsyncTrainerClient.connect(trainer_config)
        async with trainer, await AsyncEpisodeClient.connect(config, trainer) as client:
            episode = await client.open(TASK_ID)
            seen = [
                await episode.write("huge.txt", HUGE),
                await episode.write("data/big.bin", base64=base64.b64encode(BIG.encode()).decode()),
                await episode.exec("wc -c < data/big.bin"),
                await episode.write("calc/ops.py", OPS_FIXED),
            ]
            return seen, (await episode.submit(timeout_s=300)).reward

    (huge, big, counted, fixed), reward = asyncio.run(play())
    _rejected_over_cap(huge, 1)
    assert (big.turn, big.status) == (2, "ok"), big
    assert (counted.status, counted.stdout.strip()) == ("ok", str(len(BIG))), counted
    assert fixed.status == "ok", fixed
    assert reward == 1.0, stack.worker_logs()


def test_the_gym_env_and_the_verl_tool_answer_a_70mb_write_and_play_on_to_their_reward(stack: Stack) -> None:
    trainer_config, config = _configs(stack, "big-adapters")
    huge = orjson.dumps({"action": "write", "path": "huge.txt", "text": HUGE}).decode()
    with TrainerClient(trainer_config) as trainer, EpisodeClient(config, trainer) as client:
        env = EpisodeEnv(client, TASK_ID, reward_timeout_s=300)
        env.reset()
        text, reward, done, info = env.step(f"```json\n{huge}\n```")
        assert (reward, done, info["status"]) == (0.0, False, "rejected"), text[:500]
        assert text.startswith("turn 1 write: rejected\nreason: " + OVER_CAP), text[:500]
        assert env.step(orjson.dumps(FIX).decode())[2] is False
        text, reward, done, _info = env.step('{"action": "submit"}')
        assert (reward, done) == (1.0, True), (text, stack.worker_logs())

    async def verl() -> tuple[str, list[float], float]:
        trainer = await AsyncTrainerClient.connect(TrainerConfig.from_settings(stack.settings, "big-adapters",
                                                                               trainer_id="big-verl.t"))  # fmt: skip
        async with trainer, await AsyncEpisodeClient.connect(config, trainer) as aio:
            tool = VerlEpisodeTool({"run_id": "big-adapters", "reward_timeout_s": 300}, client=aio)
            instance, _opened = await tool.create("traj-big", create_kwargs={"task_id": TASK_ID})
            refused, refused_reward, _ = await tool.execute(instance, {"action": "write", "path": "h", "text": HUGE})
            steps = [refused_reward]
            for arguments in [FIX, {"action": "submit"}]:
                _response, step_reward, _metrics = await tool.execute(instance, arguments)
                steps.append(step_reward)
            return refused.text, steps, await tool.calc_reward(instance)

    refused_text, steps, final = asyncio.run(verl())
    assert refused_text.startswith("turn 1 write: rejected\nreason: " + OVER_CAP), refused_text[:500]
    assert (steps, final) == ([0.0, 0.0, 1.0], 1.0), (steps, stack.worker_logs())


def test_episode_play_answers_a_70mb_line_plays_a_5mb_one_and_prints_the_reward(stack: Stack, tmp_path: Path) -> None:
    transcript = tmp_path / "big.jsonl"
    lines = [
        {"action": "write", "path": "huge.txt", "text": HUGE},
        {"action": "write", "path": "data/big.txt", "text": BIG},
        {"action": "exec", "command": "wc -c < data/big.txt"},
        FIX,
        {"action": "submit"},
    ]
    transcript.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    done = subprocess.run(
        [sys.executable, "-m", "rewardstream", "episode", "play", "--task", TASK_ID, "--actions", str(transcript),
         "--json", "--timeout", "240", "--run-id", "big-play"],
        env=stack.env, capture_output=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, (done.stderr.decode(errors="replace")[-3000:], stack.worker_logs())
    out = [orjson.loads(line) for line in done.stdout.splitlines()]
    observations, reward = out[:-1], out[-1]
    assert [(o["turn"], o["status"]) for o in observations] == [
        (0, "ok"), (1, "rejected"), (2, "ok"), (3, "ok"), (4, "ok"), (5, "ok"),
    ], observations  # fmt: skip
    assert OVER_CAP in observations[1]["reason"], observations[1]
    assert observations[3]["stdout"].strip() == str(len(BIG)), observations[3]
    assert (reward["generation_id"], reward["reward"]) == (observations[0]["episode_id"], 1.0), reward
    assert len(BIG) > 5 * MAX_MESSAGE_BYTES
