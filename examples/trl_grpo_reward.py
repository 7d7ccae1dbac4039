"""rewardstream as a TRL GRPO reward function.

Run (with the pipeline up: see examples/README.md)::

    python examples/trl_grpo_reward.py --run-id demo-trl

It calls the reward function exactly as ``trl.GRPOTrainer`` does (``prompts``, ``completions`` and every
dataset column as keyword arguments) on HumanEval prompts with a correct and a wrong completion each, and
prints one reward per completion. In a real run you pass the same object to the trainer::

    from trl import GRPOConfig, GRPOTrainer
    trainer = GRPOTrainer(model=..., reward_funcs=[reward_fn], args=GRPOConfig(...),
                          train_dataset=dataset)  # dataset has "prompt" and "task_id" columns
"""

from __future__ import annotations

import argparse

from schemas.settings import Settings
from streams.sdk import TrainerClient, TrainerConfig
from streams.sdk.adapters import TrlRewardFunction
from workers.tasks.humaneval import load_problems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-id", default="example-trl")
    parser.add_argument("--tasks", type=int, default=2, help="how many HumanEval problems (from the first)")
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args()

    problems = load_problems()[: args.tasks]
    config = TrainerConfig.from_settings(Settings(), args.run_id)
    with TrainerClient(config) as client:
        reward_fn = TrlRewardFunction(client, timeout_s=args.timeout)
        # One GRPO group of two completions per prompt: the canonical body and a wrong one.
        prompts = [p.prompt for p in problems for _ in range(2)]
        completions = [c for p in problems for c in (p.canonical_solution, "    return None\n")]
        task_ids = [p.task_id for p in problems for _ in range(2)]
        rewards = reward_fn(prompts=prompts, completions=completions, task_id=task_ids)
    for task_id, completion, reward in zip(task_ids, completions, rewards, strict=True):
        kind = "wrong" if completion.strip() == "return None" else "canonical"
        print(f"{task_id:<14} {kind:<10} reward={reward}")
    print(f"rewards: {rewards}")


if __name__ == "__main__":
    main()
