"""SDK round trip through the whole pipeline: 1,000 generations, exactly one reward each, also when the
trainer crashes mid-run and restarts from its last checkpoint (a real process, ``os._exit``)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import orjson
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from schemas.codec import decode
from schemas.events import RewardEvent
from streams.sdk import RewardTimeoutError, TrainerClient, TrainerConfig
from tests.integration.reward_env import PARTITIONS, REPO
from tests.integration.sdk_env import Problems, convert_problems, pipeline

pytestmark = [pytest.mark.integration, pytest.mark.sandbox, pytest.mark.slow]

GENERATIONS = 1000
CHECKPOINT_EVERY = 100
CRASH_AFTER = 450  # 400 checkpointed, 50 taken but not checkpointed when the trainer dies


@pytest.fixture(scope="module")
def problems(tmp_path_factory: pytest.TempPathFactory) -> Problems:
    return convert_problems(tmp_path_factory.mktemp("registry"), 8)


def solutions(problems: Problems, run: str) -> tuple[list[dict[str, str]], dict[str, float]]:
    task_ids = sorted(problems.canonical)
    rows, expected = [], {}
    for i in range(GENERATIONS):
        task_id = task_ids[i % len(task_ids)]
        good = (i // len(task_ids)) % 2 == 0
        gid = f"{run}-g{i}"
        rows.append(
            {
                "task_id": task_id,
                "generation_id": gid,
                "code": (problems.canonical if good else problems.wrong)[task_id],
            }
        )
        expected[gid] = 1.0 if good else 0.0
    return rows, expected


ROLES = ("executions", "verdicts", "judgements", "rewards")


def ids_on(kafka_config: dict[str, str], topic: str) -> set[str]:
    """Every generation id on a topic (read_committed): tells an SDK loss from a pipeline loss."""
    consumer = Consumer({**kafka_config, "group.id": "unused", "enable.auto.commit": False, "log_level": 3})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    ids: set[str] = set()
    try:
        while batch := consumer.consume(1000, timeout=2):
            ids |= {orjson.loads(m.value() or b"{}").get("generation_id") for m in batch if m.error() is None}
    finally:
        consumer.close()
    return ids


def copy_rewards(kafka_config: dict[str, str], topic: str, ids: set[str]) -> int:
    """Re-publish the rewards of ``ids`` (a processor emitting twice): the SDK must drop them. Only what was on
    the topic before the first copy is read (never a copy again)."""
    consumer = Consumer({**kafka_config, "group.id": "unused", "enable.auto.commit": False, "log_level": 3})
    ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(PARTITIONS)}
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    producer = Producer(kafka_config)
    copied = 0
    deadline = time.monotonic() + 60
    try:
        while copied < len(ids) and time.monotonic() < deadline:
            for msg in consumer.consume(500, timeout=0.5):
                if msg.error() is not None or (msg.offset() or 0) >= ends[msg.partition() or 0]:
                    continue
                if decode(msg.value() or b"", RewardEvent).generation_id in ids:
                    producer.produce(topic, key=msg.key(), value=msg.value())
                    copied += 1
        assert producer.flush(30) == 0
    finally:
        consumer.close()
    return copied


@pytest.mark.timeout(900)
def test_thousand_generations_one_reward_each_across_a_trainer_crash(
    problems: Problems, kafka_config: dict[str, str], unique_name: str, tmp_path: Path
) -> None:
    run = f"{unique_name}-run"
    rows, expected = solutions(problems, run)
    gen_file = tmp_path / "generations.jsonl"
    gen_file.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    with pipeline(kafka_config, unique_name, tmp_path, problems.registry_dir) as pipe:
        started = time.monotonic()
        # Phase 1: a trainer process publishes everything, takes 450 rewards (checkpoint every 100), dies.
        out1 = tmp_path / "phase1.txt"
        trainer = subprocess.run(
            [sys.executable, "-m", "tests.integration.sdk_env", "trainer", "--run-id", run,
             "--generations", str(gen_file), "--out", str(out1),
             "--checkpoint-every", str(CHECKPOINT_EVERY), "--crash-after", str(CRASH_AFTER)],
            cwd=REPO, env=pipe.worker_env, capture_output=True, timeout=280, check=False,
        )  # fmt: skip
        assert trainer.returncode == 17, trainer.stderr.decode()[-3000:] + pipe.logs()
        lines = out1.read_text().splitlines()
        last_checkpoint = max(i for i, line in enumerate(lines) if line == "CHECKPOINT")
        checkpointed = [line.split()[0] for line in lines[:last_checkpoint] if line != "CHECKPOINT"]
        taken_after = [line.split()[0] for line in lines[last_checkpoint + 1 :]]
        assert len(checkpointed) == CRASH_AFTER - CRASH_AFTER % CHECKPOINT_EVERY
        assert len(taken_after) == CRASH_AFTER % CHECKPOINT_EVERY

        # A processor that emitted some rewards twice (before and after the checkpoint): dropped by id.
        config = TrainerConfig.from_settings(pipe.settings, run, auto_commit=False)
        assert copy_rewards(kafka_config, config.rewards_topic, set(checkpointed[:5] + taken_after[:5])) == 10

        # Phase 2: the trainer restarts from its checkpoint and takes everything else, each once.
        second: list[RewardEvent] = []
        with TrainerClient(config) as client:
            remaining = GENERATIONS - len(checkpointed)
            try:
                second.extend(client.rewards(timeout_s=180, limit=remaining))
            except RewardTimeoutError:
                missing = sorted(set(expected) - set(checkpointed) - {r.generation_id for r in second})
                where = {role: sorted(set(missing) & ids_on(kafka_config, pipe.env.name(role))) for role in ROLES}
                pytest.fail(
                    f"no reward within 180s for {len(missing)} generation(s): {missing[:20]}; "
                    f"of these, present on each topic: {where}\n{pipe.logs()}"
                )
            with pytest.raises(RewardTimeoutError):
                next(client.rewards(timeout_s=3))  # nothing more: no duplicate, no stray reward
            client.checkpoint()
            dropped = client.stats["duplicates_dropped"]
        elapsed = time.monotonic() - started

    ids2 = [r.generation_id for r in second]
    assert max(Counter(ids2).values()) == 1
    assert not set(ids2) & set(checkpointed), "a reward checkpointed before the crash was delivered again"
    assert set(taken_after) <= set(ids2), "rewards taken after the last checkpoint must come again"
    assert sorted(checkpointed + ids2) == sorted(expected), "every generation gets exactly one reward"
    assert {r.generation_id: r.reward for r in second} == {g: expected[g] for g in ids2}
    assert dropped == 10
    print(f"\n{GENERATIONS} generations round trip with a trainer crash: {elapsed:.1f}s")


def test_futures_and_async_round_trip(
    problems: Problems, kafka_config: dict[str, str], unique_name: str, tmp_path: Path
) -> None:
    import asyncio

    from streams.sdk import AsyncTrainerClient

    task_id = sorted(problems.canonical)[0]
    with pipeline(kafka_config, unique_name, tmp_path, problems.registry_dir) as pipe:
        config = TrainerConfig.from_settings(pipe.settings, f"{unique_name}-run")
        with TrainerClient(config) as client:
            good = client.publish(client.generation(task_id, problems.canonical[task_id], generation_id="sync-good"))
            client.flush()
            assert good.result(timeout=120).reward == 1.0

        async def trainer() -> list[float]:
            async with await AsyncTrainerClient.connect(config) as aclient:
                futures = [
                    aclient.publish(aclient.generation(task_id, code, generation_id=f"async-{i}"))
                    for i, code in enumerate((problems.canonical[task_id], problems.wrong[task_id]))
                ]
                await aclient.flush()
                rewards = await asyncio.wait_for(asyncio.gather(*futures), 120)
                with pytest.raises(RewardTimeoutError) as missing:
                    await aclient.wait(["never-published"], timeout_s=1)
                assert missing.value.missing == ["never-published"]
                return [r.reward for r in rewards]

        assert asyncio.run(trainer()) == [1.0, 0.0]
