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


def _secured(tmp_path: Path) -> Settings:
    """Settings of a cache dir whose ``up`` wrote every principal's client file (as ``KafkaAuth.ensure`` does)."""
    from schemas.kafka_acls import principals

    clients = tmp_path / "kafka-auth" / "clients"
    clients.mkdir(parents=True)
    for name in principals(("trainer",)):
        (clients / f"{name}.env").write_text(
            f"RS_KAFKA_SECURITY_PROTOCOL=SASL_SSL\nRS_KAFKA_SASL_USERNAME={name}\nRS_KAFKA_SASL_PASSWORD=pw-{name}\n"
        )
    return Settings(cache_dir=tmp_path, kafka_auth="scram")


def test_with_auth_each_process_runs_as_its_own_principal_and_no_password_is_on_a_command_line(
    tmp_path: Path,
) -> None:
    from rewardstream.pipeline import Pipeline

    settings = _secured(tmp_path)
    pipeline = Pipeline(settings)
    users = {p.name: pipeline.credentials(p)["RS_KAFKA_SASL_USERNAME"] for p in pipeline_processes(settings)}
    assert users == {"executor": "executor", "verifier": "verifier", "judge": "judge", "indexer": "indexer",
                     "reward": "rewards", "episode": "episode", "auditor": "auditor", "gateway": "gateway"}  # fmt: skip
    for proc in pipeline_processes(settings):
        assert pipeline.credentials(proc)["RS_KAFKA_SASL_PASSWORD"] == f"pw-{users[proc.name]}"
        assert not any("pw-" in arg for arg in proc.argv)
    # A replay's processes run as the CLI's own principal (the operator's), whatever the cache dir holds.
    replay = _ReplayPipeline(settings, None, None, {})
    assert all(replay.credentials(p) == {} for p in replay._procs)


def test_without_auth_the_processes_inherit_the_environment(tmp_path: Path) -> None:
    from rewardstream.pipeline import Pipeline

    settings = Settings(cache_dir=tmp_path)
    assert all(Pipeline(settings).credentials(p) == {} for p in pipeline_processes(settings))


def test_a_missing_credentials_file_is_one_line_naming_it(tmp_path: Path) -> None:
    import pytest

    from rewardstream.pipeline import Pipeline
    from schemas.errors import PlatformError

    settings = _secured(tmp_path)
    (tmp_path / "kafka-auth" / "clients" / "judge.env").unlink()
    judge = next(p for p in pipeline_processes(settings) if p.name == "judge")
    with pytest.raises(PlatformError, match=r"no Kafka credentials for judge's principal judge \(.*judge.env is"):
        Pipeline(settings).credentials(judge)
