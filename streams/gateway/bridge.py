"""The gateway's Kafka side: one producer, the tail of its replies partition, the tail of the rewards topic.

Why threads and futures: confluent-kafka is blocking; each tail runs in a daemon thread and settles the
asyncio futures of the requests waiting on it with ``call_soon_threadsafe``. A waiter is registered before its
request is produced, so a fast answer is never missed. Both tails read ``read_committed``: a reply or reward
of an aborted transaction never shows.

* ``Publisher``: idempotent; each ``send`` returns the future of its delivery. A delivery that fails or is
  not acknowledged within the gateway's Kafka timeout is ``KafkaUnavailableError`` (the app's 503).
* ``ReplyTail``: this replica's partition of the replies topic, from its end when the replica started;
  replies to other replicas that share the partition are skipped by ``reply_to``.
* ``RewardTail``: every partition of the rewards topic, from ``lookback`` messages below the end, into a
  bounded cache of the most recent rewards (their wire bytes, by ``generation_id``). Any replica answers a
  poll for a reward produced after it started (or within its look-back), whoever published the generation.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, Generic, TypeVar

import orjson
from confluent_kafka import Consumer, KafkaException, Message, Producer, TopicPartition

from bus.clients import consume_available, make_reader
from bus.config import producer_config
from schemas.codec import decode
from schemas.errors import KafkaError, RewardstreamError
from schemas.events import RewardEvent
from schemas.kafka_acls import GATEWAY_GROUP_PREFIX
from schemas.runs import RunReply

log = logging.getLogger("rewardstream.gateway")

T = TypeVar("T")
_POLL_S = 0.1
_RETRY_S = 1.0


class KafkaUnavailableError(KafkaError):
    """Kafka did not take or acknowledge a message in time (or was never reached): the app answers 503."""


def _settle(future: asyncio.Future[T], value: T | None, error: BaseException | None) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)  # type: ignore[arg-type]


class Publisher:
    """One idempotent producer for run requests and generations; a thread serves its delivery reports."""

    def __init__(self, kafka: Mapping[str, str], timeout_s: float) -> None:
        config: dict[str, Any] = dict(
            producer_config(kafka, **{"linger.ms": 2, "message.timeout.ms": max(1000, int(timeout_s * 1000))})
        )
        config["error_cb"] = self._on_error
        self._producer = Producer(config)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="gateway-producer", daemon=True)
        self._thread.start()

    def send(self, topic: str, key: bytes, value: bytes, partition: int = -1) -> asyncio.Future[None]:
        """Produce one message; the future settles when the broker acknowledged it (or it failed)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()

        def delivered(err: object, _msg: Message) -> None:
            error = None if err is None else KafkaUnavailableError(f"Kafka did not take the message: {err}")
            loop.call_soon_threadsafe(_settle, future, None, error)

        try:
            self._producer.produce(topic, value=value, key=key, partition=partition, on_delivery=delivered)
        except BufferError:
            future.set_exception(KafkaUnavailableError("the producer's queue is full: Kafka is not keeping up"))
        except KafkaException as exc:
            future.set_exception(KafkaUnavailableError(f"Kafka refused the message: {exc.args[0]}"))
        return future

    def _serve(self) -> None:
        while not self._stop.is_set():
            self._producer.poll(_POLL_S)

    def _on_error(self, err: object) -> None:
        log.warning("kafka producer: %s", err)

    def close(self, timeout_s: float = 5.0) -> None:
        """Send what is queued (up to ``timeout_s``), then stop serving reports."""
        self._producer.flush(timeout_s)
        self._stop.set()
        self._thread.join(timeout=5)


class _Waiters(Generic[T]):
    """Futures by key, each settled from a tail thread on its own event loop."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._futures: dict[str, list[asyncio.Future[T]]] = {}

    def add(self, key: str, future: asyncio.Future[T]) -> None:
        with self._lock:
            self._futures.setdefault(key, []).append(future)

    def remove(self, key: str, future: asyncio.Future[T]) -> None:
        with self._lock:
            found = self._futures.get(key)
            if found is not None and future in found:
                found.remove(future)
                if not found:
                    del self._futures[key]

    def settle(self, key: str, value: T) -> bool:
        with self._lock:
            futures = self._futures.pop(key, [])
        for future in futures:
            future.get_loop().call_soon_threadsafe(_settle, future, value, None)
        return bool(futures)

    def __len__(self) -> int:
        with self._lock:
            return sum(len(f) for f in self._futures.values())


class _Tail:
    """A reader thread: ``_start`` assigns (retried until Kafka answers), ``_handle`` takes each record."""

    name = "tail"

    def __init__(self, kafka: Mapping[str, str], group: str) -> None:
        self._kafka = kafka
        self._group = group
        self._stop = threading.Event()
        self.ready = threading.Event()
        self.problem: str | None = "not connected to Kafka yet"
        self.undecodable = 0
        self._thread = threading.Thread(target=self._run, name=f"gateway-{self.name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        overrides: dict[str, str | int | bool] = {"fetch.wait.max.ms": 50, "auto.offset.reset": "latest"}
        consumer = make_reader(self._kafka, self._group, **overrides)
        try:
            while not self._stop.is_set() and not self.ready.is_set():
                try:
                    self._start(consumer)
                    self.problem = None
                    self.ready.set()
                except (KafkaException, RewardstreamError) as exc:
                    self.problem = f"cannot read Kafka: {exc.args[0] if exc.args else exc}"
                    log.warning("%s: %s (retrying)", self.name, self.problem)
                    self._stop.wait(_RETRY_S)
            while not self._stop.is_set():
                for msg in consume_available(consumer, 500, _POLL_S):  # never waits for a full batch
                    if msg.error() is not None:
                        log.warning("%s: %s", self.name, msg.error())
                        continue
                    try:
                        self._handle(msg)
                    except Exception:  # one bad record must not stop the tail
                        self.undecodable += 1
                        log.exception("%s: skipping %s[%s]@%s", self.name, msg.topic(), msg.partition(), msg.offset())
        except Exception as exc:
            self.problem = f"{self.name} stopped: {exc}"
            log.exception("%s stopped", self.name)
        finally:
            consumer.close()

    def _start(self, consumer: Consumer) -> None:
        raise NotImplementedError

    def _handle(self, msg: Message) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)


class ReplyTail(_Tail):
    """This replica's partition of the replies topic, from its end at start; settles ``expect``ed replies."""

    name = "replies"

    def __init__(self, kafka: Mapping[str, str], topic: str, partition: int, instance_id: str) -> None:
        super().__init__(kafka, f"{GATEWAY_GROUP_PREFIX}{instance_id}")
        self.topic = topic
        self.partition = partition
        self.instance_id = instance_id
        self.waiters: _Waiters[RunReply] = _Waiters()
        self.strays = 0  # replies to this replica nobody waited for any more (late, after a 504)

    def expect(self, request_id: str) -> asyncio.Future[RunReply]:
        """The future of ``request_id``'s reply; register it before producing the request."""
        future: asyncio.Future[RunReply] = asyncio.get_running_loop().create_future()
        self.waiters.add(request_id, future)
        return future

    def forget(self, request_id: str, future: asyncio.Future[RunReply]) -> None:
        self.waiters.remove(request_id, future)

    def _start(self, consumer: Consumer) -> None:
        tp = TopicPartition(self.topic, self.partition)
        _low, high = consumer.get_watermark_offsets(tp, timeout=5, cached=False)
        consumer.assign([TopicPartition(self.topic, self.partition, high)])

    def _handle(self, msg: Message) -> None:
        reply = decode(msg.value() or b"", RunReply)
        if reply.reply_to != self.instance_id:
            return
        if not self.waiters.settle(reply.request_id, reply):
            self.strays += 1


class RewardTail(_Tail):
    """Every partition of the rewards topic into a bounded cache by generation id; settles waiters."""

    name = "rewards"

    def __init__(self, kafka: Mapping[str, str], topic: str, *, cache_size: int, lookback: int, group: str) -> None:
        super().__init__(kafka, group)
        self.topic = topic
        self.cache_size = cache_size
        self.lookback = lookback
        self.waiters: _Waiters[RewardEvent] = _Waiters()
        self._lock = threading.Lock()
        self._cache: OrderedDict[str, bytes] = OrderedDict()
        self.seen = 0

    def expect(self, generation_id: str) -> asyncio.Future[RewardEvent]:
        """The future of a generation's reward (already settled when the cache has it)."""
        future: asyncio.Future[RewardEvent] = asyncio.get_running_loop().create_future()
        self.waiters.add(generation_id, future)
        cached = self.get(generation_id)
        if cached is not None:
            self.waiters.remove(generation_id, future)
            future.set_result(cached)
        return future

    def forget(self, generation_id: str, future: asyncio.Future[RewardEvent]) -> None:
        self.waiters.remove(generation_id, future)

    def get(self, generation_id: str) -> RewardEvent | None:
        """The reward of ``generation_id`` if this replica has read it (and still keeps it)."""
        with self._lock:
            raw = self._cache.get(generation_id)
        return None if raw is None else decode(raw, RewardEvent)

    def _start(self, consumer: Consumer) -> None:
        meta = consumer.list_topics(self.topic, timeout=5)
        info = meta.topics.get(self.topic)
        if info is None or info.error is not None or not info.partitions:
            raise KafkaError(f"the rewards topic {self.topic} does not exist (run `rewardstream topics create`)")
        start = []
        for partition in sorted(info.partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(self.topic, partition), timeout=5, cached=False)
            start.append(TopicPartition(self.topic, partition, max(low, high - self.lookback)))
        consumer.assign(start)

    def _handle(self, msg: Message) -> None:
        raw = msg.value() or b""
        try:
            generation_id = orjson.loads(raw)["generation_id"]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            self.undecodable += 1
            return
        if not isinstance(generation_id, str):
            self.undecodable += 1
            return
        self.seen += 1
        with self._lock:
            if generation_id in self._cache:
                return  # a duplicate reward (a processor crash between emit and mark): the first one stands
            self._cache[generation_id] = raw
            if len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        if len(self.waiters):
            self.waiters.settle(generation_id, decode(raw, RewardEvent))
