"""SDK publish rate (batched, lz4, idempotent) vs a naive produce-and-flush per message, one process.

    .venv/bin/python benchmarks/bench_sdk.py [--generations 100000] [--naive 2000] [--repeats 3]
                                             [--compression lz4|zstd] [--code-bytes 600]

Both sides publish the same pre-built GenerationEvents (HumanEval-sized code) to a fresh 6-partition topic
on the real local Kafka, with the same encode step and an idempotent ``acks=all`` producer; the naive side
calls ``flush()`` after every ``produce`` (what a trainer that wants each send confirmed writes). The SDK
rate is measured up to its final ``flush()`` (every message acknowledged). A third row also builds each
event with ``client.generation`` (pydantic validation included). Runs alternate so load drift on a shared
machine hits both; medians are reported with the ratio. Target: >= 20,000 generations/s from one process.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Callable

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from schemas.codec import encode
from schemas.events import GenerationEvent
from schemas.settings import Settings
from streams.sdk import TrainerClient, TrainerConfig

CODE = (
    "def has_close_elements(numbers, threshold):\n"
    '    """Check if in given list of numbers, are any two numbers closer to each other than threshold."""\n'
    "    for idx, elem in enumerate(numbers):\n"
    "        for idx2, elem2 in enumerate(numbers):\n"
    "            if idx != idx2:\n"
    "                distance = abs(elem - elem2)\n"
    "                if distance < threshold:\n"
    "                    return True\n"
    "    return False\n"
)


def events(n: int, run_id: str, code: str) -> list[GenerationEvent]:
    return [
        GenerationEvent(
            generation_id=f"{run_id}-{i}", episode_id=f"{run_id}-{i}", run_id=run_id, task_id="HumanEval/0",
            policy_version="bench", code=code, sample_index=i % 16,
        )
        for i in range(n)
    ]  # fmt: skip


def naive(kafka: dict[str, str], topic: str, batch: list[GenerationEvent]) -> float:
    producer = Producer({**kafka, "enable.idempotence": True, "acks": "all", "log_level": 3})
    started = time.perf_counter()
    for event in batch:
        producer.produce(topic, value=encode(event), key=event.key())
        producer.flush(30)
    return len(batch) / (time.perf_counter() - started)


def sdk(config: TrainerConfig, batch: list[GenerationEvent]) -> float:
    client = TrainerClient(config, consume=False)
    try:
        started = time.perf_counter()
        client.send_many(batch)
        client.flush(120)
        return len(batch) / (time.perf_counter() - started)
    finally:
        client.close()


def sdk_building(config: TrainerConfig, n: int, code: str) -> float:
    client = TrainerClient(config, consume=False)
    try:
        started = time.perf_counter()
        for i in range(n):
            client.send(client.generation("HumanEval/0", code, generation_id=f"b{i}", sample_index=i % 16))
        client.flush(120)
        return n / (time.perf_counter() - started)
    finally:
        client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--generations", type=int, default=100_000)
    parser.add_argument("--naive", type=int, default=2000, help="messages per naive run (it is slow)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--compression", choices=("lz4", "zstd"), default="lz4")
    parser.add_argument("--code-bytes", type=int, default=len(CODE))
    args = parser.parse_args()

    settings = Settings()
    kafka = settings.kafka_client_config()
    topic = f"bench-sdk-{uuid.uuid4().hex[:8]}.generations"
    admin = AdminClient({**kafka})
    admin.create_topics([NewTopic(topic, num_partitions=6, replication_factor=1)])[topic].result(timeout=30)
    code = (CODE * (args.code_bytes // len(CODE) + 1))[: args.code_bytes]
    config = TrainerConfig(
        kafka=kafka, generations_topic=topic, rewards_topic="unused", run_id="bench", compression=args.compression
    )
    batch = events(args.generations, "bench", code)
    small = batch[: args.naive]
    rates: dict[str, list[float]] = {"naive produce+flush": [], "SDK batched": [], "SDK batched + build events": []}
    runs: list[tuple[str, Callable[[], float]]] = [
        ("naive produce+flush", lambda: naive(kafka, topic, small)),
        ("SDK batched", lambda: sdk(config, batch)),
        ("SDK batched + build events", lambda: sdk_building(config, args.generations, code)),
    ]
    try:
        for _ in range(args.repeats):
            for name, run in runs:
                rates[name].append(run())
    finally:
        admin.delete_topics([topic])[topic].result(timeout=30)

    print(
        f"\nSDK publish benchmark: {args.generations} generations (SDK) / {args.naive} (naive), "
        f"{args.code_bytes}-byte code, {args.compression}, 6 partitions, {args.repeats} runs each, one process"
    )
    print(f"{'mode':<28} {'median gen/s':>14} {'min':>12} {'max':>12}")
    for name, values in rates.items():
        print(f"{name:<28} {statistics.median(values):>14,.0f} {min(values):>12,.0f} {max(values):>12,.0f}")
    base = statistics.median(rates["naive produce+flush"])
    fast = statistics.median(rates["SDK batched"])
    print(
        f"ratio SDK batched / naive: {fast / base:,.0f}x; "
        f"target >= 20,000 gen/s: {'met' if fast >= 20_000 else 'MISSED'}"
    )


if __name__ == "__main__":
    main()
