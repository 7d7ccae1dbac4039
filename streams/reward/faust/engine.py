"""The Faust glue: one agent over the co-partitioned input topics, one table, a deadline timer.

Why so thin: faust is untyped and its exactly_once mode has open bugs, so everything that decides anything
lives in ``processor``/``join``/``policy`` (typed, unit-tested); this module only adapts Faust's table and
topics to the processor's ports. Nothing happens at import time; ``build_app`` makes a fresh app.

The app runs with at_least_once (input offsets are committed only after the producer flushed the table
changelog and the rewards) and a memory store recovered from the changelog topic on start; exactly once
comes from ``emit_then_mark`` between the processor and the table and topics.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import signal
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bus.changelog import TABLE_NAME
from schemas.errors import HandlerCrashError
from schemas.settings import Settings
from schemas.signals import SIGNAL_TOPICS
from schemas.topics import catalog_for, topic_for
from streams.reward.faust.emit_then_mark import EmitThenMark
from streams.reward.faust.join import FaustJoin
from streams.reward.faust.read_committed import isolation_level, read_committed_app_class
from streams.reward.liveness import WriterLiveness, settled_inputs
from streams.reward.policy import Policy
from streams.reward.processor import RESTART_EXIT_CODE, InputEnds, RewardProcessor, Topics
from streams.reward.rewards_log import read_partition

log = logging.getLogger("rewardstream.rewards")


@dataclass(frozen=True, slots=True)
class AppOptions:
    """Per-process knobs of the reward app (the rest comes from Settings)."""

    app_id: str = "rewardstream-rewards"
    data_dir: Path = Path("rewards-data")
    tick_s: float = 0.5
    session_timeout_s: float = 10.0
    commit_interval_s: float = 1.0
    #: Fault injection for crash tests: SIGKILL this process right after the Nth reward is acknowledged and
    #: before it is marked emitted, the worst moment for duplicates. None in production.
    kill_after_rewards: int | None = None
    #: Finished generations are forgotten after this long (bounds the table; later parts would start anew).
    retention_s: float = 7 * 86_400.0
    #: Exit (code 70) when an input with waiting messages makes no progress for this long: Faust can stall
    #: after a rebalance, and a restart under a supervisor is safe (state and rewards are exactly once). 0: off.
    stall_timeout_s: float = 60.0


class _TableStore:
    """The processor's StateStore over a Faust table with raw bytes keys and values."""

    def __init__(self, table: Any) -> None:
        self._table = table

    def get(self, key: str) -> bytes | None:
        value = self._table.data.get(key.encode())
        return value if isinstance(value, bytes) else None

    async def put(self, partition: int, key: str, value: bytes) -> None:
        raw = key.encode()
        self._table.data[raw] = value
        await self._send(partition, raw, value)

    async def delete(self, partition: int, key: str) -> None:
        raw = key.encode()
        self._table.data.pop(raw, None)
        await self._send(partition, raw, None)  # tombstone: compacted away

    async def _send(self, partition: int, key: bytes, value: bytes | None) -> None:
        """Hand the changelog record straight to the Kafka client (explicit partition: valid outside an event).

        Not Faust's ``send_soon``: its buffer is flushed best-effort (it gives up after 0.1 s) before offsets
        are committed, so a SIGKILL could lose table writes whose inputs were already committed. Records in
        the client are flushed for certain before every commit.
        """
        pending = await self._table.changelog_topic.send(
            key=key, value=value, partition=partition, value_serializer="raw"
        )
        pending.add_done_callback(_exit_if_failed("table changelog write"))

    def items(self) -> Iterable[tuple[str, bytes]]:
        for key, value in list(self._table.data.items()):
            if isinstance(key, bytes) and isinstance(value, bytes):
                yield key.decode(), value


class _FaustOutputs:
    """``emit_then_mark.AckedOutputs`` over Faust topics (and a plain consumer for the rewards tail)."""

    def __init__(
        self,
        settings: Settings,
        options: AppOptions,
        *,
        inputs: list[str],
        rewards: Any,
        dlq: Any,
        logs: Any,
        liveness: WriterLiveness,
    ) -> None:
        self._liveness = liveness
        self._kill_after = options.kill_after_rewards
        self._sent = 0
        self._client_config = settings.kafka_client_config()
        self._group_id = options.app_id
        self._inputs = inputs
        self._rewards = rewards
        self._dlq = dlq
        self._logs = logs

    async def send_reward(self, partition: int, key: bytes, value: bytes) -> int:
        pending = await self._rewards.send(key=key, value=value, partition=partition)
        metadata = await pending
        self._sent += 1
        if self._kill_after is not None and self._sent >= self._kill_after:
            log.warning("fault injection: SIGKILL after reward %d, before marking it", self._sent)
            os.kill(os.getpid(), signal.SIGKILL)
        return int(metadata.offset)

    async def send_dlq(self, key: bytes | None, value: bytes) -> None:
        pending = await self._dlq.send(key=key, value=value)
        pending.add_done_callback(_exit_if_failed("dead letter"))

    async def send_log(self, key: bytes, value: bytes) -> None:
        pending = await self._logs.send(key=key, value=value)
        pending.add_done_callback(_exit_if_failed("log record"))

    async def read_rewards(self, partition: int, start: int) -> tuple[list[tuple[int, bytes]], int]:
        return await asyncio.to_thread(
            read_partition, self._client_config, self._rewards.get_topic_name(), partition, start
        )

    async def caught_up(self, partitions: set[int], processed: Mapping[tuple[str, int], int]) -> InputEnds:
        return await asyncio.to_thread(
            settled_inputs, self._liveness, self._group_id, self._inputs, partitions, processed
        )


def build_app(settings: Settings, policy: Policy, options: AppOptions) -> tuple[Any, RewardProcessor]:
    """A configured Faust app and the processor it drives (not started)."""
    specs = catalog_for(settings)
    names = {role: topic_for(role, specs).name for role in SIGNAL_TOPICS}
    app = read_committed_app_class()(
        options.app_id,
        broker="kafka://" + ";".join(settings.kafka.broker_addresses()),
        store="memory://",
        datadir=str(options.data_dir),
        processing_guarantee="at_least_once",
        topic_partitions=settings.kafka.topic_partitions,
        topic_replication_factor=settings.kafka.replication_factor(),
        table_standby_replicas=0,
        topic_disable_leader=True,
        web_enabled=False,
        autodiscover=False,
        consumer_auto_offset_reset="earliest",
        broker_commit_interval=options.commit_interval_s,
        broker_session_timeout=options.session_timeout_s,
        broker_heartbeat_interval=1.0,
        producer_acks=-1,
    )
    raw = {"key_serializer": "raw", "value_serializer": "raw"}
    source = app.topic(*names.values(), **raw)
    rewards = app.topic(topic_for("rewards", specs).name, **raw)
    dlq = app.topic(topic_for("dlq", specs).name, **raw)
    logs = app.topic(topic_for("logs", specs).name, **raw)
    table = app.Table(TABLE_NAME, partitions=settings.kafka.topic_partitions, key_type=bytes, value_type=bytes)
    table.key_serializer = table.value_serializer = "raw"  # before the changelog topic is made (lazily)
    marks = EmitThenMark(
        _TableStore(table),
        _FaustOutputs(
            settings,
            options,
            inputs=list(names.values()),
            rewards=rewards,
            dlq=dlq,
            logs=logs,
            liveness=WriterLiveness.for_settings(settings, policy.join.deadline_s),
        ),
    )
    processor = RewardProcessor(
        policy, Topics({name: role for role, name in names.items()}), marks, marks, retention_s=options.retention_s
    )
    _wire(app, source, FaustJoin(processor, marks), input_names=set(names.values()), options=options)
    return app, processor


def _ready(app: Any) -> bool:
    """Not rebalancing and the table fully recovered: only then is "pending" in the table the truth."""
    return not app.rebalancing and not app.in_recovery and bool(app.tables.recovery.completed.is_set())


def _owned(app: Any, input_names: set[str]) -> set[int]:
    return {tp.partition for tp in app.assignor.assigned_actives() if tp.topic in input_names}


def _exit(why: str) -> None:
    """Crash-only recovery: stop at once with RESTART_EXIT_CODE; the supervisor restarts the worker."""
    log.error(
        "%s: exiting (code %d) so the supervisor restarts this worker; nothing is lost or duplicated",
        why,
        RESTART_EXIT_CODE,
    )
    logging.shutdown()
    os._exit(RESTART_EXIT_CODE)


def _exit_if_failed(what: str) -> Callable[[asyncio.Future[Any]], None]:
    """A done-callback: a write the producer gave up on (after its own retries) stops the worker at once.

    Input offsets are committed after the producer flushed, whatever the outcome of each record; a failed
    table write must therefore never be followed by a commit. Crash-only: the restart re-reads the inputs.
    """

    def check(future: asyncio.Future[Any]) -> None:
        if not future.cancelled() and future.exception() is not None:
            _exit(f"{what} failed: {future.exception()!r}")

    return check


async def _handle_message(join: FaustJoin, message: Any, limit_s: float | None) -> None:
    """One input message; a crash is that message's (dead-lettered, the agent goes on), a hang the process's."""
    where = f"{message.topic}[{message.partition}]@{message.offset}"
    work = join.handle(
        message.topic,
        message.partition,
        message.offset,
        timestamp=float(message.timestamp or time.time()),
        key=message.key,
        value=message.value,
    )
    try:
        await asyncio.wait_for(work, limit_s)
    except TimeoutError:  # crash-only: a restart is safe (the input is re-read, rewards are de-duplicated)
        _exit(f"handling {where} hung")
    except Exception as exc:
        error = HandlerCrashError(f"handler crashed: {type(exc).__name__}: {exc}", topic=message.topic,
                                  partition=message.partition, offset=message.offset)  # fmt: skip
        try:
            await join.processor.dead_letter(message.topic, message.partition, message.offset, key=message.key,
                                        value=message.value, error=error, crash=exc)  # fmt: skip
        except Exception:
            log.exception("dead-lettering %s failed", where)
            _exit(f"dead-lettering {where} failed")


def _wire(
    app: Any,
    source: Any,
    join: FaustJoin,
    *,
    input_names: set[str],
    options: AppOptions,
) -> None:
    """The agent, the deadline timer, the stall watchdog and the rebalance hooks."""
    limit_s = max(2 * options.stall_timeout_s, 10.0) if options.stall_timeout_s > 0 else None

    async def join_agent(stream: Any) -> None:
        async for event in stream.events():
            await _handle_message(join, event.message, limit_s)

    async def deadlines() -> None:
        if not _ready(app):
            join.processor.note_waiting("rebalancing or recovering")
            return  # a half-recovered table could make an emitted generation look pending
        try:
            await asyncio.wait_for(join.tick(_owned(app, input_names)), limit_s)
        except TimeoutError:
            _exit(f"the deadline check hung ({join.doing})")
        except Exception:  # a failed check must not kill the timer: the next one retries
            log.exception("deadline check failed; retrying at the next tick")

    async def on_rebalance(_sender: Any, *_args: Any, **_kwargs: Any) -> None:
        join.marks.forget_partitions()
        join.processor.restart_progress_clock()

    async def on_assigned(_sender: Any, *_args: Any, **_kwargs: Any) -> None:
        log.info("partitions assigned; inputs read with isolation level %s", isolation_level(app))

    app.agent(source, name="reward-join")(join_agent)
    app.timer(options.tick_s)(deadlines)
    if options.stall_timeout_s > 0:
        app.timer(max(1.0, options.stall_timeout_s / 4))(_watchdog(app, join, input_names, options))
    app.on_partitions_assigned.connect(on_rebalance)
    app.on_partitions_assigned.connect(on_assigned)
    app.on_partitions_revoked.connect(on_rebalance)


def _watchdog(app: Any, join: FaustJoin, input_names: set[str], options: AppOptions) -> Callable[[], Awaitable[None]]:
    """Exit when an input with waiting messages makes no progress, or a rebalance/recovery never finishes.

    Both happen with Faust after a member dies (rebalance and recovery hangs); a restart fixes them.
    """
    recovery_limit_s = max(5 * options.stall_timeout_s, 30.0)
    not_ready_since: list[float] = []
    processor, marks = join.processor, join.marks

    async def watchdog() -> None:
        if not _ready(app):
            processor.restart_progress_clock()
            not_ready_since[:] = not_ready_since or [time.monotonic()]
            if time.monotonic() - not_ready_since[0] > recovery_limit_s:
                _exit(f"rebalance/recovery not finished after {recovery_limit_s:.0f}s")
            return
        not_ready_since.clear()
        owned = _owned(app, input_names)
        if not owned:
            processor.note_waiting("no input partitions assigned")
            return
        try:
            check = marks.caught_up(owned, dict(processor.processed))
            ends = await asyncio.wait_for(check, max(2 * options.stall_timeout_s, 10.0))
        except TimeoutError:
            _exit("the progress check hung")
        except Exception:
            log.exception("progress check failed; retrying")
            return
        # messages waiting, not a writer still at work (its input may be read to the end for minutes)
        backlog = [(t, p) for t in input_names for p in owned if (t, p) not in ends.read]
        if backlog:
            processor.note_waiting(f"inputs with messages waiting: {backlog}; now {join.doing}")
        stalled = join.stalled(backlog, options.stall_timeout_s)
        if stalled:
            _exit(f"no progress for {options.stall_timeout_s:.0f}s on {stalled} although messages are waiting")

    return watchdog


def run_worker(app: Any, loglevel: str = "info") -> None:
    """Run the app in this process until SIGTERM/SIGINT (Faust's worker owns the event loop).

    ``kill -USR1 <pid>`` makes the worker log every thread's and task's stack (mode's "cry"): what an SRE
    needs when a processor stops making progress.
    """
    faust: Any = importlib.import_module("faust")
    faust.Worker(app, loglevel=loglevel, quiet=True).execute_from_commandline()
