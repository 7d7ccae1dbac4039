"""``rewardstream submit`` through the whole pipeline, then ``rewardstream logs search`` finds the generation
it submitted in OpenSearch (workers -> logs topic -> indexer -> daily index)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from schemas.codec import decode
from schemas.events import RewardEvent
from tests.integration.helpers import cli, cli_json, wait_for_log_lines
from tests.integration.sdk_env import Problems, convert_problems, pipeline

pytestmark = [pytest.mark.integration, pytest.mark.sandbox, pytest.mark.slow]


@pytest.fixture(scope="module")
def problems(tmp_path_factory: pytest.TempPathFactory) -> Problems:
    return convert_problems(tmp_path_factory.mktemp("registry"), 3)


def test_submit_writes_one_reward_per_line_and_logs_search_finds_it(
    problems: Problems, kafka_config: dict[str, str], logs_index_prefix: str, unique_name: str, tmp_path: Path
) -> None:
    run_id = f"{unique_name}-run"
    task_ids = sorted(problems.canonical)
    rows = []
    for i, task_id in enumerate(task_ids):
        rows.append(
            {"task_id": task_id, "generation_id": f"{unique_name}-good-{i}", "code": problems.canonical[task_id]}
        )
        rows.append({"task_id": task_id, "generation_id": f"{unique_name}-bad-{i}", "code": problems.wrong[task_id]})
    solutions, out = tmp_path / "solutions.jsonl", tmp_path / "rewards.jsonl"
    solutions.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    with pipeline(kafka_config, unique_name, tmp_path, problems.registry_dir, index_prefix=logs_index_prefix) as pipe:
        done = cli(["submit", "--solutions", str(solutions), "--out", str(out), "--run-id", run_id,
                    "--timeout", "180"], pipe.worker_env)  # fmt: skip
        assert done.returncode == 0, done.stderr + pipe.logs()
        assert "rewards" in done.stderr  # the progress bar and summary go to stderr
        rewards = [decode(line, RewardEvent) for line in out.read_bytes().splitlines()]
        assert [r.generation_id for r in rewards] == [r["generation_id"] for r in rows]
        assert [r.reward for r in rewards] == [1.0, 0.0] * len(task_ids)
        assert {r.run_id for r in rewards} == {run_id}

        # The verifier's log line of the wrong solution reaches OpenSearch; search by generation id.
        target = rows[1]["generation_id"]
        hits = wait_for_log_lines(target, pipe.worker_env, pipe.logs)
        assert all(h["generation_id"] == target and h["run_id"] == run_id for h in hits)
        verifier = next(h for h in hits if h["component"] == "verifier")
        assert verifier["fields"]["passed"] < verifier["fields"]["total"]

        # Filters: the run, a status, a time window, free text; an unknown id finds nothing.
        by_run = cli_json(["logs", "search", "*", "--run-id", run_id, "--since", "1h", "--json", "--limit", "100"],
                          pipe.worker_env)  # fmt: skip
        assert {h["generation_id"] for h in by_run} == {r["generation_id"] for r in rows}
        ok = cli_json(["logs", "search", "verifier", "--status", "ok", "--run-id", run_id, "--json"], pipe.worker_env)
        assert ok
        assert all(h["fields"]["status"] == "ok" and h["component"] == "verifier" for h in ok)
        assert cli_json(["logs", "search", "no-such-generation", "--json"], pipe.worker_env) == []
        table = cli(["logs", "search", target], pipe.worker_env)
        assert table.returncode == 0
        assert "verifier" in table.stdout
        bad = cli(["logs", "search", "x", "--since", "yesterday"], pipe.worker_env)
        assert bad.returncode == 2
        assert bad.stderr.startswith("rewardstream: error: --since")
