"""The Kafka floor of one reward processor: how many rewards/s a Python process reaches on this machine's broker
when it does everything the Kafka engine does with Kafka and nothing else, side by side with the real one.

Why: the reward processor's target (10,000 rewards/s) is a whole-process figure, and part of what a reward
costs is not the processor's code but its clients: reading three results read_committed, producing the reward
and its changelog marker, committing the input offsets in a transaction. The floor process keeps exactly that
(the engine's consumer and transactional producer configs, the range assignor, ``bus.transaction.Transaction``,
batches of up to ``EngineOptions.batch_max`` messages) and replaces the join with a count per key: the third
result of a generation produces a copy of a real reward's bytes and of its changelog record. No decoding, no
policy, no table. Whatever rate it reaches is a ceiling no processor code can pass on this machine.

    python -m benchmarks.capacity_floor [--rewards 20000] [--rounds 3]

Needs the local services (``rewardstream up``). Prints one JSON object: the floor's and the processor's
rewards/s and CPU per reward (user + system over the process's life, librdkafka's threads included), medians
of ``--rounds`` runs that alternate the two.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from statistics import median
from typing import Any

from benchmarks.capacity_ceilings import SteadyCpu, publish_results, reward_processor_rps
from benchmarks.capacity_kafka import Reader, bench_run
from bus.admin import ensure_topics
from bus.changelog import changelog_name, changelog_spec
from bus.transaction import Transaction
from schemas.settings import Settings
from schemas.signals import SIGNAL_TOPICS
from schemas.topics import catalog_for, topic_for
from streams.reward.clients import engine_clients
from streams.reward.kafka_engine import EngineOptions

#: How long a run may take before it counts as failed.
TIMEOUT_S = 600.0
#: Results a generation has (execution, verdict, judgement): the third one "decides" it.
PARTS = len(SIGNAL_TOPICS)


def sample_outputs() -> tuple[bytes, bytes]:
    """A real reward's bytes and its emitted marker's changelog bytes, as the processor writes them for the
    benchmark's generations (so the floor produces records of the real sizes)."""
    from benchmarks.profile_reward_path import messages, run  # the in-process path: no broker

    _spent, txn = run(messages(PARTS, 8), 1000)
    reward = next(value for topic, _key, value, _p in txn.produced if topic == "rewards" and value)
    marker = next(value for topic, _key, value, _p in txn.produced if topic == "changelog" and value)
    return reward, marker


def validation_us(n: int = 5000, rounds: int = 5) -> float:
    """CPU (us) to decode and validate one generation's three results with the codec, as the processor's first
    step does (``decode_verbatim`` against each contract model): the fastest of ``rounds``. With the floor's
    CPU, a lower bound of any processor that checks its inputs against the contracts."""
    from benchmarks.profile_reward_path import messages
    from schemas.codec import decode_verbatim
    from streams.reward.processor import INPUT_MODELS

    msgs = [(INPUT_MODELS[topic], value) for topic, _p, _key, value in messages(n, 8)]
    best = float("inf")
    for _ in range(rounds):
        started = time.process_time()
        for model, value in msgs:
            decode_verbatim(value, model)
        best = min(best, time.process_time() - started)
    return best / n * 1e6


def floor_process(reward: bytes, marker: bytes) -> None:
    """The floor's loop (a process of its own, started by ``floor_rps``): until SIGTERM."""
    settings = Settings()
    options = EngineOptions()
    specs = catalog_for(settings)
    inputs = [topic_for(role, specs).name for role in SIGNAL_TOPICS]
    rewards = topic_for("rewards", specs).name
    app_id = os.environ["RS_FLOOR_APP_ID"]
    changelog = changelog_name(app_id)
    ensure_topics([changelog_spec(app_id, topic_for("executions", specs))], settings.kafka_client_config())
    consumer, producer = engine_clients(settings.kafka_client_config(), app_id, options.transaction_timeout_ms)
    producer.init_transactions(30)
    txn = Transaction(producer, consumer, 30)
    stop = False

    def on_term(_signum: int, _frame: Any) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    consumer.subscribe(inputs)
    seen: dict[bytes, int] = {}
    while not stop:
        messages = consumer.consume(options.batch_max, timeout=options.poll_s)
        if not messages:
            continue
        txn.begin()
        for msg in messages:
            if msg.error() is not None:
                continue
            key = msg.key() or b""
            count = seen.get(key, 0) + 1
            seen[key] = count
            if count == PARTS:
                partition = msg.partition() or 0
                txn.produce(rewards, key, reward, partition=partition)
                txn.produce(changelog, key, marker, partition=partition)
            txn.offset(msg.topic() or "", msg.partition() or 0, (msg.offset() or 0) + 1)
        txn.commit()
    consumer.close()


def floor_rps(n: int, reward: bytes, marker: bytes) -> dict[str, Any]:
    """Rewards/s and CPU per reward of the floor process draining ``n`` generations' results (published as
    ``reward_processor_rps`` publishes them: each generation's three together)."""
    with bench_run("floor", 8) as run:
        publish_results(run, n)
        app_id = f"{run.settings.kafka.topic_prefix}floor-app"
        run.extra_topics.append(changelog_name(app_id))
        reader = Reader(run, run.topic("rewards"))
        env = {**os.environ, **run.env(), "RS_FLOOR_APP_ID": app_id}
        code = f"from benchmarks.capacity_floor import floor_process; floor_process({reward!r}, {marker!r})"
        proc = subprocess.Popen([sys.executable, "-c", code], env=env)
        spent = SteadyCpu(proc.pid)
        try:
            timed = reader.wait(n, TIMEOUT_S, alive=lambda: proc.poll() is None, on_first=spent.start)
            spent.stop()
        finally:
            reader.close()
            proc.terminate()
            proc.wait(60)
    return {"rewards": n, "rps": round(timed.rate(), 1), "cpu_us_per_reward": round(spent.whole_s / n * 1e6),
            **spent.per_output_us("reward", n)}  # fmt: skip


def median_or_none(values: list[float | None]) -> float | None:
    """The median of the runs that have the figure (a run too short has none)."""
    known = [v for v in values if v is not None]
    return median(known) if known else None


def load() -> float:
    return os.getloadavg()[0]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--rewards", type=int, default=20_000)
    p.add_argument("--rounds", type=int, default=3, help="alternating runs of each; medians are printed")
    args = p.parse_args(argv)
    reward, marker = sample_outputs()
    floor: list[dict[str, Any]] = []
    processor: list[dict[str, Any]] = []
    for _ in range(args.rounds):
        started = time.monotonic()
        floor.append({**floor_rps(args.rewards, reward, marker), "load": round(load(), 1)})
        processor.append({**reward_processor_rps(args.rewards), "load": round(load(), 1)})
        print(json.dumps({"floor": floor[-1], "processor": processor[-1],
                          "round_s": round(time.monotonic() - started, 1)}), file=sys.stderr)  # fmt: skip
    print(json.dumps({
        "rewards": args.rewards,
        "floor_rps": median(r["rps"] for r in floor),
        "floor_cpu_us_per_reward": median(r["cpu_us_per_reward"] for r in floor),
        "processor_rps": median(r["rps"] for r in processor),
        "processor_cpu_us_per_reward": median(r["cpu_us_per_reward"] for r in processor),
        **{f"{name}_{figure}": median_or_none([r[figure] for r in runs])
           for name, runs in (("floor", floor), ("processor", processor))
           for figure in ("steady_cpu_us_per_reward", "steady_main_thread_us_per_reward")},
        "validation_us_per_reward": round(validation_us(), 1),
        "reward_bytes": len(reward),
        "marker_bytes": len(marker),
    }))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
