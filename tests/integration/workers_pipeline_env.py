"""What the workers-pipeline tests share: HumanEval generations, publishing them, reading results, checks."""

from __future__ import annotations

import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer, Message, TopicPartition

from bus.clients import make_consumer, make_producer
from schemas.events import GenerationEvent
from schemas.tasks import Task
from workers.tasks.humaneval import Problem


@dataclass(frozen=True)
class HumanEval:
    problems: list[Problem]
    tasks: dict[str, Task]
    registry_dir: Path


def wrong_code(problem: Problem) -> str:
    """A plausible-looking wrong answer: the signature and docstring, no solution."""
    return problem.prompt + "    raise NotImplementedError\n"


def generation(i: int, problem: Problem, code: str, *, episode: str | None = None, turn: int = 0) -> GenerationEvent:
    return GenerationEvent(
        generation_id=f"g{i}", episode_id=episode or f"g{i}", run_id="run-1", task_id=problem.task_id,
        policy_version="step-1", code=code, turn=turn,
    )  # fmt: skip


def publish(
    kafka_config: dict[str, str], topic: str, values: list[tuple[bytes | None, bytes]]
) -> list[tuple[int, int]]:
    """Produce in order; return each message's (partition, offset) from its delivery report."""
    producer = make_producer(kafka_config)
    offsets: list[tuple[int, int]] = [(-1, -1)] * len(values)

    def delivered(index: int) -> Callable[[object, Message], None]:
        def callback(err: object, msg: Message) -> None:
            assert err is None, err
            offsets[index] = (msg.partition() or 0, msg.offset() or 0)

        return callback

    for i, (key, value) in enumerate(values):
        producer.produce(topic, key=key, value=value, on_delivery=delivered(i))
        producer.poll(0)
    assert producer.flush(30) == 0
    return offsets


class Reader:
    """A read_committed consumer over result topics, from the beginning; keeps every message in order."""

    def __init__(self, kafka_config: dict[str, str], topics: list[str]) -> None:
        self.consumer: Consumer = make_consumer(kafka_config, f"reader-{uuid.uuid4().hex}")
        self.consumer.subscribe(topics)
        self.messages: dict[str, list[Message]] = defaultdict(list)

    def poll_until(self, done: Callable[[], bool], timeout_s: float, what: Callable[[], str]) -> None:
        deadline = time.monotonic() + timeout_s
        while not done():
            assert time.monotonic() < deadline, f"timed out waiting for {what()}"
            for msg in self.consumer.consume(500, timeout=0.2):
                if msg.error() is None:
                    self.messages[msg.topic() or "?"].append(msg)

    def at_end(self) -> bool:
        """Every assigned partition read up to its high watermark (= the last stable offset once no
        transaction is open, since this consumer is read_committed)."""
        assignment = self.consumer.assignment()
        if not assignment:
            return False
        for tp in self.consumer.position(assignment):
            _low, high = self.consumer.get_watermark_offsets(TopicPartition(tp.topic, tp.partition), timeout=10)
            if tp.offset < high and not (tp.offset < 0 and high == 0):
                return False
        return True

    def count(self, topic: str) -> int:
        return len(self.messages[topic])

    def close(self) -> None:
        self.consumer.close()
