"""The in-process profile of the reward processor's path runs and counts what it says: every generation's
three results make one reward, and its figure is CPU per reward."""

from __future__ import annotations

import json

import pytest

from benchmarks.profile_reward_path import main, messages, run


def test_every_generation_makes_one_reward_and_each_its_changelog_record() -> None:
    msgs = messages(12, 4)
    assert len(msgs) == 36
    spent, txn = run(msgs, batch=10)  # generations split across batches, as Kafka's fetches split them
    assert spent > 0
    rewards = [value for topic, _key, value, _p in txn.produced if topic == "rewards"]
    assert len(rewards) == 12
    last = {key: value for topic, key, value, _p in txn.produced if topic == "changelog"}
    assert len(last) == 12
    assert all(v is not None and v.startswith(b'{"status":"emitted"') for v in last.values())


def test_it_prints_cpu_per_reward(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--rewards", "6", "--rounds", "1"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["rewards"] == 6
    assert out["cpu_us_per_reward"] > 0
