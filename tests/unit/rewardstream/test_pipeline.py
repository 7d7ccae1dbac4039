"""The processes a replay runs: the grading roles and the reward processor with the replay's policy; no
indexer (its logs stay on the replay's topic), no episode worker (a replay re-grades generations, an
episode's included, and replays no actions: it would only leave its state topics behind in the namespace) and
no auditor (audits never change a reward)."""

from __future__ import annotations

from pathlib import Path

from rewardstream.cli.replay import _ReplayPipeline
from rewardstream.pipeline import pipeline_processes
from schemas.settings import Settings


def test_a_replay_runs_the_grading_roles_and_the_processor_with_its_policy(tmp_path: Path) -> None:
    settings = Settings(cache_dir=tmp_path, topic_prefix="rs.replay.x.")
    assert [p.name for p in pipeline_processes(settings)] == ["executor", "verifier", "judge", "indexer", "reward",
                                                               "episode", "auditor", "gateway"]  # fmt: skip
    policy = tmp_path / "strict.toml"
    replay = _ReplayPipeline(settings, policy, 2, {})
    procs = {p.name: p for p in replay._procs}
    assert list(procs) == ["executor", "verifier", "judge", "reward"]
    assert procs["reward"].argv[-2:] == ("--policy", str(policy.resolve()))
    assert "--concurrency" in procs["executor"].argv
