"""The crash guard's decisions (pure): marks on the wire, suspect windows, and when a message is given up."""

from __future__ import annotations

import threading

from hypothesis import given
from hypothesis import strategies as st

from bus.crash_guard import AloneGate, CrashGuard, CrashLoopError, GiveUp, Isolate, Mark

T = "gen"


@given(
    offset=st.integers(0, 2**62),
    owners=st.integers(0, 1000),
    alone=st.integers(0, 1000),
    until=st.integers(-1, 2**62),
)
def test_marks_round_trip_through_metadata(offset: int, owners: int, alone: int, until: int) -> None:
    mark = Mark(offset, owners, alone, until)
    text = mark.encode()
    assert len(text) < 200  # Kafka's offset.metadata.max.bytes is 4096
    parsed = Mark.parse(text)
    if text == "":
        assert parsed is None
        assert (owners, alone) == (0, 0)
        assert until <= offset
    else:
        assert parsed == mark


@given(st.text(max_size=100))
def test_foreign_metadata_is_no_mark(text: str) -> None:
    if not text.startswith("rs-guard/1 "):
        assert Mark.parse(text) is None


def test_a_clean_partition_is_not_suspect_and_gets_an_active_mark() -> None:
    guard = CrashGuard("executor", attempts=3, window=10)
    start = guard.assigned(T, 0, 5, "")
    assert start == Mark(5, 1, 0, -1)
    assert not guard.suspect(T, 0, 5)
    assert guard.progress(T, 0, 9) == Mark(9, 1, 0, -1).encode()  # still active: a crash now is noticed


def test_a_mark_left_by_a_dead_owner_makes_the_next_window_suspect() -> None:
    guard = CrashGuard("executor", attempts=3, window=10)
    start = guard.assigned(T, 0, 7, Mark(7, 1).encode())
    assert start == Mark(7, 2, 0, 17)
    assert guard.suspect(T, 0, 7)
    assert guard.suspect(T, 0, 16)
    assert not guard.suspect(T, 0, 17)
    assert not guard.suspect(T, 1, 7)  # another partition


def test_a_mark_about_another_offset_is_ignored() -> None:
    guard = CrashGuard("executor", attempts=3, window=10)
    assert guard.assigned(T, 0, 8, Mark(7, 4, 2, 30).encode()) == Mark(8, 1, 0, -1)
    assert not guard.suspect(T, 0, 8)


def test_a_message_is_given_up_after_dying_alone_attempts_times() -> None:
    metadata = Mark(7, 1).encode()  # an owner died somewhere after 7
    deaths = 0
    for _owner in range(10):
        guard = CrashGuard("executor", attempts=3, window=10)
        start = guard.assigned(T, 0, 7, metadata)
        decision = guard.before_alone(T, 0, 7)
        if isinstance(decision, GiveUp):
            break
        assert isinstance(decision, Isolate)
        assert decision.mark.offset == 7
        assert decision.mark.until == start.until == 17
        metadata = decision.mark.encode()  # ... and the process dies while 7 runs alone
        deaths += 1
    assert deaths == 3
    assert isinstance(decision, GiveUp)
    assert isinstance(decision.error, CrashLoopError)
    assert "died 3 times while handling this message alone" in str(decision.error)
    assert (decision.error.topic, decision.error.partition, decision.error.offset) == (T, 0, 7)


def test_progress_past_a_message_forgets_its_deaths_and_keeps_the_window() -> None:
    guard = CrashGuard("executor", attempts=3, window=10)
    guard.assigned(T, 0, 7, Mark(7, 0, 2, 17).encode())
    decision = guard.before_alone(T, 0, 7)
    assert isinstance(decision, Isolate)
    assert decision.mark.alone == 3
    assert guard.progress(T, 0, 8) == Mark(8, 1, 0, 17).encode()
    later = guard.before_alone(T, 0, 8)
    assert isinstance(later, Isolate)
    assert later.mark.alone == 1


def test_releasing_cleanly_clears_the_mark_but_keeps_an_unfinished_window() -> None:
    guard = CrashGuard("executor", window=10)
    guard.assigned(T, 0, 3, "")
    guard.progress(T, 0, 6)
    assert guard.released(T, 0) == Mark(6, 0, 0, -1)
    assert Mark(6, 0, 0, -1).encode() == ""
    guard.assigned(T, 1, 3, Mark(3, 1).encode())
    guard.progress(T, 1, 5)
    assert guard.released(T, 1) == Mark(5, 0, 0, 13)  # the next owner still runs 5..12 alone
    assert guard.released(T, 1) is None  # not ours any more


def test_the_gate_lets_many_run_together_or_one_alone() -> None:
    gate = AloneGate()
    both_in = threading.Barrier(3, timeout=5)
    release = threading.Event()
    alone_in, alone_out, late_in = threading.Event(), threading.Event(), threading.Event()

    def together() -> None:
        with gate.together():
            both_in.wait()  # two at once: together really is together
            release.wait(5)

    def alone() -> None:
        with gate.alone():
            alone_in.set()
            alone_out.wait(5)

    def late() -> None:
        with gate.together():
            late_in.set()

    holders = [threading.Thread(target=together) for _ in range(2)]
    for thread in holders:
        thread.start()
    both_in.wait()
    lone = threading.Thread(target=alone)
    lone.start()
    assert not alone_in.wait(0.2), "alone while two others run"
    release.set()
    assert alone_in.wait(5)
    latecomer = threading.Thread(target=late)
    latecomer.start()
    assert not late_in.wait(0.2), "another ran beside the one alone"
    alone_out.set()
    assert late_in.wait(5)
    for thread in (*holders, lone, latecomer):
        thread.join(5)


def test_a_partition_lost_and_got_back_under_its_own_mark_is_no_death() -> None:
    """A group session that timed out (the coordinator's broker failing over) takes the partition away; when it
    comes back with this process's own last mark on it, nobody died: nothing runs alone."""
    guard = CrashGuard("t", window=10)
    start = guard.assigned("gen", 0, 0, None)
    progress = guard.progress("gen", 0, 5)
    guard.lost("gen", 0)
    again = guard.assigned("gen", 0, 5, progress)
    assert not guard.suspect("gen", 0, 5)
    assert again.owners == 1  # active, as after a clean release
    guard.lost("gen", 0)  # lost before any progress: its start mark is on the partition
    guard.assigned("gen", 0, 5, again.encode())
    assert not guard.suspect("gen", 0, 5)
    assert start.owners == 1


def test_a_lost_partition_that_another_owner_left_unreleased_is_suspect() -> None:
    guard = CrashGuard("t", window=10)
    guard.assigned("gen", 0, 0, None)
    guard.progress("gen", 0, 5)
    guard.lost("gen", 0)
    theirs = Mark(7, 1, 0).encode()  # another member took it, progressed to 7 and died
    guard.assigned("gen", 0, 7, theirs)
    assert guard.suspect("gen", 0, 7)


def test_losing_a_partition_while_a_message_runs_alone_is_not_its_death() -> None:
    guard = CrashGuard("t", window=10, attempts=1)
    guard.assigned("gen", 0, 3, Mark(3, 1, 0).encode())  # a dead owner: suspect from 3
    decision = guard.before_alone("gen", 0, 3)
    assert isinstance(decision, Isolate)
    guard.lost("gen", 0)
    guard.assigned("gen", 0, 3, decision.mark.encode())
    assert isinstance(guard.before_alone("gen", 0, 3), Isolate)  # counted as a death, it would be given up
    assert guard.suspect("gen", 0, 3)  # still in the window the dead owner left
