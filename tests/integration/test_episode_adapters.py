"""The asyncio episode client and the gym / verl adapters against the real pipeline (Kafka, S3, the process
sandbox, the episode worker as a process): ~50 episodes from one event loop get exactly one reward each; a
SWE fix through the gym env earns 1.0 and a give-up 0.0; a fix through the verl tool earns 1.0; both
examples run and print their reward.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from bus.partition_reader import read_to_end
from schemas.codec import decode
from schemas.events import RewardEvent
from schemas.topics import catalog_for, topic_for
from streams.sdk import AsyncTrainerClient, TrainerClient, TrainerConfig
from streams.sdk.episodes import EpisodeClient, EpisodeConfig
from streams.sdk.episodes_aio import AsyncEpisode, AsyncEpisodeClient
from streams.sdk.gym_env import EpisodeEnv
from streams.sdk.verl_tool import VerlEpisodeTool
from tests.integration.episode_env import Stack, episode_stack
from tests.integration.reward_env import REPO
from tests.sandbox.swe_task import OPS_FIXED, task
from workers.sandbox.api import Sandbox
from workers.tasks.swe import SPECS, fix_transcript, give_up_transcript, swe_tasks

pytestmark = [pytest.mark.integration, pytest.mark.sandbox, pytest.mark.slow]

CALC = "swe/calc-call"
EPISODES = 50


@pytest.fixture
def stack(
    kafka_config: dict[str, str], unique_name: str, tmp_path: Path, process_sandbox: Sandbox, s3_bucket: str
) -> Iterator[Stack]:
    tasks = [task("call", CALC), *swe_tasks()]
    with episode_stack(kafka_config, unique_name, tmp_path, process_sandbox, s3_bucket, tasks=tasks) as episodes:
        yield episodes


def _rewards_on_topic(stack: Stack, run_id: str) -> Counter[str]:
    """How many reward events of ``run_id`` the rewards topic holds, per generation id."""
    topic = topic_for("rewards", catalog_for(stack.settings)).name
    config = stack.settings.kafka_client_config()
    counts: Counter[str] = Counter()
    for partition in range(stack.settings.kafka.topic_partitions):
        records, _ = read_to_end(config, topic, partition, 0, group=f"t-{uuid.uuid4().hex[:8]}", timeout_s=60)
        for _offset, _key, value in records:
            reward = decode(value, RewardEvent) if value is not None else None
            if reward is not None and reward.run_id == run_id:
                counts[reward.generation_id] += 1
    return counts


@pytest.mark.timeout(900)
def test_one_event_loop_drives_fifty_episodes_and_each_gets_one_reward(stack: Stack) -> None:
    run = "aio-run"

    async def play(client: AsyncEpisodeClient, fix: bool) -> tuple[AsyncEpisode, RewardEvent]:
        episode = await client.open(CALC)
        assert episode.opened is not None
        assert episode.opened.status == "ok", episode.opened
        if fix:
            assert (await episode.write("calc/ops.py", OPS_FIXED)).status == "ok"
        seen = await episode.read("calc/ops.py")
        assert seen.status == "ok", seen
        return episode, await episode.submit(timeout_s=600)

    async def main() -> list[tuple[AsyncEpisode, RewardEvent]]:
        trainer = await AsyncTrainerClient.connect(TrainerConfig.from_settings(stack.settings, run, trainer_id="aio.t"))
        config = EpisodeConfig.from_settings(stack.settings, run, answer_timeout_s=400)
        async with trainer, await AsyncEpisodeClient.connect(config, trainer) as client:
            return await asyncio.gather(*(play(client, i % 2 == 0) for i in range(EPISODES)))

    played = asyncio.run(main())
    assert len({episode.episode_id for episode, _ in played}) == EPISODES
    for i, (episode, reward) in enumerate(played):
        assert reward.generation_id == episode.episode_id, reward
        assert (reward.reward, reward.run_id) == ((1.0 if i % 2 == 0 else 0.0), run), (reward, stack.worker_logs())
        assert episode.ended == "submitted"
    on_topic = _rewards_on_topic(stack, run)
    assert on_topic == Counter({episode.episode_id: 1 for episode, _ in played}), on_topic


def _replies(actions: list[dict[str, object]]) -> list[str]:
    """The actions as a model might write them: bare, fenced, in prose; one reply that is no action at all."""
    replies = ["Let me think about the bug first."]
    for i, action in enumerate(actions):
        text = orjson.dumps(action).decode()
        replies.append([text, f"```json\n{text}\n```", f"Now I run {text} and look."][i % 3])
    return replies


def _play_gym(env: EpisodeEnv, replies: list[str]) -> tuple[float, list[str]]:
    obs, info = env.reset()
    assert "Reply with exactly one JSON action object" in obs
    texts, reward, done = [obs], 0.0, False
    for reply in replies:
        assert not done, "the episode ended before the transcript did"
        obs, reward, done, info = env.step(reply)
        texts.append(obs)
        if not done:
            assert reward == 0.0, (reply, obs)
    assert done, texts
    assert "reward_event" in info
    return reward, texts


@pytest.mark.timeout(900)
def test_the_gym_env_and_the_verl_tool_play_swe_tasks_for_the_pipelines_reward(stack: Stack, tmp_path: Path) -> None:
    fix_spec, give_up_spec, verl_spec = SPECS[0], SPECS[2], SPECS[1]
    run = "adapters-run"
    trainer_config = TrainerConfig.from_settings(stack.settings, run, trainer_id="adapters.t")
    config = EpisodeConfig.from_settings(stack.settings, run, answer_timeout_s=300)
    with TrainerClient(trainer_config) as trainer, EpisodeClient(config, trainer) as client:
        env = EpisodeEnv(client, fix_spec.task_id, prompt=fix_spec.prompt, reward_timeout_s=400)
        reward, texts = _play_gym(env, _replies(fix_transcript(fix_spec)))
        assert reward == 1.0, (texts, stack.worker_logs())
        assert texts[1].startswith("invalid action: no JSON object"), texts[1]  # answered, no turn used
        assert texts[3].startswith("turn 2 read: ok"), texts[3]
        assert fix_spec.buggy in texts[3], texts[3]
        env.close()

        env = EpisodeEnv(client, give_up_spec.task_id, reward_timeout_s=400)
        reward, texts = _play_gym(env, _replies(give_up_transcript(give_up_spec)))
        assert reward == 0.0, texts
        env.close()

    async def verl() -> tuple[float, list[float], float]:
        trainer = await AsyncTrainerClient.connect(TrainerConfig.from_settings(stack.settings, run, trainer_id="v.t"))
        async with trainer, await AsyncEpisodeClient.connect(config, trainer) as aio:
            tool = VerlEpisodeTool({"run_id": run, "reward_timeout_s": 400}, client=aio)
            instance_id, opened = await tool.create("traj-0", create_kwargs={"task_id": verl_spec.task_id})
            assert instance_id == "traj-0"
            assert opened.text.startswith("turn 0 open: ok"), opened.text
            bad, bad_reward, _ = await tool.execute(instance_id, {"action": "write", "path": "x.py"})
            assert bad.text.startswith("invalid action: "), bad.text
            assert bad_reward == 0.0
            steps = []
            for arguments in fix_transcript(verl_spec):
                _response, step_reward, _metrics = await tool.execute(instance_id, arguments)
                steps.append(step_reward)
            final = await tool.calc_reward(instance_id)
            await tool.release(instance_id)
            return final, steps, await tool.calc_reward(instance_id)

    final, steps, after_release = asyncio.run(verl())
    assert (final, steps[-1], after_release) == (1.0, 1.0, 0.0), (steps, stack.worker_logs())
    assert set(steps[:-1]) == {0.0}, steps

    # the examples, as a user runs them against this pipeline
    for script, task_id, expected in [
        ("gym_episode_env.py", "swe/mean", "reward 1"),
        ("verl_episode_tool.py", "swe/vowels", "reward 1"),
    ]:
        done = subprocess.run(
            [sys.executable, str(REPO / "examples" / script), "--task", task_id], cwd=REPO, env=stack.env,
            capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
        assert done.returncode == 0, (script, done.stderr[-3000:], stack.worker_logs())
        assert done.stdout.strip().splitlines()[-1] == expected, (script, done.stdout)
