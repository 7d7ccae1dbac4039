"""The trainer SDK: publish generations, get exactly one reward back per generation (sync or asyncio).

    config = TrainerConfig.from_settings(Settings(), run_id="grpo-7", auto_commit=False)
    with TrainerClient(config) as client:
        futures = client.publish_many(client.generation(task_id, code) for task_id, code in batch)
        client.flush()
        rewards = [f.result(timeout=300).reward for f in futures]
        client.checkpoint()  # with the model checkpoint: a restart resumes exactly here

``rewards()`` iterates rewards not claimed by a future (e.g. after a restart), training data only: a reward
that is not valid for training (``valid`` false: a canary's, or one the infrastructure decided) waits in
``held_out()`` instead, and a future resolves with it marked (``streams.sdk.validity``). ``wait(ids, timeout_s)``
raises ``RewardTimeoutError`` naming what is missing. Adapters for TRL and verl: ``streams.sdk.adapters``.

Agent episodes (``streams.sdk.episodes``): each call is one turn, one observation back; submit gets the reward::

    with TrainerClient(config) as trainer, EpisodeClient(EpisodeConfig.from_settings(s, "grpo-7"), trainer) as c:
        episode = c.open("swe/calc-add")
        episode.exec("python -m pytest -q tests")
        episode.write("calc/ops.py", fixed)
        reward = episode.submit()  # a restarted trainer: c.resume(episode_id) goes on from the last turn

``AsyncEpisodeClient`` (``streams.sdk.episodes_aio``) is the same, awaited, for many episodes on one event loop.
Agent-framework faces: ``streams.sdk.gym_env`` (gym-style reset/step/close), ``streams.sdk.verl_tool`` and
``streams.sdk.mini_swe_env`` (a mini-swe-agent environment).
"""

from __future__ import annotations

from streams.sdk.aio import AsyncTrainerClient
from streams.sdk.canaries import CanaryMix
from streams.sdk.client import RewardFuture, TrainerClient
from streams.sdk.config import RewardTimeoutError, SdkError, TrainerConfig
from streams.sdk.episodes import Episode, EpisodeClient, EpisodeConfig, EpisodeError
from streams.sdk.episodes_aio import AsyncEpisode, AsyncEpisodeClient

__all__ = [
    "AsyncEpisode",
    "AsyncEpisodeClient",
    "AsyncTrainerClient",
    "CanaryMix",
    "Episode",
    "EpisodeClient",
    "EpisodeConfig",
    "EpisodeError",
    "RewardFuture",
    "RewardTimeoutError",
    "SdkError",
    "TrainerClient",
    "TrainerConfig",
]
