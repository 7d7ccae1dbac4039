"""A writer group that went silent: stopped after the quiet period, unless it still has members (a worker
recovering from a broker fault, or restarting), which get ``RECOVERY_S`` more: a correct answer must not be
scored 0.0 because the infrastructure held its writer up."""

from __future__ import annotations

import pytest

from streams.reward.liveness import RECOVERY_S, still_working

QUIET = 30.0


@pytest.mark.parametrize(
    ("silent_s", "members", "working"),
    [
        (10.0, 0, True),  # within the quiet period, whatever the group looks like
        (QUIET + 1, 0, False),  # scaled to zero or stopped: given up as before
        (QUIET + 1, 2, True),  # its worker replaces its producer, or restarts
        (QUIET + 1, None, True),  # the cluster cannot tell (a broker fault): on hold
        (QUIET + RECOVERY_S - 1, 1, True),
        (QUIET + RECOVERY_S + 1, 1, False),  # members that commit nothing for this long are stuck: the deadline
    ],
)
def test_a_silent_writer_with_members_is_waited_for_a_bounded_time(
    silent_s: float, members: int | None, working: bool
) -> None:
    assert still_working(silent_s, QUIET, members) is working
