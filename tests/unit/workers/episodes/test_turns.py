"""The episode worker's rules for one action on the committed state (pure: no Kafka, no sandbox)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schemas.episodes import ActionEvent
from schemas.tasks import EpisodeLimits
from workers.episodes.step import StepAction
from workers.episodes.turns import (
    MAX_FORK_POINTS,
    Duplicate,
    EpisodeState,
    Rejected,
    Start,
    Step,
    Submit,
    applied,
    decide,
    ended,
    ends_after,
    overdue,
    snapshot_at,
)

LIMITS = EpisodeLimits(max_turns=5, step_timeout_s=10, episode_timeout_s=600, idle_timeout_s=60)
STATE = EpisodeState("ep-1", "swe/calc-1", turn=2, snapshot="a" * 64, opened_at_s=1000.0, last_action_at_s=1010.0)


def _event(turn: int, /, **action: Any) -> ActionEvent:
    return ActionEvent.model_validate({"episode_id": "ep-1", "turn": turn, "action": action})


def test_open_and_fork_start_an_episode_once() -> None:
    assert decide(None, _event(0, action="open", task_id="swe/calc-1"), None, 0.0) == Start("swe/calc-1")
    fork = decide(None, _event(0, action="fork", from_episode="ep-0", turn=3), None, 0.0)
    assert fork == Start(task_id=None, from_episode="ep-0", from_turn=3)
    assert decide(STATE, _event(0, action="open", task_id="swe/calc-1"), LIMITS, 0.0) == Duplicate()


def test_an_action_of_an_unknown_episode_is_rejected_and_names_it() -> None:
    decision = decide(None, _event(1, action="read", path="a.py"), None, 0.0)
    assert isinstance(decision, Rejected)
    assert "unknown episode 'ep-1'" in decision.reason
    assert not decision.consumes_turn


def test_turns_apply_once_and_in_order() -> None:
    assert decide(STATE, _event(2, action="read", path="a.py"), LIMITS, 1020.0) == Duplicate()
    assert decide(STATE, _event(1, action="read", path="a.py"), LIMITS, 1020.0) == Duplicate()
    assert decide(STATE, _event(3, action="read", path="a.py"), LIMITS, 1020.0) == Step(StepAction.read("a.py"))
    gap = decide(STATE, _event(5, action="read", path="a.py"), LIMITS, 1020.0)
    assert gap == Rejected("turn 5 is out of order: the next turn is 3", consumes_turn=False)


def test_exec_timeout_is_capped_to_the_step_timeout_and_defaults_to_it() -> None:
    long = decide(STATE, _event(3, action="exec", command="sleep 100", timeout_s=100), LIMITS, 1020.0)
    assert long == Step(StepAction.exec("sleep 100", timeout_s=10.0))
    default = decide(STATE, _event(3, action="exec", command=["python", "-V"]), LIMITS, 1020.0)
    assert default == Step(StepAction.exec(["python", "-V"], timeout_s=10.0))
    short = decide(STATE, _event(3, action="exec", command="true", timeout_s=2), LIMITS, 1020.0)
    assert short == Step(StepAction.exec("true", timeout_s=2.0))


def test_writes_carry_their_bytes_text_or_base64() -> None:
    text = decide(STATE, _event(3, action="write", path="calc/ops.py", text="x = 1\n"), LIMITS, 1020.0)
    assert text == Step(StepAction.write("calc/ops.py", b"x = 1\n"))
    raw = decide(STATE, _event(3, action="write", path="blob", base64="AAEC/w=="), LIMITS, 1020.0)
    assert raw == Step(StepAction.write("blob", b"\x00\x01\x02\xff"))


@pytest.mark.parametrize(
    ("action", "reason"),
    [
        ({"action": "write", "path": "../x", "text": "x"}, "path has a '..' segment"),
        ({"action": "write", "path": "/etc/passwd", "text": "x"}, "path is absolute"),
        ({"action": "read", "path": "a//b"}, "path is not normalised"),
        (
            {
                "action": "write",
                "path": "big",
                "content": {"ref": "s3://bkt/x", "sha256": "ab" * 32, "size": (64 << 20) + 1},
            },
            "over the workspace cap (67108864 bytes",
        ),
        ({"action": "write", "path": "bad", "base64": "not base64!"}, "base64 is not valid base64"),
    ],
)
def test_the_agents_bad_actions_are_rejected_with_the_reason_and_use_their_turn(
    action: dict[str, Any], reason: str
) -> None:
    decision = decide(STATE, _event(3, **action), LIMITS, 1020.0)
    assert isinstance(decision, Rejected), decision
    assert reason in decision.reason, decision
    assert decision.consumes_turn


def test_submit_and_the_limits_end_the_episode() -> None:
    assert decide(STATE, _event(3, action="submit"), LIMITS, 1020.0) == Submit("submitted")
    late = decide(STATE, _event(3, action="read", path="a.py"), LIMITS, 1000.0 + 601)
    assert late == Submit("episode_timeout")
    assert ends_after(_event(5, action="read", path="a.py"), LIMITS) == "max_turns"
    assert ends_after(_event(4, action="read", path="a.py"), LIMITS) is None
    stale = decide(STATE, _event(3, action="read", path="a.py"), EpisodeLimits(max_turns=2), 1020.0)
    assert isinstance(stale, Rejected)
    assert "max_turns" in stale.reason


def test_an_ended_episode_takes_no_more_actions() -> None:
    done = ended(STATE, _event(3, action="submit"), "submitted", 1020.0)
    assert done.ended == "submitted"
    assert done.turn == 3
    assert decide(done, _event(4, action="read", path="a.py"), LIMITS, 1021.0) == Rejected(
        "the episode has ended (submitted)", consumes_turn=False
    )
    assert decide(done, _event(3, action="submit"), LIMITS, 1021.0) == Duplicate()  # a resent submit


def test_an_idle_episode_is_abandoned_and_an_old_one_times_out() -> None:
    assert overdue(STATE, LIMITS, 1010.0 + 59) is None
    assert overdue(STATE, LIMITS, 1010.0 + 61) == "abandoned"
    assert overdue(STATE, EpisodeLimits(idle_timeout_s=1000, episode_timeout_s=100), 1101.0) == "episode_timeout"
    assert overdue(ended(STATE, _event(3, action="submit"), "submitted", 1020.0), LIMITS, 99_999.0) is None


def test_idle_counts_from_the_answer_when_it_came_after_the_action() -> None:
    """A step that ran (or waited in a backlog) past idle_timeout_s has not used the trainer's time."""
    assert overdue(STATE, LIMITS, 1010.0 + 100, answered_at_s=1010.0 + 90) is None
    assert overdue(STATE, LIMITS, 1010.0 + 151, answered_at_s=1010.0 + 90) == "abandoned"
    assert overdue(STATE, LIMITS, 1010.0 + 61, answered_at_s=900.0) == "abandoned"  # never before the action


def test_applied_moves_the_turn_the_workspace_and_the_idle_clock() -> None:
    after = applied(STATE, _event(3, action="read", path="a.py"), "b" * 64, 1030.0)
    assert (after.turn, after.snapshot, after.last_action_at_s, after.opened_at_s) == (3, "b" * 64, 1030.0, 1000.0)


def test_the_clock_of_an_episode_never_runs_backwards() -> None:
    """An action stamped in the past cannot reset the idle clock (the topic uses the broker's time anyway)."""
    assert applied(STATE, _event(3, action="read", path="a.py"), "b" * 64, 5.0).last_action_at_s == 1010.0
    assert ended(STATE, _event(3, action="submit"), "submitted", 5.0).last_action_at_s == 1010.0


def test_an_exec_may_not_run_past_the_end_of_the_episode() -> None:
    near_end = decide(STATE, _event(3, action="exec", command="sleep 100", timeout_s=10), LIMITS, 1000.0 + 597)
    assert near_end == Step(StepAction.exec("sleep 100", timeout_s=3.0))


_ACTIONS = st.one_of(
    st.builds(lambda p: {"action": "read", "path": p}, st.text(max_size=20)),
    st.builds(lambda p, t: {"action": "write", "path": p, "text": t}, st.text(max_size=20), st.text(max_size=20)),
    st.builds(lambda c, t: {"action": "exec", "command": c, "timeout_s": t}, st.text(min_size=1, max_size=20),
              st.floats(min_value=0.001, max_value=1000)),
    st.just({"action": "submit"}),
)  # fmt: skip


@given(st.lists(st.tuples(st.integers(1, 8), _ACTIONS), max_size=30))
def test_any_sequence_of_actions_applies_each_turn_at_most_once_in_order(seq: list[tuple[int, dict[str, Any]]]) -> None:
    """Whatever the trainer sends (resent, reordered, bad), the turns carried out are 1, 2, 3, ... with no
    repeat, and nothing is carried out after the episode ended."""
    state = STATE.__class__("ep-1", "t", turn=0, snapshot="0" * 64, opened_at_s=0.0, last_action_at_s=0.0)
    carried: list[int] = []
    for turn, action in seq:
        try:
            event = _event(turn, **action)
        except ValueError:
            continue  # undecodable: the DLQ's, not a decision
        decision = decide(state, event, LIMITS, 1.0)
        if isinstance(decision, Step | Submit) or (isinstance(decision, Rejected) and decision.consumes_turn):
            assert state.ended is None
            carried.append(event.turn)
            if isinstance(decision, Submit):
                state = ended(state, event, decision.why, 1.0)
            else:
                state = applied(state, event, state.snapshot, 1.0)
                why = ends_after(event, LIMITS)
                if why is not None:
                    state = ended(state, event, why, 1.0)
    assert carried == list(range(1, len(carried) + 1))
    assert len(carried) <= LIMITS.max_turns


def test_each_change_of_the_workspace_is_a_fork_point_and_reads_are_not() -> None:
    start = EpisodeState("ep-1", "t", 0, "0" * 64, 1000.0, 1000.0, history=((0, "0" * 64),))
    one = applied(start, _event(1, action="write", path="a.py", text="x"), "1" * 64, 1001.0)
    two = applied(one, _event(2, action="read", path="a.py"), "1" * 64, 1002.0)
    three = applied(two, _event(3, action="exec", command="true"), "3" * 64, 1003.0)
    assert three.history == ((0, "0" * 64), (1, "1" * 64), (3, "3" * 64))
    assert [snapshot_at(three, turn) for turn in range(5)] == ["0" * 64, "1" * 64, "1" * 64, "3" * 64, None]


def test_fork_points_are_bounded_and_the_forgotten_turns_cannot_be_forked() -> None:
    state = EpisodeState("ep-1", "t", 0, "s0", 1000.0, 1000.0, history=((0, "s0"),))
    for turn in range(1, MAX_FORK_POINTS + 11):
        state = applied(state, _event(turn, action="exec", command="true"), f"s{turn}", 1000.0 + turn)
    assert len(state.history) == MAX_FORK_POINTS
    assert snapshot_at(state, 10) is None
    assert snapshot_at(state, 11) == "s11"
    assert snapshot_at(state, state.turn) == state.snapshot
