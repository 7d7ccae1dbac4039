"""``rewardstream replay`` against the real pipeline: a 200-generation run replayed with the same policy changes
nothing; with a stricter policy exactly the generations the inputs say; nothing is written to the live topics
and the replay namespace is deleted afterwards."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka.admin import AdminClient

from streams.replay.ready import pipeline_groups, wait_groups_ready
from streams.reward.policy import default_policy_path
from streams.sdk import TrainerClient, TrainerConfig
from tests.integration.reward_env import REPO, Reader, reward_env
from tests.integration.sdk_env import Problems, convert_problems, pipeline

pytestmark = [pytest.mark.integration]

TASKS = 20
PER_TASK = 10  # 5 canonical + 5 wrong per task: 200 generations
BATCH = 50


@pytest.fixture(scope="module")
def problems(tmp_path_factory: pytest.TempPathFactory) -> Problems:
    return convert_problems(tmp_path_factory.mktemp("registry"), TASKS)


def cli(args: list[str], env: dict[str, str], timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rewardstream", *args], cwd=REPO, env=env, capture_output=True, text=True,
        timeout=timeout, check=False,
    )  # fmt: skip


def hidden_case_counts(problems: Problems) -> dict[str, int]:
    """From the inputs: how many hidden cases each task has."""
    from workers.tasks.registry import TaskRegistry

    registry = TaskRegistry(problems.registry_dir)
    return {t: len(registry.task(t).hidden_tests.cases) for t in problems.canonical}  # type: ignore[union-attr]


def strict_policy(path: Path, min_hidden_cases: int) -> Path:
    """The default policy with a stricter gate: fewer than ``min_hidden_cases`` hidden cases is no proof."""
    text = default_policy_path().read_text()
    text = text.replace('name = "default"', 'name = "strict"').replace('version = "1"', 'version = "2"')
    assert "min_hidden_cases = 1\n" in text
    path.write_text(text.replace("min_hidden_cases = 1\n", f"min_hidden_cases = {min_hidden_cases}\n"))
    return path


def replay_topics(kafka_config: dict[str, str], prefix: str) -> list[str]:
    return sorted(t for t in AdminClient({**kafka_config}).list_topics(timeout=30).topics if t.startswith(prefix))


def live_reward_count(kafka_config: dict[str, str], topic: str) -> int:
    reader = Reader(kafka_config, topic)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            reader.poll()
        return len(reader.values)
    finally:
        reader.close()


def delete_namespace(kafka_config: dict[str, str], prefix: str) -> None:
    from bus.admin import delete_groups_with_prefix, delete_topics

    delete_topics(replay_topics(kafka_config, prefix), kafka_config)
    delete_groups_with_prefix(prefix, kafka_config)


def check_replay(done: subprocess.CompletedProcess[str], logs: str) -> dict[str, Any]:
    assert done.returncode == 0, done.stderr[-4000:] + logs
    assert "replaying" in done.stderr  # the progress bar goes to stderr
    result: dict[str, Any] = orjson.loads(done.stdout)
    return result


@pytest.mark.sandbox
@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_replay_same_policy_changes_nothing_stricter_policy_changes_exactly_the_expected(
    problems: Problems, kafka_config: dict[str, str], unique_name: str, tmp_path: Path
) -> None:
    run_id = f"{unique_name}-run"
    task_ids = sorted(problems.canonical)
    assert len(task_ids) == TASKS
    rows = []
    for task_id in task_ids:
        for k in range(PER_TASK):
            is_good = k % 2 == 0
            code = problems.canonical[task_id] if is_good else problems.wrong[task_id]
            rows.append(
                (task_id, f"{unique_name}-{task_id.replace('/', '_')}-{k}-{'good' if is_good else 'bad'}", code)
            )
    assert len(rows) == 200
    with pipeline(kafka_config, unique_name, tmp_path, problems.registry_dir) as pipe:
        config = TrainerConfig.from_settings(pipe.settings, run_id, policy_version="replay-test")
        published_from = int(time.time() * 1000) - 1000
        wait_groups_ready(kafka_config, [*pipeline_groups(pipe.env.prefix)[:3], pipe.env.app_id])  # all assigned
        rewards = {}
        with TrainerClient(config) as client:  # in batches, as a trainer steps: no backlog beyond the join deadline
            for start in range(0, len(rows), BATCH):
                batch = rows[start : start + BATCH]
                client.publish_many(client.generation(t, code, generation_id=gid) for t, gid, code in batch)
                client.flush()
                rewards.update(client.wait([gid for _t, gid, _c in batch], timeout_s=300))
        published_to = int(time.time() * 1000) + 1000
        good = {gid for _t, gid, _c in rows if gid.endswith("-good")}
        wrong = {g: r.reasons for g, r in rewards.items() if r.reward != (1.0 if g in good else 0.0)}
        assert not wrong, f"the live run itself gave unexpected rewards: {wrong}\n{pipe.logs()}"
        for proc in pipe.env.procs:  # the workers: the live run is done, free the CPU for the replays
            if "worker" in proc.args and proc.poll() is None:  # type: ignore[operator]
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
        env = pipe.worker_env

        # Same policy, selected by run: all 200 replayed, zero changed.
        same = check_replay(cli(["replay", "--run-id", run_id, "--json", "--replay-id", "same"], env), pipe.logs())
        assert same["replayed"] == 200
        assert same["counts"] == {"changed": 0, "reasons_changed": 0, "old_missing": 0, "new_missing": 0, "same": 200}
        assert same["changed"] == []
        entries = same["generations"]
        assert [e["generation_id"] for e in entries] == sorted(gid for _t, gid, _c in rows)  # deterministic order
        assert all(e["old"]["reward"] == e["new"]["reward"] and e["old"]["reasons"] == e["new"]["reasons"]
                   for e in entries)  # fmt: skip
        assert {e["new"]["policy"] for e in entries} == {"default v1"}

        # Stricter policy (a hidden-case minimum), selected by time window; expected from the tasks alone.
        counts = hidden_case_counts(problems)
        minimum = sorted(counts.values())[len(counts) // 2]
        short = {t for t, n in counts.items() if n < minimum}
        assert 0 < len(short) < TASKS, counts
        expect_changed = sorted(gid for t, gid, _c in rows if t in short and gid in good)
        expect_reasons = sorted(gid for t, gid, _c in rows if t in short and gid not in good)
        policy = strict_policy(tmp_path / "strict.toml", minimum)
        args = ["replay", "--from-time", str(published_from), "--to-time", str(published_to), "--policy", str(policy)]
        strict_prefix = f"{pipe.env.prefix}replay.strict."
        try:
            done = cli([*args, "--diff", "--json", "--replay-id", "strict", "--keep"], env)
            strict = check_replay(done, pipe.logs())
            assert f"kept the replay topics {strict_prefix}*" in done.stderr
            # explain a replayed generation in the kept namespace: its reward math under the strict policy.
            target = expect_changed[0]
            kept_env = {**env, "RS_TOPIC_PREFIX": strict_prefix, "RS_OPENSEARCH_INDEX_PREFIX": "none"}
            story = orjson.loads(cli(["explain", target, "--json", "--policy", str(policy)], kept_env).stdout)
            assert story["reward"]["policy_name"] == "strict"
            assert story["math"]["matches"] is True
            assert story["math"]["policy"] == "strict v2"
            assert any(f"< min_hidden_cases {minimum}: fails" in step for step in story["math"]["steps"])
            unknown = orjson.loads(cli(["explain", target, "--json"], kept_env).stdout)
            assert unknown["math"]["available"] is False  # strict v2 is no packaged policy: says to pass it
        finally:
            delete_namespace(kafka_config, strict_prefix)
        assert strict["replayed"] == 200
        assert [e["generation_id"] for e in strict["changed"]] == expect_changed
        assert [e["generation_id"] for e in strict["reasons_changed"]] == expect_reasons
        assert strict["counts"]["same"] == 200 - len(expect_changed) - len(expect_reasons)
        assert "generations" not in strict  # --diff: only what differs
        for entry in strict["changed"]:
            assert (entry["old"]["reward"], entry["new"]["reward"], entry["delta"]) == (1.0, 0.0, -1.0)
            assert entry["new"]["policy"] == "strict v2"
            assert any(f"fewer than {minimum}: no proof" in r for r in entry["reasons_added"]), entry

        # Offsets: partition 0's first 5 generations only; human-readable output.
        table = cli(["replay", "--from-offset", "0:0", "--to-offset", "0:5", "--replay-id", "offsets"], env)
        assert table.returncode == 0, table.stderr[-4000:]
        assert "replayed 5: 0 changed, 0 reasons_changed, 0 old_missing, 0 new_missing, 5 same" in table.stdout

        # Isolation: the live rewards topic still holds exactly one reward per generation; no replay topic is left.
        assert live_reward_count(kafka_config, pipe.env.name("rewards")) == 200
        assert replay_topics(kafka_config, f"{pipe.env.prefix}replay.") == []
        groups = AdminClient({**kafka_config}).list_consumer_groups(request_timeout=30).result().valid
        assert [g.group_id for g in groups if g.group_id.startswith(f"{pipe.env.prefix}replay.")] == []


def test_replay_errors_are_one_line(kafka_config: dict[str, str], unique_name: str, tmp_path: Path) -> None:
    with reward_env(kafka_config, unique_name, tmp_path) as renv:  # topics only, no generations
        env = {**os.environ, "RS_TOPIC_PREFIX": renv.prefix, "RS_TOPIC_PARTITIONS": "3"}
        none = cli(["replay", "--run-id", "no-such-run"], env, timeout=120)
        assert none.returncode == 2
        assert none.stderr.strip().splitlines()[-1] == (
            f"rewardstream: error: no generations matched run no-such-run in {renv.prefix}generations (0 messages read)"
        )
        bad = tmp_path / "bad.toml"
        bad.write_text('schema = "rewardstream.reward-policy/v1"\nname = "x"\n')
        invalid = cli(["replay", "--run-id", "r", "--policy", str(bad)], env, timeout=120)
        assert invalid.returncode == 2
        assert (
            invalid.stderr.strip().splitlines()[-1].startswith(f"rewardstream: error: reward policy {bad} is invalid")
        )
        syntax = cli(["replay", "--from-offset", "zero", "--to-offset", "0:5"], env, timeout=120)
        assert syntax.returncode == 2
        assert "--from-offset 'zero': expected PARTITION:OFFSET" in syntax.stderr
        assert replay_topics(kafka_config, f"{renv.prefix}replay.") == []
