"""A worker's share of the fleet's sandbox starts (``workers/sandbox/fleet_pace.py``): the shares of any
assignment add up to the fleet's rate, the bucket never lets more than the rate and its burst through in any
window, and a worker owning nothing starts nothing. (With real members of a real group:
``tests/integration/test_fleet_pace.py``.)"""

from __future__ import annotations

import math
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schemas.errors import SandboxError
from schemas.settings import Settings
from workers.sandbox.admission import Admission
from workers.sandbox.fleet_pace import FleetPace, TokenBucket, burst_of, fleet_pace, fleet_share

rates = st.floats(min_value=0.01, max_value=10_000, allow_nan=False)


@given(rates, st.integers(1, 512), st.data())
def test_the_shares_of_any_assignment_add_up_to_the_fleet_rate(
    rate: float, partitions: int, data: st.DataObject
) -> None:
    members = data.draw(st.integers(1, 64))
    owners = data.draw(st.lists(st.integers(0, members - 1), min_size=partitions, max_size=partitions))
    owned = [owners.count(m) for m in range(members)]
    shares = [fleet_share(rate, k, partitions) for k in owned]
    assert math.isclose(sum(shares), rate, rel_tol=1e-9)
    assert all(share == 0.0 for share, k in zip(shares, owned, strict=True) if k == 0), "owning nothing starts nothing"


@given(rates, st.integers(1, 512), st.data())
def test_while_partitions_move_the_shares_never_exceed_the_fleet_rate(
    rate: float, partitions: int, data: st.DataObject
) -> None:
    """Mid-rebalance some partitions have no owner yet (revoked, not assigned): the sum only falls short."""
    members = st.lists(st.integers(0, partitions), min_size=1, max_size=64)
    owned = data.draw(members.filter(lambda o: sum(o) <= partitions))
    assert sum(fleet_share(rate, k, partitions) for k in owned) <= rate * (1 + 1e-9)


def test_no_fleet_rate_or_no_partitions_is_no_share() -> None:
    assert fleet_share(0.0, 3, 8) == fleet_share(10.0, 0, 8) == fleet_share(10.0, 3, 0) == 0.0
    assert fleet_share(10.0, 9, 8) == 10.0, "a stale total never gives more than the whole rate"


def test_the_burst_is_one_second_of_the_rate_and_at_least_one_start() -> None:
    assert burst_of(50.0) == 50.0
    assert burst_of(0.2) == 1.0
    assert burst_of(0.0) == 0.0


@given(
    rate=st.floats(min_value=0.05, max_value=500, allow_nan=False),
    gaps=st.lists(st.floats(min_value=0, max_value=3, allow_nan=False), min_size=1, max_size=200),
    window=st.floats(min_value=0.1, max_value=20, allow_nan=False),
)
def test_starts_in_any_window_stay_within_rate_times_window_plus_the_burst(
    rate: float, gaps: list[float], window: float
) -> None:
    """Callers arriving at any times, each taking a token as soon as there is one: in every window of ``w``
    seconds at most ``rate * w + burst`` starts."""
    bucket = TokenBucket(stamp=0.0)
    bucket.set_rate(rate, 0.0)
    bucket.tokens = burst_of(rate)  # the worst case: a full bucket
    now, starts = 0.0, []
    for gap in gaps:
        now += gap
        while (wait := bucket.take(now)) > 0:
            now += wait
        starts.append(now)
    limit = rate * window + burst_of(rate) + 1e-6
    for i, first in enumerate(starts):
        inside = sum(1 for t in starts[i:] if t <= first + window)
        assert inside <= limit, (inside, limit)


def test_a_growing_share_brings_no_tokens_and_a_shrinking_one_keeps_only_its_burst() -> None:
    bucket = TokenBucket(stamp=0.0)
    bucket.set_rate(2.0, 0.0)
    assert bucket.take(0.0) == pytest.approx(0.5), "a new share starts empty: its first start after 1/rate"
    bucket.set_rate(100.0, 0.0)
    assert bucket.tokens == 0.0
    bucket.take(10.0)  # full: 100 tokens, one taken
    bucket.set_rate(4.0, 10.0)
    assert bucket.tokens == 4.0
    bucket.set_rate(0.0, 10.0)
    assert bucket.tokens == 0.0
    assert bucket.take(99.0) == math.inf, "at rate 0 nothing ever starts"


def test_a_worker_paces_its_starts_at_its_share() -> None:
    pace = FleetPace(400.0)
    pace.owned(1, 4)  # 100 starts per second
    began = time.monotonic()
    for _ in range(20):
        pace.acquire()
    took = time.monotonic() - began
    assert 0.18 < took < 2.0, f"20 starts at 100/s from an empty bucket took {took:.3f} s"


def test_a_worker_owning_nothing_starts_nothing_and_a_waiting_start_gives_up_when_its_share_goes() -> None:
    pace = FleetPace(1.0)
    with pytest.raises(SandboxError, match="owns no partition"):
        pace.acquire()
    pace.owned(1, 8)  # one start every 8 s: the waiter below waits
    errors: list[BaseException] = []

    def start() -> None:
        try:
            pace.acquire()
        except SandboxError as exc:
            errors.append(exc)

    waiter = threading.Thread(target=start)
    waiter.start()
    time.sleep(0.05)
    assert waiter.is_alive()
    pace.owned(0, 8)  # its partitions went to another member
    waiter.join(5)
    assert not waiter.is_alive(), "the waiting start must give up at once"
    assert errors


def test_a_closed_pace_releases_its_waiters() -> None:
    pace = FleetPace(1.0)
    pace.owned(1, 100)
    errors: list[BaseException] = []

    def start() -> None:
        try:
            pace.acquire()
        except SandboxError as exc:
            errors.append(exc)

    waiter = threading.Thread(target=start)
    waiter.start()
    pace.close()
    waiter.join(5)
    assert not waiter.is_alive()
    assert errors


def test_admission_takes_the_fleet_token_after_the_hosts_slot(tmp_path: Path) -> None:
    pace = FleetPace(10.0)
    admission = Admission(tmp_path, 4, 10_000.0, fleet=pace)
    with pytest.raises(SandboxError, match="owns no partition"), admission.admit():
        pass
    pace.owned(2, 2)
    with admission.admit() as waited:
        assert 0.05 < waited < 1.0, "the first start of a fresh share waits one token (0.1 s)"


def test_the_setting_turns_the_fleet_pace_on() -> None:
    assert fleet_pace(Settings()) is None, "off by default"
    pace = fleet_pace(Settings(sandbox_fleet_start_rate=50.0))
    assert pace is not None
    assert pace.fleet_rate == 50.0
