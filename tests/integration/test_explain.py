"""``rewardstream explain`` against the real pipeline (workers storing artifacts in S3, indexer into OpenSearch):
a generation submitted by the test is found with its events, hidden verdict counts (never hidden tests), judge
score, reward math, log lines and artifact links; also without OpenSearch hits (bounded topic scan)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest

from schemas.codec import decode
from schemas.events import RewardEvent
from streams.replay.ready import pipeline_groups, wait_groups_ready
from tests.integration.helpers import cli, cli_json, wait_for_log_lines
from tests.integration.reward_env import PARTITIONS, REPO, RewardEnv, reward_env
from tests.integration.sdk_env import Problems, convert_problems

pytestmark = [pytest.mark.integration, pytest.mark.sandbox, pytest.mark.slow]


@pytest.fixture(scope="module")
def problems(tmp_path_factory: pytest.TempPathFactory) -> Problems:
    return convert_problems(tmp_path_factory.mktemp("registry"), 2)


@contextmanager
def pipeline_with_artifacts(
    kafka_config: dict[str, str], unique_name: str, tmp: Path, registry: Path, index_prefix: str
) -> Iterator[tuple[RewardEnv, dict[str, str]]]:
    """Topics, the reward processor, executor/verifier/judge storing artifacts in S3, and an indexer."""
    with reward_env(kafka_config, unique_name, tmp) as env:
        worker_env = {
            **os.environ,
            "RS_TOPIC_PREFIX": env.prefix,
            "RS_TOPIC_PARTITIONS": str(PARTITIONS),
            "RS_TASKS_DIR": str(registry),
            "RS_METRICS_PORT": "0",
            "RS_WORKER_STORE_ARTIFACTS": "true",
            "RS_OPENSEARCH_INDEX_PREFIX": index_prefix,
            "RS_OPENSEARCH_REPLICAS": "0",
            "PYTHONWARNINGS": "ignore",
        }
        env.start(tag="processor")
        for role in ("executor", "verifier", "judge", "indexer"):
            with (tmp / f"{role}.log").open("wb") as out:
                env.procs.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "rewardstream", "worker", role],
                        cwd=REPO,
                        env=worker_env,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
        with env.supervised():  # as `up --pipeline` does: a processor that stops itself restarts
            yield env, worker_env


def test_explain_tells_the_whole_story_of_a_submitted_generation(  # noqa: PLR0917 - fixtures
    problems: Problems, kafka_config: dict[str, str], logs_index_prefix: str, minio_client: Any, unique_name: str,
    tmp_path: Path,
) -> None:  # fmt: skip
    run_id = f"{unique_name}-run"
    task_id = sorted(problems.canonical)[0]
    good, bad = f"{unique_name}-good", f"{unique_name}-bad"
    rows = [
        {"task_id": task_id, "generation_id": good, "code": problems.canonical[task_id]},
        {"task_id": task_id, "generation_id": bad, "code": problems.wrong[task_id]},
    ]
    solutions, out = tmp_path / "solutions.jsonl", tmp_path / "rewards.jsonl"
    solutions.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    with pipeline_with_artifacts(kafka_config, unique_name, tmp_path, problems.registry_dir, logs_index_prefix) as (
        renv,
        env,
    ):
        wait_groups_ready(kafka_config, [*pipeline_groups(renv.prefix)[:3], renv.app_id])  # all assigned
        done = cli(["submit", "--solutions", str(solutions), "--out", str(out), "--run-id", run_id,
                    "--timeout", "180"], env)  # fmt: skip
        assert done.returncode == 0, done.stderr + renv.logs()
        rewards = {r.generation_id: r for r in (decode(x, RewardEvent) for x in out.read_bytes().splitlines())}
        assert (rewards[good].reward, rewards[bad].reward) == (1.0, 0.0)
        wait_for_log_lines(bad, env, renv.logs)  # logs search finds what the test submitted

        story = cli_json(["explain", bad, "--json"], env)
        assert story["found"] is True
        assert story["generation"]["run_id"] == run_id
        assert story["generation"]["task_id"] == task_id
        assert story["generation"]["location"]["topic"] == f"{renv.prefix}generations"
        partition = story["generation"]["location"]["partition"]
        for section in ("execution", "verdict", "judgement", "reward"):
            assert story[section]["location"]["partition"] == partition, section  # one episode, one partition
        assert story["execution"]["passed"] < story["execution"]["total"]
        verdict = story["verdict"]
        assert verdict["passed"] == 0
        assert verdict["total"] == len(verdict["cases"]) > 0
        assert verdict["statuses"] == {"failed": verdict["total"]}
        assert all(set(c) == {"case_id", "status"} for c in verdict["cases"])  # statuses only
        assert "expected" not in orjson.dumps(verdict).decode()
        assert story["judgement"]["status"] == "ok"
        assert 0.0 <= story["judgement"]["score"] <= 1.0
        reward = story["reward"]
        assert reward["reward"] == 0.0
        assert reward["reasons"] == rewards[bad].reasons
        assert reward["rewards_seen"] == 1
        # The reward names the events it was computed from: exactly the ones explain shows.
        used = {i["event_id"] for i in reward["inputs"]}
        assert used == {story[s]["event_id"] for s in ("execution", "verdict", "judgement")}
        math = story["math"]
        assert math["policy"] == "default v2"
        assert math["matches"] is True
        assert math["reward"] == 0.0
        assert any(s.startswith("hidden: 0/") and "gate all_hidden_pass=true: fails" in s for s in math["steps"])
        assert {line["component"] for line in story["logs"]} >= {"executor", "verifier", "judge"}
        assert story["log_search_error"] is None
        # Artifact links (never their content): the code and per-case results in S3, by executor and verifier.
        assert story["artifacts"], story
        assert all(url.startswith("s3://") for url in story["artifacts"].values())
        assert {name.split(".")[0] for name in story["artifacts"]} == {"execution", "verdict"}
        assert story["artifacts"] == {
            **{f"execution.{k}": v for k, v in story["execution"]["artifacts"].items()},
            **{f"verdict.{k}": v for k, v in story["verdict"]["artifacts"].items()},
        }

        # The human-readable story.
        text = cli(["explain", good], env)
        assert text.returncode == 0, text.stderr
        for part in ("hidden verdict", "reward math (default v2)", "every gate holds", "matches", "log lines"):
            assert part in text.stdout, (part, text.stdout)

        # Without log lines (another index prefix): the bounded topic scan still finds everything.
        scan = cli_json(["explain", good, "--json"], {**env, "RS_OPENSEARCH_INDEX_PREFIX": "none"})
        assert scan["logs"] == []
        assert scan["reward"]["reward"] == 1.0
        assert scan["math"]["matches"] is True
        assert {s["topic"] for s in scan["scanned"]} == {renv.name(r) for r in
                ("generations", "executions", "verdicts", "judgements", "rewards")}  # fmt: skip

        missing = cli(["explain", f"{unique_name}-nope"], env)
        assert missing.returncode == 2
        assert missing.stderr.startswith(f"rewardstream: error: generation {unique_name}-nope not found")
