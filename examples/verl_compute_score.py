"""rewardstream as a verl custom reward function.

verl loads a plain function by file path and name::

    custom_reward_function.path=examples/verl_compute_score.py custom_reward_function.name=compute_score

and calls ``compute_score(data_source, solution_str, ground_truth, extra_info)`` per sample; put the task id
in the dataset's ``reward_model.ground_truth`` (or ``extra_info["task_id"]``): the real tests stay hidden in
the pipeline. With verl's batch reward manager use ``compute_score_batch`` (one publish, one wait).

Try it (with the pipeline up: see examples/README.md)::

    python examples/verl_compute_score.py --run-id demo-verl
"""

from __future__ import annotations

import argparse
import functools
import os
from collections.abc import Mapping, Sequence
from typing import Any

from schemas.settings import Settings
from streams.sdk import TrainerClient, TrainerConfig
from streams.sdk.adapters import VerlComputeScore, make_compute_score


@functools.cache
def _scorer() -> VerlComputeScore:
    """One client per reward worker process, created on first use (verl imports this file by path)."""
    run_id = os.environ.get("RS_RUN_ID", "verl")
    return make_compute_score(TrainerClient(TrainerConfig.from_settings(Settings(), run_id)))


def compute_score(
    data_source: str, solution_str: str, ground_truth: str, extra_info: Mapping[str, Any] | None = None
) -> float:
    """verl's per-sample reward function."""
    return _scorer()(data_source, solution_str, ground_truth, extra_info)


def compute_score_batch(
    data_sources: Sequence[str],
    solution_strs: Sequence[str],
    ground_truths: Sequence[str],
    extra_infos: Sequence[Mapping[str, Any] | None],
) -> list[float]:
    """verl's batch reward manager shape: lists in, one float per sample out."""
    return _scorer().batch(data_sources, solution_strs, ground_truths, extra_infos)


def main() -> None:
    from workers.tasks.humaneval import load_problems

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-id", default="example-verl")
    parser.add_argument("--task-index", type=int, default=0)
    args = parser.parse_args()
    os.environ["RS_RUN_ID"] = args.run_id
    problem = load_problems()[args.task_index]
    answer = f"Here is my solution:\n```python\n{problem.reference_code}```\n"
    scores = [
        compute_score("openai_humaneval", answer, problem.task_id, {"index": 0}),
        compute_score("openai_humaneval", problem.prompt + "    return None\n", problem.task_id, None),
    ]
    _scorer().client.close()
    print(f"{problem.task_id}: canonical={scores[0]} wrong={scores[1]}")
    print(f"scores: {scores}")


if __name__ == "__main__":
    main()
