"""Task versions through the running pipeline (issue 24, item 3): a task is loaded, graded, loaded again with
corrected expected values and graded again, without restarting anything. The second reward follows the new
version; the first stays explainable and replayable against the old one; a generation pinned to the old
version is still graded against it, and one pinned to a version the registry lacks is dead-lettered.

As filed: the canonical solutions of HumanEval/8 and /20 were still rewarded 0 by the running workers minutes
after ``tasks load`` of corrected expected values (their caches never saw the update). The task here is
HumanEval/8's ``sum_product`` with two wrong expected values in its first version.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import Producer

from schemas.codec import encode
from schemas.events import GenerationEvent
from schemas.tasks import Task, task_version
from streams.replay.ready import pipeline_groups, wait_groups_ready
from streams.sdk import TrainerClient, TrainerConfig
from tests.integration.helpers import cli, cli_json
from tests.integration.reward_env import Reader
from tests.integration.sdk_env import pipeline, process_sandbox_or_skip

pytestmark = [pytest.mark.integration, pytest.mark.sandbox, pytest.mark.slow]

TASK_ID = "fix/sum_product"
CANONICAL = """def sum_product(numbers):
    total, product = 0, 1
    for n in numbers:
        total += n
        product *= n
    return [total, product]
"""


def sum_product(sums: tuple[int, int], products: tuple[int, int]) -> dict[str, Any]:
    """The task, with these expected sums and products for [1, 2, 3] and [3, 5, 7]."""
    return {
        "task_id": TASK_ID, "prompt": "def sum_product(numbers):\n", "entry_point": "sum_product",
        "public_tests": {"kind": "call", "cases": [{"args": [[]], "expected": [0, 1]}]},
        "hidden_tests": {"kind": "call", "cases": [{"args": [[1, 2, 3]], "expected": [sums[0], products[0]]},
                                                   {"args": [[3, 5, 7]], "expected": [sums[1], products[1]]}]},
        "limits": {"timeout_s": 10, "memory_mb": 256},
    }  # fmt: skip


WRONG = sum_product((6, 15), (7, 106))  # 1*2*3 is 6 and 3*5*7 is 105: the canonical solution fails both
RIGHT = sum_product((6, 15), (6, 105))
OLD, NEW = (task_version(Task.model_validate(doc)) for doc in (WRONG, RIGHT))
assert OLD != NEW


@pytest.fixture(scope="module")
def process_sandbox_available() -> None:
    process_sandbox_or_skip().close()


def load(path: Path, doc: dict[str, Any], env: dict[str, str]) -> str:
    """``rewardstream tasks load`` of one task, as an operator does; its human report."""
    path.write_bytes(orjson.dumps(doc) + b"\n")
    done = cli(["tasks", "load", str(path)], env)
    assert done.returncode == 0, done.stderr
    return done.stdout


def publish_unpinned(kafka: dict[str, str], topic: str, event: GenerationEvent) -> None:
    """A producer that names no version (e.g. another language's): each role grades it against the latest."""
    assert event.task_version is None
    producer = Producer({**kafka, "enable.idempotence": True})
    producer.produce(topic, key=event.key(), value=encode(event))
    assert producer.flush(30) == 0


@pytest.mark.usefixtures("process_sandbox_available")
@pytest.mark.timeout(1500)
def test_a_corrected_task_is_graded_at_once_and_the_old_one_stays_explainable_and_replayable(
    kafka_config: dict[str, str], unique_name: str, tmp_path: Path
) -> None:
    registry = tmp_path / "registry"
    registry.mkdir()
    with pipeline(kafka_config, unique_name, tmp_path, registry) as pipe:
        env = {**pipe.worker_env, "RS_OPENSEARCH_INDEX_PREFIX": "none"}
        assert "1 added" in load(tmp_path / "v1.jsonl", WRONG, env)
        started = {proc.pid for proc in pipe.env.procs}
        wait_groups_ready(kafka_config, [*pipeline_groups(pipe.env.prefix)[:3], pipe.env.app_id])
        before, after = f"{unique_name}-before", f"{unique_name}-after"
        gid = {
            name: f"{unique_name}-{name}" for name in ("pinned1", "unpinned1", "pinned2", "unpinned2", "old", "gone")
        }

        # The first version: the SDK pins it when it publishes; an unpinned generation gets it as the latest.
        with TrainerClient(TrainerConfig.from_settings(pipe.settings, before)) as client:
            pending = {
                gid["pinned1"]: client.publish(client.generation(TASK_ID, CANONICAL, generation_id=gid["pinned1"])),
                gid["unpinned1"]: client.future_for(gid["unpinned1"]),
            }
            publish_unpinned(kafka_config, pipe.env.name("generations"),
                             client.generation(TASK_ID, CANONICAL, generation_id=gid["unpinned1"]))  # fmt: skip
            client.flush()
            old_rewards = {g: f.result(timeout=300) for g, f in pending.items()}
        for reward in old_rewards.values():
            assert (reward.reward, reward.task_version) == (0.0, OLD), (reward.reasons, pipe.logs())

        # The corrected version, loaded while everything runs.
        assert f"updated {TASK_ID}: version {NEW} (was {OLD})" in load(tmp_path / "v2.jsonl", RIGHT, env)
        assert cli_json(["tasks", "show", TASK_ID], env)["task_version"] == NEW
        assert cli_json(["tasks", "show", TASK_ID, "--version", OLD], env)["task_version"] == OLD

        unknown = "0" * 64
        with TrainerClient(TrainerConfig.from_settings(pipe.settings, after)) as client:
            pending = {
                "pinned2": client.publish(client.generation(TASK_ID, CANONICAL, generation_id=gid["pinned2"])),
                "old": client.publish(
                    client.generation(TASK_ID, CANONICAL, generation_id=gid["old"], task_version=OLD)
                ),
                "unpinned2": client.future_for(gid["unpinned2"]),
            }
            publish_unpinned(kafka_config, pipe.env.name("generations"),
                             client.generation(TASK_ID, CANONICAL, generation_id=gid["unpinned2"]))  # fmt: skip
            client.send(client.generation(TASK_ID, CANONICAL, generation_id=gid["gone"], task_version=unknown))
            client.flush()
            new_rewards = {name: f.result(timeout=300) for name, f in pending.items()}
        got = {name: (r.reward, r.task_version) for name, r in new_rewards.items()}
        assert got == {"pinned2": (1.0, NEW), "unpinned2": (1.0, NEW), "old": (0.0, OLD)}, pipe.logs()
        for reward in new_rewards.values():  # one version per generation: no part graded against another
            assert not [r for r in reward.reasons if "task versions differ" in r], reward.reasons

        # A pinned version the registry lacks: dead-lettered with the reason, by every role; no reward.
        dlq = Reader(kafka_config, pipe.env.name("dlq"))
        try:

            def gone() -> list[str]:
                return [d.error for d in dlq.letters() if gid["gone"].encode() in d.payload()]

            dlq.wait(lambda: len(gone()) >= 3, 120, "the dead letters of the unknown version", pipe.env)
            assert all(f"no version {unknown} of task '{TASK_ID}'" in error for error in gone()), gone()
        finally:
            dlq.close()

        # Nothing was restarted: the same processes graded both versions.
        assert {proc.pid for proc in pipe.env.procs} == started
        assert all(proc.poll() is None for proc in pipe.env.procs)
        assert pipe.env.restarts == 0

        # The first reward stays explainable against the old version...
        story = cli_json(["explain", gid["pinned1"], "--json"], env)
        assert story["generation"]["task_version"] == OLD  # pinned by the SDK when it published
        assert {story[s]["task_version"] for s in ("execution", "verdict", "judgement", "reward")} == {OLD}
        assert story["reward"]["reward"] == 0.0
        assert story["math"]["matches"] is True
        unpinned = cli_json(["explain", gid["unpinned1"], "--json"], env)
        assert unpinned["generation"]["task_version"] is None
        assert unpinned["reward"]["task_version"] == OLD
        text = cli(["explain", gid["pinned1"]], env)
        assert f"task version  {OLD}" in text.stdout, text.stdout

        # ... and replayable against it, while the latest is the corrected one: both rewards as they were.
        started_at = time.monotonic()
        done = cli(["replay", "--run-id", before, "--json", "--replay-id", "versions", "--timeout", "300"], env,
                   timeout=900)  # fmt: skip
        assert done.returncode == 0, done.stderr[-4000:] + pipe.logs()
        replayed = orjson.loads(done.stdout)
        assert replayed["replayed"] == 2, (replayed, time.monotonic() - started_at)
        assert replayed["counts"]["same"] == 2, replayed
        for entry in replayed["generations"]:
            assert entry["old"]["task_version"] == entry["new"]["task_version"] == OLD, entry
            assert entry["new"]["reward"] == 0.0, entry
