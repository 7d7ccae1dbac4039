"""Poison messages through the whole running pipeline: each invalid input lands in the DLQ exactly once per
component that reads its topic, with its coordinates, and every valid generation still gets exactly one
correct reward, with no process restarting.

The poison: the deep nesting that crash-looped two roles, every invalid input of the codec's suites, the
fuzzers' troublemakers, a tombstone and a huge key; produced between valid generations on every input topic
of every component (generations: executor, verifier, judge; executions, verdicts, judgements: the reward
processor; logs: the indexer; rewards: the trainer's SDK client, which skips them).
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import Producer

from schemas.codec import DecodeError, decode
from schemas.events import (
    DeadLetter,
    ExecutionResult,
    GenerationEvent,
    HiddenVerdict,
    JudgeScore,
    LogRecord,
    RewardEvent,
)
from streams.sdk import TrainerClient, TrainerConfig
from tests.integration.helpers import cli
from tests.integration.reward_env import Reader
from tests.integration.sdk_env import Problems, convert_problems, pipeline
from tests.unit.schemas.test_codec import INVALID
from tests.unit.schemas.test_codec_fuzz import TROUBLE

pytestmark = [pytest.mark.integration, pytest.mark.sandbox, pytest.mark.slow]

#: Component(s) that read each topic and dead-letter what they cannot decode.
READERS: dict[str, tuple[str, ...]] = {
    "generations": ("executor", "verifier", "judge"),
    "executions": ("rewards",),
    "verdicts": ("rewards",),
    "judgements": ("rewards",),
    "logs": ("indexer",),
    "rewards": (),  # the SDK client skips them; it has no DLQ
}
MODELS: dict[str, type[Any]] = {
    "generations": GenerationEvent,
    "executions": ExecutionResult,
    "verdicts": HiddenVerdict,
    "judgements": JudgeScore,
    "logs": LogRecord,
    "rewards": RewardEvent,
}


def poison_for(role: str) -> list[bytes | None]:
    """Every value of the suites that is invalid for the model read from ``role``'s topic, and a tombstone
    (except what no producer can send: over librdkafka's 1,000,000-byte ``message.max.bytes``)."""
    candidates = [b"[" * 10_000, *TROUBLE, *(data for _name, _model, data, _msg in INVALID if len(data) < 900_000)]
    found: list[bytes | None] = []
    for value in dict.fromkeys(candidates):
        try:
            decode(value, MODELS[role])
        except DecodeError:
            found.append(value)
    return [*found, None]


@pytest.fixture(scope="module")
def problems(tmp_path_factory: pytest.TempPathFactory) -> Problems:
    return convert_problems(tmp_path_factory.mktemp("registry"), 4)


@pytest.mark.timeout(900)
def test_poison_on_every_input_topic_is_dead_lettered_once_and_every_generation_rewarded(
    problems: Problems, kafka_config: dict[str, str], unique_name: str, tmp_path: Path, logs_index_prefix: str
) -> None:
    with pipeline(kafka_config, unique_name, tmp_path, problems.registry_dir, index_prefix=logs_index_prefix) as pipe:
        env = pipe.env
        started = list(env.procs)
        run = f"{unique_name}-run"
        client = TrainerClient(TrainerConfig.from_settings(pipe.settings, run))
        producer = Producer({**kafka_config, "enable.idempotence": True, "linger.ms": 5})
        poisoned: dict[tuple[str, int, int], str] = {}  # (topic, partition, offset) -> role

        def delivered(err: Any, msg: Any) -> None:
            assert err is None, err
            poisoned[(msg.topic(), msg.partition(), msg.offset())] = role_of[msg.topic()]

        role_of = {env.name(role): role for role in READERS}
        queues = {role: poison_for(role) for role in READERS}
        expected: dict[str, float] = {}
        task_ids = sorted(problems.canonical)
        n = 0
        while any(queues.values()):
            for role, queue in queues.items():  # one poison message per topic, then a valid generation
                if queue:
                    value = queue.pop(0)
                    key = b"k" * 20_000 if n == 3 else f"poison-{n}".encode()
                    producer.produce(env.name(role), key=key, value=value, on_delivery=delivered)
            task_id = task_ids[n % len(task_ids)]
            good = n % 2 == 0
            gid = f"{run}-g{n}"
            code = (problems.canonical if good else problems.wrong)[task_id]
            client.send(client.generation(task_id, code, generation_id=gid))
            expected[gid] = 1.0 if good else 0.0
            n += 1
            if n % 8 == 0:
                client.flush()
                assert producer.flush(30) == 0
        client.flush()
        assert producer.flush(30) == 0

        rewards = Reader(kafka_config, env.name("rewards"))
        letters = Reader(kafka_config, env.name("dlq"))
        try:
            got = client.wait(list(expected), timeout_s=400)
            assert {g: r.reward for g, r in got.items()} == expected
            want = Counter(
                (component, topic, partition, offset)
                for (topic, partition, offset), role in poisoned.items()
                for component in READERS[role]
            )
            deadline = time.monotonic() + 120
            while len(letters.values) < sum(want.values()) and time.monotonic() < deadline:
                letters.poll()
            letters.settle()
            dead = [decode(v, DeadLetter) for v in letters.values]
            seen = Counter((d.component, d.source_topic, d.source_partition, d.source_offset) for d in dead)
            assert seen == want, f"missing {want - seen}, unexpected {seen - want}"
            assert all(d.error for d in dead)
            assert {d.error_type for d in dead} <= {"DecodeError", "EmptyValueError"}
            nested = [d for d in dead if d.payload().startswith(b"[[[[[[[[")]
            assert nested
            assert all("nested deeper than" in d.error for d in nested if len(d.payload()) > 1000)
            # exactly one reward per generation on the topic itself (the SDK would hide a duplicate)
            rewards.settle()
            ours = []
            for value in rewards.values:
                try:
                    ours.append(decode(value, RewardEvent))
                except DecodeError:
                    continue  # the poison we put there
            counts = Counter(r.generation_id for r in ours if r.run_id == run)
            assert counts == Counter(set(expected)), "one reward per generation"
            assert client.stats["undecodable"] >= len(poison_for("rewards"))
            # nobody restarted: the processes started with the pipeline are all there is, and all are alive
            assert env.procs == started
            assert [p.poll() for p in env.procs] == [None] * len(started), pipe.logs()
            # replay and explain read the same poisoned topics
            replayed = cli(["replay", "--run-id", run, "--json", "--replay-id", "poison"], pipe.worker_env, 600)
            assert replayed.returncode == 0, replayed.stderr[-4000:]
            report = orjson.loads(replayed.stdout)
            assert report["replayed"] == len(expected)
            assert report["counts"]["same"] == len(expected), report["counts"]
            target = f"{run}-g0"
            story = cli(["explain", target, "--json"], pipe.worker_env, 300)
            assert story.returncode == 0, story.stderr[-4000:]
            assert orjson.loads(story.stdout)["reward"]["reward"] == 1.0
        finally:
            client.close()
            rewards.close()
            letters.close()
