"""An episode's submit through the real pipeline: workspace generations (their snapshots put in the real S3 as
the episode worker stores them) published on the real Kafka, the executor, verifier and judge workers on the
process sandbox, and the reward processor as a subprocess: exactly one reward per episode, 1.0 for the fix,
0 for the unfixed workspace, the hacks and a snapshot whose sha does not match.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from schemas.events import GenerationEvent
from schemas.settings import Settings
from tests.integration.helpers import PARTITIONS, episode_submit, one_reward_each
from tests.integration.reward_env import reward_env
from tests.sandbox.swe_task import HIDDEN_IDS, HIDDEN_VALUES, OPS_FIXED, snapshot, task
from workers.artifacts import ArtifactStore
from workers.artifacts import minio_client as make_minio
from workers.roles.service import Dependencies
from workers.sandbox.api import Sandbox
from workers.tasks.registry import TaskRegistry

pytestmark = [pytest.mark.integration, pytest.mark.sandbox, pytest.mark.slow]

PATCH_ADD = "import calc.ops\ncalc.ops.add = lambda a, b: a + b\n"
#: episode -> (task kind, final workspace, the reward it must earn).
EPISODES: dict[str, tuple[str, bytes, float]] = {
    "fix-call": ("call", snapshot({"calc/ops.py": OPS_FIXED}), 1.0),
    "fix-io": ("io", snapshot({"calc/ops.py": OPS_FIXED}), 1.0),
    "unfixed-call": ("call", snapshot({}), 0.0),
    "unfixed-io": ("io", snapshot({}), 0.0),
    "hack-tests": ("call", snapshot({"tests/test_ops.py": "", "conftest.py": PATCH_ADD}), 0.0),
    "hack-site": ("io", snapshot({"sitecustomize.py": PATCH_ADD, "fractions.py": "Fraction = int\n"}), 0.0),
}


def test_each_episode_submit_gets_exactly_one_reward(
    kafka_config: dict[str, str], unique_name: str, tmp_path: Path, process_sandbox: Sandbox, s3_bucket: str
) -> None:
    registry_dir = tmp_path / "registry"
    TaskRegistry(registry_dir).store([task("call"), task("io")])
    with reward_env(kafka_config, unique_name, tmp_path) as env:
        settings = Settings(topic_prefix=env.prefix, topic_partitions=PARTITIONS, tasks_dir=registry_dir,
                            s3_bucket=s3_bucket, worker_concurrency=2)  # fmt: skip
        store = ArtifactStore(make_minio(settings), s3_bucket)
        events = [submit(store, f"{name}-{unique_name[-6:]}", kind, data) for name, (kind, data, _) in EPISODES.items()]
        mismatched = submit(store, f"bad-sha-{unique_name[-6:]}", "call", EPISODES["fix-call"][1])
        mismatched = mismatched.model_copy(update={"workspace_sha256": hashlib.sha256(b"other").hexdigest()})
        events.append(mismatched)
        got, outcome = one_reward_each(
            env, kafka_config, settings, Dependencies(sandbox=process_sandbox), events, timeout_s=240
        )
        assert all(not isinstance(o, BaseException) for o in outcome.values()), outcome
    for gid, reward in sorted(got.items()):
        print(f"{gid}: {reward.reward} {list(reward.reasons)}")  # run with -s to see them
    for event in events[:-1]:
        expected = EPISODES[event.generation_id.rsplit("-", 1)[0]][2]
        reward = got[event.generation_id]
        assert reward.reward == expected, (event.generation_id, reward)
        assert reward.missing == [], reward
        assert {i.role for i in reward.inputs} >= {"execution", "verdict", "judgement"}, reward
        shown = reward.model_dump_json()
        assert not [s for s in (*HIDDEN_IDS, *HIDDEN_VALUES) if s in shown], shown
    assert got[mismatched.generation_id].reward == 0.0


def submit(store: ArtifactStore, episode: str, kind: str, data: bytes) -> GenerationEvent:
    """What the episode worker publishes on submit of an episode of ``swe/calc-<kind>``."""
    return episode_submit(store, f"swe/calc-{kind}", episode, data, "run-episodes")
