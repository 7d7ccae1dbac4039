"""The chaos scenarios' shared fixtures: one three-node cluster for the whole session (its start is a minute),
the problems, and a pipeline per scenario after which the cluster is whole again."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.chaos.cluster import CLIENT_ENV, ChaosCluster
from tests.integration.chaos.load import chaos_pipeline, store_episode_task
from tests.integration.sdk_env import Pipeline, Problems, convert_problems


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChaosCluster]:
    made = ChaosCluster.in_dir(tmp_path_factory.mktemp("chaos-kafka"))
    try:
        print(f"\nthree nodes up in {made.up():.1f}s")
        yield made
    finally:
        made.down()


@pytest.fixture(scope="session")
def problems(tmp_path_factory: pytest.TempPathFactory) -> Problems:
    made = convert_problems(tmp_path_factory.mktemp("registry"), 4)
    store_episode_task(made.registry_dir)
    return made


@pytest.fixture
def pipe(
    cluster: ChaosCluster, problems: Problems, s3_bucket: str, unique_name: str, tmp_path: Path
) -> Iterator[Pipeline]:
    """The pipeline on the cluster (the shared S3, a bucket of its own); the cluster whole again after."""
    with pytest.MonkeyPatch.context() as env:
        for name, value in {**CLIENT_ENV, "RS_S3_BUCKET": s3_bucket}.items():
            env.setenv(name, value)
        try:
            with chaos_pipeline(cluster.config, unique_name, tmp_path, problems.registry_dir) as made:
                yield made
        finally:
            print(f"cluster whole again in {cluster.heal():.1f}s")
