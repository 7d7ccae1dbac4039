"""``rewardstream submit`` failure paths against the real Kafka (no workers needed): a timeout exits
non-zero naming the generations without a reward; bad input names the line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from tests.integration.reward_env import REPO, reward_env

pytestmark = [pytest.mark.integration]


def test_submit_times_out_naming_what_is_missing(
    kafka_config: dict[str, str], unique_name: str, tmp_path: Path
) -> None:
    solutions, out = tmp_path / "s.jsonl", tmp_path / "r.jsonl"
    rows = [{"task_id": "HumanEval/0", "generation_id": f"{unique_name}-{i}", "code": "x = 1\n"} for i in range(3)]
    solutions.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    with reward_env(kafka_config, unique_name, tmp_path) as env:  # topics only: nothing will score them
        run_env = {**os.environ, "RS_TOPIC_PREFIX": env.prefix, "RS_TOPIC_PARTITIONS": "3"}
        argv = [sys.executable, "-m", "rewardstream", "submit", "--solutions", str(solutions), "--out", str(out)]
        done = subprocess.run([*argv, "--timeout", "2"], cwd=REPO, env=run_env, capture_output=True, text=True,
                              timeout=120, check=False)  # fmt: skip
        assert done.returncode == 2, done.stderr
        last = done.stderr.strip().splitlines()[-1]
        assert last.startswith("rewardstream: error: 3 reward(s) missing after 2s: "), done.stderr
        assert all(r["generation_id"] in last for r in rows)
        assert out.read_bytes() == b""

        solutions.write_text('{"task_id": "HumanEval/0", "generation_id": "g 1", "code": "x"}\n')
        bad = subprocess.run(argv, cwd=REPO, env=run_env, capture_output=True, text=True, timeout=120, check=False)
        assert bad.returncode == 2
        assert bad.stderr.strip().splitlines()[-1].startswith(f"rewardstream: error: {solutions}: solution 1: ")
