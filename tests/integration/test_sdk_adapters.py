"""The TRL and verl adapters against the whole pipeline: canonical HumanEval solutions get 1.0, wrong ones 0.0."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from streams.sdk import TrainerClient, TrainerConfig
from streams.sdk.adapters import TrlRewardFunction, make_compute_score
from tests.integration.reward_env import REPO
from tests.integration.sdk_env import Problems, convert_problems, pipeline

pytestmark = [pytest.mark.integration, pytest.mark.sandbox, pytest.mark.slow]


@pytest.fixture(scope="module")
def problems(tmp_path_factory: pytest.TempPathFactory) -> Problems:
    return convert_problems(tmp_path_factory.mktemp("registry"), 6)


def test_trl_and_verl_adapters_score_canonical_and_wrong_humaneval(
    problems: Problems, kafka_config: dict[str, str], unique_name: str, tmp_path: Path
) -> None:
    task_ids = sorted(problems.canonical)
    with pipeline(kafka_config, unique_name, tmp_path, problems.registry_dir) as pipe:
        config = TrainerConfig.from_settings(pipe.settings, f"{unique_name}-run")
        with TrainerClient(config) as client:
            # TRL: completions continue the prompt (HumanEval style) or are chat messages with a fenced block.
            trl = TrlRewardFunction(client, timeout_s=180)
            prompts, completions, tasks, expected = [], [], [], []
            for i, task_id in enumerate(task_ids):
                body = problems.canonical[task_id][len(problems.prompts[task_id]) :]
                prompts += [problems.prompts[task_id]] * 2
                good: object = (
                    body
                    if i % 2
                    else [{"role": "assistant", "content": f"```python\n{problems.canonical[task_id]}```"}]
                )
                completions += [good, "    return None\n"]
                tasks += [task_id, task_id]
                expected += [1.0, 0.0]
            got = trl(prompts=prompts, completions=completions, task_id=tasks)
            assert got == expected, pipe.logs()

            # verl: the task id travels as ground_truth; solution_str is the model's whole answer.
            compute_score = make_compute_score(client, timeout_s=180)
            task_id = task_ids[0]
            assert compute_score("humaneval", problems.canonical[task_id], task_id, {"split": "test"}) == 1.0
            assert compute_score("humaneval", problems.wrong[task_id], task_id, None) == 0.0
            scores = compute_score.batch(
                ["humaneval"] * 4,
                [
                    problems.canonical[task_ids[1]],
                    problems.wrong[task_ids[1]],
                    problems.canonical[task_ids[2]],
                    "x = (",
                ],
                [task_ids[1], task_ids[1], "ignored", task_ids[3]],
                [None, None, {"task_id": task_ids[2]}, None],
            )
            assert scores == [1.0, 0.0, 1.0, 0.0]
            assert client.stats["duplicates_dropped"] == 0

        # The documented examples run as they are, against the same pipeline.
        for script, expected_line in (
            ("trl_grpo_reward.py", "rewards: [1.0, 0.0, 1.0, 0.0]"),
            ("verl_compute_score.py", "scores: [1.0, 0.0]"),
        ):
            done = subprocess.run(
                [sys.executable, str(REPO / "examples" / script), "--run-id", f"{unique_name}-{script[:4]}"],
                cwd=REPO, env=pipe.worker_env, capture_output=True, text=True, timeout=240, check=False,
            )  # fmt: skip
            assert done.returncode == 0, done.stderr[-3000:]
            assert expected_line in done.stdout, done.stdout
