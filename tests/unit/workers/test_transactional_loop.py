"""The transactional worker loop against in-memory fakes of the consumer and producer (no Kafka).

What is pinned here: per-episode order, commit of the contiguous finished prefix only (with its results in
the same transaction), dead letters with the source coordinates, backpressure by pausing, drain on stop,
retries of failing handlers, and abort + rewind when a transaction fails.
"""

from __future__ import annotations

import itertools
import threading
import time

import pytest

from bus.crash_guard import Mark
from schemas.codec import decode, encode
from schemas.events import DeadLetter, GenerationEvent, LogRecord
from tests.unit.workers.loop_fakes import TOPIC, Recorder, event, make_worker, messages, run_until
from workers import committer
from workers.handler import Done, InfrastructureError, InvalidEventError, Outcome, Output, Source
from workers.loop_config import WorkerConfig


def test_turns_of_one_episode_run_in_order_and_episodes_in_parallel() -> None:
    values = [(f"ep{e}".encode(), encode(event(f"e{e}t{t}", f"ep{e}", t))) for t in range(3) for e in range(2)]
    handler = Recorder({f"e{e}t{t}": 0.03 for e in range(2) for t in range(3)})
    worker, consumer, producer, stop = make_worker({0: messages(0, values)}, handler, concurrency=4)
    run_until(worker, stop, lambda: len(producer.results()) == 6)
    when = {(kind, gen): at for kind, gen, at in handler.events}
    for e in range(2):
        for t in range(2):
            assert when[("end", f"e{e}t{t}")] <= when[("start", f"e{e}t{t + 1}")], "turn started before the previous"
    assert when[("start", "e1t0")] < when[("end", "e0t0")], "different episodes should overlap"
    assert [v for _, _, v in producer.results()] == [f"e{e}t{t}".encode() for t in range(3) for e in range(2)]
    assert consumer.committed_offsets == {0: 6}


def test_only_the_finished_prefix_is_committed_with_its_results() -> None:
    values = [(f"g{i}".encode(), encode(event(f"g{i}"))) for i in range(4)]
    handler = Recorder({"g0": 0.3})
    worker, consumer, producer, stop = make_worker({0: messages(0, values)}, handler, concurrency=4)
    run_until(worker, stop, lambda: consumer.committed_offsets.get(0) == 4)
    # g1..g3 finished long before g0 but are committed (and produced) only together with it.
    assert producer.transactions[0][1] == {0: 4}
    assert [v for _, _, v in producer.results()] == [b"g0", b"g1", b"g2", b"g3"]


def test_results_carry_their_generations_timestamp() -> None:
    """The reward processor's deadlines run in generation time: results inherit the input's timestamp."""
    values = [(f"g{i}".encode(), encode(event(f"g{i}"))) for i in range(3)]
    worker, consumer, producer, stop = make_worker({0: messages(0, values)}, Recorder({}), concurrency=2)
    run_until(worker, stop, lambda: consumer.committed_offsets.get(0) == 3)
    assert [producer.timestamps[v] for _, _, v in producer.results()] == [1_700_000_000_000 + i for i in range(3)]


def test_undecodable_and_invalid_events_become_dead_letters_with_their_source() -> None:
    class Picky(Recorder):
        def handle(self, ev: GenerationEvent, source: Source) -> Outcome:
            if ev.generation_id == "bad":
                raise InvalidEventError("no task 'T/1' in the registry")
            return super().handle(ev, source)

    values = [(b"a", encode(event("ok1"))), (b"b", b"{not json"), (b"c", None), (b"d", encode(event("bad"))),
              (b"e", encode(event("ok2")))]  # fmt: skip
    worker, consumer, producer, stop = make_worker({2: messages(2, values)}, Picky())
    run_until(worker, stop, lambda: consumer.committed_offsets.get(2) == 5)
    letters = [decode(v, DeadLetter) for topic, _, v in producer.results() if topic == "dlq"]
    assert [(x.source_topic, x.source_partition, x.source_offset) for x in letters] == [
        (TOPIC, 2, 1), (TOPIC, 2, 2), (TOPIC, 2, 3)
    ]  # fmt: skip
    assert [x.error_type for x in letters] == ["DecodeError", "EmptyValueError", "InvalidEventError"]
    assert [x.original_key() for x in letters] == [b"b", b"c", b"d"]
    assert letters[0].payload() == b"{not json"
    assert [v for t, _, v in producer.results() if t == "out"] == [b"ok1", b"ok2"]
    assert worker.stats.dead_letters == 3
    assert worker.stats.results == 2


def test_backpressure_pauses_when_the_buffer_is_full_and_resumes() -> None:
    gate = threading.Event()
    values = [(f"g{i}".encode(), encode(event(f"g{i}"))) for i in range(20)]
    worker, consumer, producer, stop = make_worker({0: messages(0, values)}, Recorder(gate=gate), concurrency=1,
                                                   max_in_flight=4)  # fmt: skip
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        deadline = time.monotonic() + 5
        while 0 not in consumer.paused:
            assert time.monotonic() < deadline
            time.sleep(0.005)
        assert consumer.positions[0] <= 4, "consumed past the in-flight bound"
        gate.set()
        while consumer.committed_offsets.get(0) != 20:
            assert time.monotonic() < deadline + 5
            time.sleep(0.005)
        assert consumer.pause_calls >= 2
    finally:
        gate.set()
        stop.set()
        thread.join(10)
    assert [v for _, _, v in producer.results()] == [f"g{i}".encode() for i in range(20)]


def test_stop_drains_running_work_and_starts_nothing_new() -> None:
    values = [(f"g{i}".encode(), encode(event(f"g{i}"))) for i in range(6)]
    handler = Recorder({f"g{i}": 0.3 for i in range(6)})
    worker, consumer, producer, stop = make_worker({0: messages(0, values)}, handler, concurrency=2)
    thread = threading.Thread(target=worker.run)
    thread.start()
    deadline = time.monotonic() + 5
    while sum(1 for kind, _, _ in handler.events if kind == "start") < 2:
        assert time.monotonic() < deadline
        time.sleep(0.005)
    stop.set()
    thread.join(10)
    started = [g for kind, g, _ in handler.events if kind == "start"]
    assert started == ["g0", "g1"]
    assert consumer.committed_offsets == {0: 2}
    assert [v for _, _, v in producer.results()] == [b"g0", b"g1"]
    assert consumer.closed


def test_failing_handler_is_retried_then_dead_lettered() -> None:
    calls: list[str] = []

    class Flaky:
        def handle(self, ev: GenerationEvent, source: Source) -> Outcome:
            calls.append(ev.generation_id)
            if ev.generation_id == "always" or calls.count(ev.generation_id) < 3:
                raise OSError("S3 down")
            return Done((Output("out", ev.key(), ev.generation_id.encode()),))

    values = [(b"a", encode(event("flaky"))), (b"b", encode(event("always")))]
    worker, consumer, producer, stop = make_worker({0: messages(0, values)}, Flaky(), handler_attempts=4)
    run_until(worker, stop, lambda: consumer.committed_offsets.get(0) == 2)
    assert calls.count("flaky") == 3
    assert calls.count("always") == 4
    topics = [t for t, _, _ in producer.results()]
    assert topics == ["out", "dlq", "logs"]  # the dead letter's log record carries the traceback
    record = decode(producer.results()[2][2], LogRecord)
    assert record.offset == 1
    assert record.exc_text is not None
    assert "OSError: S3 down" in record.exc_text


def test_an_infrastructure_failure_is_retried_past_every_attempt_and_never_dead_lettered() -> None:
    """A sandbox_error or an outage is not the event's fault: retried (capped backoff) for as long as the worker
    runs, never dead-lettered, the episode's next turn waiting for it, other episodes going on meanwhile."""
    calls: list[str] = []

    class Outage:
        def handle(self, ev: GenerationEvent, source: Source) -> Outcome:
            calls.append(ev.generation_id)
            if ev.generation_id == "e0t0" and calls.count("e0t0") <= 9:  # far past handler_attempts
                raise InfrastructureError("sandbox_error: the fork server is gone")
            return Done((Output("out", ev.key(), ev.generation_id.encode()),))

    values = [(f"ep{e}".encode(), encode(event(f"e{e}t{t}", f"ep{e}", t))) for t in range(2) for e in range(2)]
    worker, consumer, producer, stop = make_worker({0: messages(0, values)}, Outage(), handler_attempts=3,
                                                   handler_backoff_max_s=0.02, concurrency=2)  # fmt: skip
    run_until(worker, stop, lambda: consumer.committed_offsets.get(0) == 4)
    assert calls.count("e0t0") == 10
    assert calls.index("e0t1") > max(i for i, c in enumerate(calls) if c == "e0t0"), "a turn ran before the last"
    assert calls.index("e1t1") < max(i for i, c in enumerate(calls) if c == "e0t0"), "the other episode waited"
    assert [v for t, _, v in producer.results() if t == "out"] == [b"e0t0", b"e1t0", b"e0t1", b"e1t1"]
    assert not [t for t, _, _ in producer.results() if t == "dlq"]
    assert worker.metrics.value("rewardstream_retries_total", dependency="infrastructure") == 9
    assert worker.metrics.value("rewardstream_dead_letters_total", reason="HandlerCrashError") == 0


def test_failed_transaction_is_aborted_and_the_work_rerun_from_committed_offsets() -> None:
    values = [(f"g{i}".encode(), encode(event(f"g{i}"))) for i in range(3)]
    handler = Recorder()
    worker, consumer, producer, stop = make_worker({0: messages(0, values)}, handler)
    producer.fail_next_commit = True
    run_until(worker, stop, lambda: consumer.committed_offsets.get(0) == 3)
    assert producer.aborted == 1
    assert worker.stats.aborted == 1
    assert sorted(v for _, _, v in producer.results()) == [b"g0", b"g1", b"g2"]  # each exactly once committed
    assert len([g for kind, g, _ in handler.events if kind == "start"]) > 3  # some ran again after the abort


@pytest.mark.parametrize(
    ("window_s", "fencings", "run_again"), [(30.0, 2, False), (0.0, 1, True)], ids=["kept", "past-the-window"]
)
def test_results_the_group_fenced_are_committed_again_not_run_again(
    monkeypatch: pytest.MonkeyPatch, window_s: float, fencings: int, run_again: bool
) -> None:
    """A rebalance bumped the group's generation under the commit; the member keeps its partition (cooperative
    rebalancing): its finished runs are committed under the new generation, never thrown away and re-run; past
    the requeue window, they are dropped and re-run as after any failed transaction."""
    monkeypatch.setattr(committer, "REQUEUE_PAUSE_S", 0.05)
    monkeypatch.setattr(committer, "REQUEUE_WINDOW_S", window_s)
    values = [(f"g{i}".encode(), encode(event(f"g{i}"))) for i in range(3)]
    handler = Recorder()
    worker, consumer, producer, stop = make_worker({0: messages(0, values)}, handler)
    producer.group_fenced_commits = fencings
    run_until(worker, stop, lambda: consumer.committed_offsets.get(0) == 3)
    assert producer.aborted == fencings
    assert sorted(v for _, _, v in producer.results()) == [b"g0", b"g1", b"g2"]  # each exactly once committed
    starts = sorted(g for kind, g, _ in handler.events if kind == "start")
    assert (len(starts) > 3) == run_again, starts


def test_a_results_committed_hook_runs_once_it_committed_never_for_an_aborted_run() -> None:
    """What a role counts of what it recorded (the auditor's counters) follows the commits, not the runs."""
    counted: list[str] = []

    class Counting(Recorder):
        def handle(self, ev: GenerationEvent, source: Source) -> Outcome:
            done = super().handle(ev, source)
            assert isinstance(done, Done)
            return Done(done.outputs, committed=lambda: counted.append(ev.generation_id))

    values = [(f"g{i}".encode(), encode(event(f"g{i}"))) for i in range(3)]
    handler = Counting()
    worker, consumer, producer, stop = make_worker({0: messages(0, values)}, handler)
    producer.fail_next_commit = True
    run_until(worker, stop, lambda: consumer.committed_offsets.get(0) == 3)
    assert producer.aborted == 1
    assert sorted(counted) == ["g0", "g1", "g2"]  # once each, though some ran twice


def test_buffer_limit_defaults_to_sixteen_times_concurrency_at_least_64() -> None:
    cfg = WorkerConfig(role="r", source_topic="s", dlq_topic="d", group_id="g", transactional_id="t", concurrency=3)
    assert cfg.buffer_limit == 64
    assert WorkerConfig(role="r", source_topic="s", dlq_topic="d", group_id="g", transactional_id="t",
                        concurrency=8).buffer_limit == 128  # fmt: skip
    assert WorkerConfig(role="r", source_topic="s", dlq_topic="d", group_id="g", transactional_id="t",
                        max_in_flight=7).buffer_limit == 7  # fmt: skip


@pytest.mark.parametrize("value", [b"", b"\xff", b"[]"])
def test_garbage_never_reaches_the_handler(value: bytes) -> None:
    handler = Recorder()
    worker, consumer, producer, stop = make_worker({0: messages(0, [(b"k", value)])}, handler)
    run_until(worker, stop, lambda: consumer.committed_offsets.get(0) == 1)
    assert handler.events == []
    assert [t for t, _, _ in producer.results()] == ["dlq"]


def test_a_handler_crash_is_dead_lettered_with_the_reason_and_the_rest_flows() -> None:
    class Crashes:
        def handle(self, ev: GenerationEvent, source: Source) -> Outcome:
            if ev.generation_id == "bad":
                raise ZeroDivisionError("division by zero in the handler")
            return Done((Output("out", ev.key(), ev.generation_id.encode()),))

    values = [(f"g{i}".encode(), encode(event("bad" if i == 2 else f"g{i}"))) for i in range(5)]
    worker, consumer, producer, stop = make_worker({0: messages(0, values)}, Crashes(), handler_attempts=2)
    run_until(worker, stop, lambda: consumer.committed_offsets.get(0) == 5)
    results = producer.results()
    assert [v for t, _, v in results if t == "out"] == [b"g0", b"g1", b"g3", b"g4"]
    letters = [decode(v, DeadLetter) for t, _, v in results if t == "dlq"]
    assert len(letters) == 1
    assert (letters[0].source_offset, letters[0].error_type) == (2, "HandlerCrashError")
    assert "handler crashed on all 2 attempts: ZeroDivisionError: division by zero in the handler" in letters[0].error
    assert worker.metrics.value("rewardstream_dead_letters_total", reason="HandlerCrashError") == 1


def test_after_an_owner_died_the_suspect_messages_run_alone_each_behind_its_own_mark() -> None:
    values = [(f"k{i}".encode(), encode(event(f"g{i}"))) for i in range(6)]
    handler = Recorder({f"g{i}": 0.02 for i in range(6)})
    worker, consumer, producer, stop = make_worker({0: messages(0, values)}, handler, concurrency=4, max_in_flight=4)
    consumer.committed_offsets[0] = 0
    consumer.committed_metadata[0] = Mark(0, 1).encode()  # the previous owner died with offset 0 on
    run_until(worker, stop, lambda: consumer.committed_offsets.get(0) == 6)
    spans = {g: (at, None) for kind, g, at in handler.events if kind == "start"}
    ends = {g: at for kind, g, at in handler.events if kind == "end"}
    order = sorted(spans, key=lambda g: spans[g][0])
    for earlier, later in itertools.pairwise(order[:4]):  # the window (buffer limit 4) runs one at a time
        assert ends[earlier] <= spans[later][0], f"{later} started while {earlier} ran"
    alone_marks = [tps[0] for tps in producer.marks if Mark.parse(tps[0].metadata) and tps[0].offset < 4]
    assert [Mark.parse(tp.metadata).alone for tp in alone_marks[1:]] == [1, 1, 1, 1]  # type: ignore[union-attr]
    assert [v for _, _, v in producer.results()] == [f"g{i}".encode() for i in range(6)]


def test_a_suspect_message_the_group_fenced_runs_again_alone_never_waits_uncommitted() -> None:
    """The crash guard commits a suspect message's result before anything else starts: a fenced commit of one is
    not put back (others could start beside it uncommitted); it is rewound and run alone again."""
    values = [(f"k{i}".encode(), encode(event(f"g{i}"))) for i in range(2)]
    handler = Recorder()
    worker, consumer, producer, stop = make_worker({0: messages(0, values)}, handler, concurrency=2, max_in_flight=4)
    consumer.committed_offsets[0] = 0
    consumer.committed_metadata[0] = Mark(0, 1).encode()  # the previous owner died with offset 0 on
    producer.group_fenced_commits = 1
    run_until(worker, stop, lambda: consumer.committed_offsets.get(0) == 2)
    assert producer.aborted == 1
    starts = [g for kind, g, _ in handler.events if kind == "start"]
    assert starts[:2] == ["g0", "g0"], starts  # fenced, then run again alone before anything else started
    assert [v for _, _, v in producer.results()] == [b"g0", b"g1"]


def test_a_message_that_killed_the_process_alone_too_often_is_dead_lettered_unrun() -> None:
    values = [(f"k{i}".encode(), encode(event(f"g{i}"))) for i in range(4)]
    handler = Recorder()
    worker, consumer, producer, stop = make_worker({0: messages(0, values)}, handler, crash_attempts=3)
    consumer.committed_offsets[0] = 1
    consumer.committed_metadata[0] = Mark(1, 1, 3, 20).encode()  # offset 1 ran alone 3 times; all died
    run_until(worker, stop, lambda: consumer.committed_offsets.get(0) == 4)
    assert "g1" not in {g for _, g, _ in handler.events}
    results = producer.results()
    letters = [decode(v, DeadLetter) for t, _, v in results if t == "dlq"]
    assert [(d.source_offset, d.error_type) for d in letters] == [(1, "CrashLoopError")]
    assert "died 3 times while handling this message alone" in letters[0].error
    logs = [decode(v, LogRecord) for t, _, v in results if t == "logs"]
    assert any(
        r.message.startswith("dead-lettered (CrashLoopError): ") and r.offset == 1 and r.level == "error" for r in logs
    )
    assert [v for t, _, v in results if t == "out"] == [b"g2", b"g3"]
    assert worker.metrics.value("rewardstream_dead_letters_total", reason="CrashLoopError") == 1
