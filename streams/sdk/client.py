"""The synchronous trainer client: batched publishing and exactly one reward back per generation.

Why this shape: a trainer publishes thousands of generations per step and needs each reward once, even when
it restarts from a checkpoint. Publishing goes through one idempotent, compressed, batching producer (broker
retries never duplicate a generation). Rewards are read by one background consumer that owns every
partition of the rewards topic under a consumer group per trainer/run, so a restarted trainer continues
from its committed offsets. Commits only cover rewards already handed to the caller, and on start the
client re-reads a bounded window *below* the committed offsets to rebuild the set of generation ids it
already delivered: a duplicate reward on the topic (a processor crash between emit and mark) is dropped by
``generation_id`` instead of being counted twice.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import pydantic
from confluent_kafka import Consumer, KafkaException, Message, Producer, TopicPartition

from bus.access import AccessWatch
from bus.config import reader_config
from schemas.codec import decode, encode, one_line, problems_of
from schemas.errors import KafkaError, RewardstreamError, ValidationError
from schemas.events import GenerationEvent, RewardEvent
from schemas.registry_layout import is_version
from streams.sdk.config import RewardTimeoutError, SdkError, TrainerConfig, producer_config
from streams.sdk.validity import HeldOut, training_data

log = logging.getLogger("rewardstream.sdk")

#: A reward that will arrive: ``result(timeout)`` raises ``TimeoutError`` if it does not in time.
RewardFuture = Future[RewardEvent]

_POLL_S = 0.1
_POLL_EVERY = 1000  # serve delivery reports every this many produced messages


@dataclass
class _State:
    """What the consumer thread and callers share; guarded by ``cond``."""

    cond: threading.Condition = field(default_factory=threading.Condition)
    futures: dict[str, RewardFuture] = field(default_factory=dict)
    delivered: set[str] = field(default_factory=set)
    unclaimed: OrderedDict[str, tuple[RewardEvent, int, int]] = field(default_factory=OrderedDict)
    held: HeldOut = field(default_factory=HeldOut)  # invalid rewards no future claimed (``streams.sdk.validity``)
    consumed: dict[int, int] = field(default_factory=dict)  # partition -> next offset read
    rebuild_until: dict[int, int] = field(default_factory=dict)  # partition -> committed offset at start
    duplicates: int = 0
    undecodable: int = 0
    ready: bool = False
    error: BaseException | None = None


def _advance(st: _State, partition: int, offset: int) -> None:
    """Record that ``offset`` was read (never moving back: re-read dedup messages sit below the start)."""
    st.consumed[partition] = max(st.consumed.get(partition, 0), offset + 1)


class TrainerClient:
    """Publish generations and receive their rewards; use as a context manager (``close`` in ``finally``).

    Two ways to get rewards: ``publish`` returns a future per generation; ``send`` publishes without one and
    the reward comes out of ``rewards()`` (also every reward of this run not claimed by a future, e.g. those
    of generations published before a restart). ``wait`` gathers many with one deadline.
    """

    def __init__(self, config: TrainerConfig, *, consume: bool = True, start_timeout_s: float = 30.0) -> None:
        self.config = config
        self._state = _State()
        self._stop = threading.Event()
        self._delivery_errors: list[str] = []
        self._access = AccessWatch(config.kafka, log)  # a refused login or missing ACL: one line naming the fix
        self._since_poll = 0
        self._producer = Producer({**producer_config(config), "error_cb": self._access.on_error})
        self._producer_lock = threading.Lock()
        self._consumer: Consumer | None = None
        self._thread: threading.Thread | None = None
        # librdkafka can deadlock a synchronous commit against a consume() running in another thread:
        # every consumer call happens on the consumer thread; checkpoint() asks it through this queue.
        self._commit_requests: queue.Queue[Future[dict[int, int]]] = queue.Queue()
        if consume:
            try:
                self._start_consumer(start_timeout_s)
            except BaseException:
                self.close(flush_timeout_s=0)
                raise

    # ---- publishing -------------------------------------------------------------------------------------

    def generation(
        self, task_id: str, code: str, *, generation_id: str | None = None, **fields: Any
    ) -> GenerationEvent:
        """A GenerationEvent of this run (one-shot: episode id = generation id unless given)."""
        gid = generation_id or uuid.uuid4().hex
        fields.setdefault("episode_id", gid)
        fields.setdefault("policy_version", self.config.policy_version)
        try:
            return GenerationEvent(generation_id=gid, run_id=self.config.run_id, task_id=task_id, code=code, **fields)
        except pydantic.ValidationError as exc:
            raise ValidationError(f"bad generation {gid!r}: {one_line(problems_of(exc), 'event')}") from None

    def pinned(self, event: GenerationEvent) -> GenerationEvent:
        """``event`` pinned to its task's latest version now, unless it names one or the version cannot be told
        (``TrainerConfig.task_versions``): what ``send`` publishes."""
        resolve = self.config.task_versions
        if event.task_version is not None or resolve is None:
            return event
        version = resolve(event.task_id)
        if version is None:
            return event
        if not is_version(version):
            raise ValidationError(f"task_versions gave {version!r} for {event.task_id}: not a task version")
        return event.model_copy(update={"task_version": version})

    def send(self, event: GenerationEvent) -> None:
        """Queue one generation for publishing (batched), pinned to its task's latest version if it names none;
        its reward comes out of ``rewards()``."""
        event = self.pinned(event)
        value, key = encode(event), event.key()
        with self._producer_lock:
            while True:
                try:
                    self._producer.produce(
                        self.config.generations_topic, value=value, key=key, on_delivery=self._on_delivery
                    )
                    break
                except BufferError:
                    self._producer.poll(_POLL_S)  # local queue full: let batches go out
            self._since_poll += 1
            if self._since_poll >= _POLL_EVERY:
                self._since_poll = 0
                self._producer.poll(0)

    def send_many(self, events: Iterable[GenerationEvent]) -> int:
        """``send`` each; returns how many were queued."""
        n = 0
        for event in events:
            self.send(event)
            n += 1
        return n

    def publish(self, event: GenerationEvent) -> RewardFuture:
        """Queue one generation and return the future of its reward (registered before it can arrive)."""
        future = self.future_for(event.generation_id)
        self.send(event)
        return future

    def publish_many(self, events: Iterable[GenerationEvent]) -> list[RewardFuture]:
        """``publish`` each, in order."""
        return [self.publish(event) for event in events]

    def flush(self, timeout_s: float = 30.0) -> None:
        """Block until everything queued is acknowledged by the brokers; raise on any failed delivery."""
        with self._producer_lock:
            remaining = self._producer.flush(timeout_s)
        if self._delivery_errors:
            first, self._delivery_errors = self._delivery_errors[0], []
            raise SdkError(first)
        if remaining:  # a refused login is why, if there was one
            unacked = f"{remaining} generation(s) not acknowledged by Kafka within {timeout_s:g}s"
            raise SdkError(self._access.line or unacked)

    def _on_delivery(self, err: object, _msg: Message) -> None:
        if err is not None and len(self._delivery_errors) < 100:
            to = self.config.generations_topic
            self._delivery_errors.append(self._access.refused(err, "write", to) or f"publishing to {to} failed: {err}")

    # ---- rewards ----------------------------------------------------------------------------------------

    def future_for(self, generation_id: str) -> RewardFuture:
        """The future of a generation's reward, e.g. one published before a restart; at most one per id."""
        st = self._state
        with st.cond:
            self._raise_if_failed()
            existing = st.futures.get(generation_id)
            if existing is not None:
                return existing
            future: RewardFuture = Future()
            future.set_running_or_notify_cancel()
            ready = st.unclaimed.pop(generation_id, None) or st.held.rewards.pop(generation_id, None)
            if ready is not None:
                st.delivered.add(generation_id)
                future.set_result(ready[0] if isinstance(ready, tuple) else ready)
                return future
            if generation_id in st.delivered:
                raise SdkError(f"the reward of {generation_id} was already delivered to this trainer")
            st.futures[generation_id] = future
            return future

    def wait(self, generation_ids: Iterable[str], timeout_s: float) -> dict[str, RewardEvent]:
        """The reward of each id, waiting at most ``timeout_s`` in all; RewardTimeoutError names what is missing."""
        futures = {gid: self.future_for(gid) for gid in generation_ids}
        deadline = time.monotonic() + timeout_s
        out: dict[str, RewardEvent] = {}
        for gid, future in futures.items():
            try:
                out[gid] = future.result(timeout=max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                break
        if len(out) < len(futures):
            missing = [gid for gid, f in futures.items() if not f.done()]
            raise RewardTimeoutError(missing, timeout_s)
        return out

    def rewards(self, timeout_s: float | None = None, limit: int | None = None) -> Iterator[RewardEvent]:
        """Rewards of this run not claimed by a future, in arrival order, each once: training data only (an
        invalid reward, e.g. a canary's, waits in ``held_out()``).

        ``timeout_s`` bounds the wait for the *next* reward (RewardTimeoutError when it passes); ``limit`` stops
        after that many.
        """
        yielded = 0
        st = self._state
        while limit is None or yielded < limit:
            deadline = None if timeout_s is None else time.monotonic() + timeout_s
            with st.cond:
                while not st.unclaimed:
                    self._raise_if_failed()
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        raise RewardTimeoutError([f"<next reward after {yielded}>"], timeout_s or 0.0)
                    st.cond.wait(timeout=_POLL_S if left is None else min(left, _POLL_S))
                gid, (reward, _p, _o) = st.unclaimed.popitem(last=False)
                st.delivered.add(gid)
            yielded += 1
            yield reward

    def held_out(self) -> list[RewardEvent]:
        """Invalid rewards of this run no future claimed (canaries', the infrastructure's), oldest first, each once;
        never in ``rewards()``. Not re-offered after a restart: they are not training data."""
        st = self._state
        with st.cond:
            taken = st.held.take()
            st.delivered.update(r.generation_id for r in taken)
            return taken

    def checkpoint(self, timeout_s: float = 30.0) -> dict[int, int]:
        """Commit (synchronously) that every reward handed out so far is consumed; returns partition->offset.

        Call it when the trainer saves its own checkpoint: after a restart from that checkpoint, exactly
        the rewards handed out after it are delivered again, and none before it.
        """
        if self._thread is None or not self._thread.is_alive():
            return self._commit_now()
        request: Future[dict[int, int]] = Future()
        self._commit_requests.put(request)
        try:
            return request.result(timeout=timeout_s)
        except TimeoutError as exc:
            raise KafkaError(f"commit of {self.config.group_id} did not finish within {timeout_s:g}s") from exc

    def _commit_now(self) -> dict[int, int]:
        offsets = self._positions()
        if offsets and self._consumer is not None:
            tps = [TopicPartition(self.config.rewards_topic, p, o) for p, o in offsets.items()]
            try:
                self._consumer.commit(offsets=tps, asynchronous=False)
            except KafkaException as exc:
                raise KafkaError(f"commit of {self.config.group_id} failed: {exc}") from exc
        return offsets

    def _serve_commits(self) -> None:
        while True:
            try:
                request = self._commit_requests.get_nowait()
            except queue.Empty:
                return
            try:
                request.set_result(self._commit_now())
            except RewardstreamError as exc:
                request.set_exception(exc)

    @property
    def stats(self) -> dict[str, int]:
        """Counters for dashboards and tests."""
        st = self._state
        with st.cond:
            return {
                "delivered": len(st.delivered),
                "pending": len(st.futures),
                "unclaimed": len(st.unclaimed),
                "duplicates_dropped": st.duplicates,
                "undecodable": st.undecodable,
                "held_out": len(st.held.rewards),
                "invalid": st.held.invalid,
                "canary_hits": st.held.canary_hits,
            }

    def _positions(self) -> dict[int, int]:
        """Per partition, the first offset not yet handed to the caller (what a commit may cover)."""
        st = self._state
        with st.cond:
            positions = dict(st.consumed)
            for _reward, partition, offset in st.unclaimed.values():
                positions[partition] = min(positions.get(partition, offset), offset)
            return positions

    def _raise_if_failed(self) -> None:
        error = self._state.error
        if isinstance(error, RewardstreamError):
            raise SdkError(str(error)) from error
        if error is not None:
            raise SdkError(f"reward consumer failed: {error}") from error

    # ---- the consumer thread ----------------------------------------------------------------------------

    def _start_consumer(self, timeout_s: float) -> None:
        # It assigns itself every partition and commits the trainer's checkpoints to its own group.
        reader = reader_config(self.config.kafka, self.config.group_id, **{"auto.offset.reset": "earliest"})
        self._consumer = Consumer({**reader, "error_cb": self._access.on_error})
        self._thread = threading.Thread(target=self._consume_loop, name="rewardstream-sdk-rewards", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        st = self._state
        with st.cond:
            while not st.ready and st.error is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise SdkError(f"could not read {self.config.rewards_topic} within {timeout_s:g}s")
                st.cond.wait(min(left, _POLL_S))
        self._raise_if_failed()

    def _assign_with_retries(self, consumer: Consumer, timeout_s: float = 20.0) -> None:
        """``_assign``, retrying broker errors a just-created topic gives (no leader yet) for a while."""
        started = time.monotonic()
        while True:
            try:
                self._assign(consumer)
                return
            except (KafkaException, SdkError) as exc:
                consumer.poll(0)  # serves the error callback: a refused login is told there, not in ``exc``
                topic, group = self.config.rewards_topic, self.config.group_id
                if line := self._access.line or self._access.refused(exc, "read", topic, group):
                    raise SdkError(line) from exc  # refused: retrying cannot help
                waited = time.monotonic() - started
                if waited > (3.0 if isinstance(exc, SdkError) else timeout_s) or self._stop.is_set():
                    if isinstance(exc, SdkError):
                        raise
                    raise KafkaError(f"cannot read {self.config.rewards_topic}: {exc.args[0]}") from exc
                time.sleep(0.2)

    def _assign(self, consumer: Consumer) -> None:
        """Own every partition; start below the committed offsets to rebuild the delivered-id set."""
        topic = self.config.rewards_topic
        meta = consumer.list_topics(topic, timeout=10)
        info = meta.topics.get(topic)
        if info is not None and (denied := self._access.refused(info.error, "read", topic)):
            raise SdkError(denied)
        if info is None or info.error is not None or not info.partitions:
            raise SdkError(f"rewards topic {topic} does not exist (run `rewardstream topics create`)")
        tps = [TopicPartition(topic, p) for p in sorted(info.partitions)]
        committed = consumer.committed(tps, timeout=10)
        start: list[TopicPartition] = []
        fresh: list[TopicPartition] = []
        st = self._state
        for tp in committed:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, tp.partition), timeout=10)
            if tp.offset >= 0:
                st.rebuild_until[tp.partition] = tp.offset
                begin = max(low, tp.offset - self.config.dedup_lookback)
            else:
                # A new trainer: its rewards can only follow its first publish, so start at the end (no scan
                # of other runs' history) and commit that at once, so a crash before the first checkpoint
                # still resumes from here.
                begin = high
                fresh.append(TopicPartition(topic, tp.partition, high))
            st.consumed[tp.partition] = max(begin, st.rebuild_until.get(tp.partition, begin))
            start.append(TopicPartition(topic, tp.partition, begin))
        consumer.assign(start)
        if fresh:
            consumer.commit(offsets=fresh, asynchronous=False)

    def _consume_loop(self) -> None:
        consumer = self._consumer
        assert consumer is not None  # noqa: S101 - set before the thread starts
        st = self._state
        try:
            self._assign_with_retries(consumer)
            with st.cond:
                st.ready = True
                st.cond.notify_all()
            last_commit = time.monotonic()
            while not self._stop.is_set():
                for msg in consumer.consume(1000, timeout=_POLL_S):
                    if msg.error() is None:
                        self._handle_guarded(msg)
                    else:
                        log.warning("rewards consumer: %s", msg.error())
                self._serve_commits()
                if self.config.auto_commit and time.monotonic() - last_commit >= self.config.commit_interval_s:
                    last_commit = time.monotonic()
                    self._commit_async(consumer)
            self._serve_commits()
        except RewardstreamError as exc:
            self._fail(exc)  # a one-line reason (e.g. missing topic) surfaces on the caller's side
        except BaseException as exc:
            log.exception("rewards consumer stopped")
            self._fail(exc)

    def _commit_async(self, consumer: Consumer) -> None:
        offsets = self._positions()
        if offsets:
            tps = [TopicPartition(self.config.rewards_topic, p, o) for p, o in offsets.items()]
            try:
                consumer.commit(offsets=tps, asynchronous=True)
            except KafkaException as exc:
                log.warning("auto-commit failed (retried next interval): %s", exc)

    def _handle_guarded(self, msg: Message) -> None:
        """One reward message; a failure handling it (a bug) skips that message, never the trainer's rewards."""
        try:
            self._handle(msg)
        except Exception:
            partition, offset = msg.partition() or 0, msg.offset() or 0
            log.exception(
                "skipping the reward message at %s[%d]@%d: handling it failed", msg.topic(), partition, offset
            )
            with self._state.cond:
                self._state.undecodable += 1
                _advance(self._state, partition, offset)

    def _handle(self, msg: Message) -> None:
        partition, offset = msg.partition() or 0, msg.offset() or 0
        st = self._state
        try:
            reward = decode(msg.value() or b"", RewardEvent)
        except ValidationError as exc:
            log.warning("undecodable reward at %s[%d]@%d: %s", msg.topic(), partition, offset, exc)
            with st.cond:
                st.undecodable += 1
                _advance(st, partition, offset)
            return
        future: RewardFuture | None = None
        with st.cond:
            _advance(st, partition, offset)
            if reward.run_id != self.config.run_id:
                return
            gid = reward.generation_id
            if offset < st.rebuild_until.get(partition, -1):
                st.delivered.add(gid)  # handed out before the restart
                return
            if gid in st.delivered or gid in st.unclaimed or gid in st.held.rewards:
                st.duplicates += 1
                return
            st.held.count(reward)
            future = st.futures.pop(gid, None)
            if future is None and not training_data(reward):
                st.held.add(reward)
            elif future is None:
                st.unclaimed[gid] = (reward, partition, offset)
                st.cond.notify_all()
            else:
                st.delivered.add(gid)
        if future is not None:
            future.set_result(reward)

    def _fail(self, exc: BaseException) -> None:
        st = self._state
        with st.cond:
            st.error = exc
            futures, st.futures = list(st.futures.values()), {}
            st.cond.notify_all()
        for future in futures:
            future.set_exception(SdkError(f"reward consumer failed: {exc}"))

    # ---- lifecycle --------------------------------------------------------------------------------------

    def close(self, flush_timeout_s: float = 30.0) -> None:
        """Flush what was published, commit what was handed out (auto_commit), stop the consumer."""
        try:
            with self._producer_lock:
                self._producer.flush(flush_timeout_s)
        finally:
            self._stop.set()
            if self._thread is not None:
                self._thread.join(timeout=30)
            if self._consumer is not None:
                try:
                    if self.config.auto_commit and self._state.error is None:
                        self.checkpoint()
                finally:
                    self._consumer.close()
                    self._consumer = None
            self._fail(SdkError("client closed"))

    def __enter__(self) -> TrainerClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
