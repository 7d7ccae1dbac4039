"""An image task's episode submit through the real pipeline: the agent's final WORKDIR as a snapshot in the real S3
(as the episode worker stores it), generations on the real Kafka, the executor, verifier and judge workers, the
verifier's test.sh in a fresh container on the real docker daemon, and the reward processor as a subprocess:
exactly one reward per submit, the verifier's value (1.0 for the fix, 0.0 without it or for a snapshot that is
not one), made of the verdict alone.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest

from schemas.settings import Settings
from tests.integration.helpers import PARTITIONS, episode_submit, one_reward_each
from tests.integration.reward_env import reward_env
from tests.sandbox.conftest import image_of, task_images  # noqa: F401 - fixtures: the task's image, removed after
from tests.sandbox.image_task import hello
from workers.artifacts import ArtifactStore
from workers.artifacts import minio_client as make_minio
from workers.containers.task_host import ImageTaskHost
from workers.episodes.snapshot import pack
from workers.loop_config import WorkerStats
from workers.roles.service import Dependencies
from workers.sandbox.api import Sandbox
from workers.tasks.registry import TaskRegistry

pytestmark = [pytest.mark.integration, pytest.mark.sandbox, pytest.mark.slow]

#: submit -> (the agent's final WORKDIR: hello.py's text, or raw bytes that are no snapshot; the reward it earns).
SUBMITS: dict[str, tuple[str | bytes, float]] = {
    "fixed": ('print("hello")\n', 1.0),
    "unfixed": ('print("helo")\n', 0.0),
    "not-a-snapshot": (b"not a tar at all", 0.0),
}


def workdir_snapshot(hello_py: str | bytes) -> bytes:
    """The snapshot the episode worker stores on submit: the agent's WORKDIR (``/app``) packed canonically."""
    if isinstance(hello_py, bytes):
        return hello_py
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "hello.py").write_text(hello_py)
        return pack(Path(tmp)).data


def test_each_image_task_submit_gets_exactly_its_verifiers_reward(  # noqa: PLR0917
    kafka_config: dict[str, str],
    unique_name: str,
    tmp_path: Path,
    process_sandbox: Sandbox,
    s3_bucket: str,
    docker_client: Any,
    image_of: Any,  # noqa: F811 - the fixture imported above
) -> None:
    task = hello(tmp_path)
    image_of(task)  # built once here, as `tasks load` does, so the workers' first use finds it
    registry_dir = tmp_path / "registry"
    TaskRegistry(registry_dir).store([task])
    with reward_env(kafka_config, unique_name, tmp_path) as env:
        settings = Settings(topic_prefix=env.prefix, topic_partitions=PARTITIONS, tasks_dir=registry_dir,
                            s3_bucket=s3_bucket, worker_concurrency=2)  # fmt: skip
        store = ArtifactStore(make_minio(settings), s3_bucket)
        events = [
            episode_submit(store, task.task_id, f"{name}-{unique_name[-6:]}", workdir_snapshot(body), "run-images")
            for name, (body, _) in SUBMITS.items()
        ]
        deps = Dependencies(sandbox=process_sandbox, image_tasks=ImageTaskHost(docker_client, image_of))
        got, outcome = one_reward_each(env, kafka_config, settings, deps, events, timeout_s=120)
        assert all(not isinstance(o, BaseException) for o in outcome.values()), outcome
        # every role handled every submit, none dead-lettered one (the executor and the judge publish nothing)
        assert all(o.dead_letters == 0 for o in outcome.values() if isinstance(o, WorkerStats)), outcome
    for event in events:
        reward = got[event.generation_id]
        print(f"{event.generation_id}: {reward.reward} {list(reward.reasons)}")  # run with -s to see them
        assert reward.reward == SUBMITS[event.generation_id.rsplit("-", 1)[0]][1], reward
        assert [i.role for i in reward.inputs] == ["verdict"], reward
        assert reward.missing == [], reward
    assert got[events[0].generation_id].reasons == ["verifier: reward.txt: 1"]
    assert "the workspace snapshot is unusable" in got[events[2].generation_id].reasons[0]
