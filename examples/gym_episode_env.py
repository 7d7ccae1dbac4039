"""An agent episode as a gym-style text env (rLLM's ``reset``/``step``/``close``; SkyRL-gym through
``SkyRLEpisodeEnv``): each step takes the model's whole reply, the reward comes with the submit.

A scripted policy stands in for the model: it answers with the contract's JSON actions (bare, fenced, in
prose, and once with no action at all, which the env answers with an observation saying why) and plays the
shipped fix of one SWE task (``workers/tasks/swe.py``), or gives up with ``--give-up``.

Try it (with ``rewardstream up --pipeline`` running)::

    python examples/gym_episode_env.py --task swe/calc-add            # prints reward 1.0
    python examples/gym_episode_env.py --task swe/calc-add --give-up  # prints reward 0.0
"""

from __future__ import annotations

import argparse
import json

from schemas.settings import Settings
from streams.sdk import EpisodeClient, EpisodeConfig, TrainerClient, TrainerConfig
from streams.sdk.gym_env import EpisodeEnv
from workers.tasks.registry import TaskRegistry
from workers.tasks.swe import SPECS, fix_transcript, give_up_transcript, swe_tasks


def scripted_replies(task_id: str, give_up: bool) -> list[str]:
    """What a model might write: the transcript's actions in a few textual shapes, one reply without one."""
    spec = next(s for s in SPECS if task_id in (s.task_id, s.task_id + "-io"))
    actions = give_up_transcript(spec) if give_up else fix_transcript(spec)
    replies = ["I should look around before acting."]  # not an action: an observation says so
    for i, action in enumerate(actions):
        text = json.dumps(action)
        replies.append([text, f"Next:\n```json\n{text}\n```", f"I will do {text} now."][i % 3])
    return replies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="swe/calc-add")
    parser.add_argument("--run-id", default="example-gym")
    parser.add_argument("--give-up", action="store_true", help="submit the workspace unchanged (earns 0)")
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args()
    settings = Settings()
    TaskRegistry.from_settings(settings).store(swe_tasks())  # the shipped SWE tasks, in the pipeline's registry
    config = EpisodeConfig.from_settings(settings, args.run_id, answer_timeout_s=args.timeout)
    with (
        TrainerClient(TrainerConfig.from_settings(settings, args.run_id)) as trainer,
        EpisodeClient(config, trainer) as client,
    ):
        env = EpisodeEnv(client, args.task, prompt="Fix the bug.", reward_timeout_s=args.timeout)
        obs, info = env.reset()
        print(f"episode {info['episode_id']}")
        reward, done = 0.0, False
        for reply in scripted_replies(args.task, args.give_up):
            obs, reward, done, info = env.step(reply)
            print(f"> {reply.splitlines()[-1][:70]}\n  {obs.splitlines()[0]}")
            if done:
                break
        env.close()
    print(f"reward {reward:g}" if done else "episode did not end")


if __name__ == "__main__":
    main()
