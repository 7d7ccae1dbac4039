"""The fleet-wide cap on sandbox starts (``workers/sandbox/fleet_pace.py``) against the real broker: three
members of one group (``sleeping_worker``: the production loop; each run admitted as a sandbox run is, through
``Admission`` with the member's fleet share, then it sleeps) on a topic of six partitions, with far more work
than the cap lets start. The group's starts, read from every member's start times, stay within the fleet rate
(plus the members' bursts) over sliding windows, reach it (the cap is what limits them), and when a member
leaves, the two left take its share: each is told 3 of 6 partitions and together they start at the fleet rate
again."""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

import pytest

from bus.admin import delete_topics, ensure_topics
from schemas.codec import encode
from schemas.topics import catalog, topic_for
from tests.integration.test_crash_loop import generation, produce
from tests.integration.test_rebalancing import Member, member

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PARTITIONS = 6
FLEET_RATE = 12.0  # starts per second of the whole group
RUN_S = 0.25  # 3 members x 8 runners / 0.25 s = 96 starts/s could start without the cap
CONCURRENCY = 8
WINDOWS_S = (1.0, 2.0, 4.0)
_SHARE = re.compile(r"fleet share: (\d+) of (\d+) partitions")


def starts_of(members: list[Member]) -> list[tuple[float, int]]:
    """(wall-clock time, member index) of every start of every member, in time order."""
    out = []
    for i, m in enumerate(members):
        if m.starts.exists():
            out += [(float(line.split()[2]), i) for line in m.starts.read_text().splitlines() if line.strip()]
    return sorted(out)


def started_since(members: list[Member], began: float) -> int:
    return sum(1 for t, _ in starts_of(members) if t >= began)


def share_of(m: Member) -> tuple[int, int] | None:
    """The member's last share as its log says (owned, total)."""
    found = _SHARE.findall(m.text())
    return (int(found[-1][0]), int(found[-1][1])) if found else None


def wait_for(until: Callable[[], bool], timeout_s: float, why: Callable[[], str]) -> None:
    deadline = time.monotonic() + timeout_s
    while not until():
        assert time.monotonic() < deadline, why()
        time.sleep(0.05)


def rate_between(starts: list[tuple[float, int]], begin: float, end: float) -> float:
    return sum(1 for t, _ in starts if begin <= t < end) / (end - begin)


def most_in_window(times: list[float], window_s: float) -> int:
    """The most starts in any window of ``window_s`` seconds (windows opening at each start)."""
    best, j = 0, 0
    for i, first in enumerate(times):
        j = max(j, i)
        while j < len(times) and times[j] < first + window_s:
            j += 1
        best = max(best, j - i)
    return best


@pytest.mark.timeout(90)
def test_the_groups_starts_stay_within_the_fleet_rate_and_a_leavers_share_goes_to_the_others(
    kafka_config: dict[str, str], unique_name: str, tmp_path: Path
) -> None:
    prefix = f"rs-test.{unique_name}."
    specs = catalog(prefix, PARTITIONS, 1)
    ensure_topics(specs, kafka_config)
    gids = [f"g{i}" for i in range(600)]  # ~50 s at the cap: never drained during the test
    produce(kafka_config, topic_for("generations", specs).name, [(g.encode(), encode(generation(g))) for g in gids])
    args = ("--fleet-rate", str(FLEET_RATE), "--sleep", str(RUN_S), "--concurrency", str(CONCURRENCY),
            "--slots-dir", str(tmp_path / "slots"))  # fmt: skip
    try:
        with ExitStack() as stack:
            group = f"{prefix}fleet"
            members = [stack.enter_context(member(f"m{i}", prefix, group, tmp_path, *args)) for i in range(3)]

            def logs() -> str:
                return "\n".join(f"--- m{i}\n{m.text()[-2000:]}" for i, m in enumerate(members))

            # Settled: each member owns 2 of the 6 partitions (cooperative-sticky balances them).
            wait_for(lambda: all(share_of(m) == (2, PARTITIONS) for m in members), 60, lambda: "unsettled\n" + logs())
            three_began = time.time()
            wait_for(lambda: started_since(members, three_began) >= 36, 30, lambda: "no starts\n" + logs())
            three_ended = time.time()

            leaver = members[2]
            os.killpg(leaver.proc.pid, signal.SIGTERM)
            assert leaver.proc.wait(timeout=30) == 0, leaver.text()[-3000:]
            staying = members[:2]
            wait_for(lambda: all(share_of(m) == (3, PARTITIONS) for m in staying), 30, lambda: "no takeover\n" + logs())
            two_began = time.time()
            wait_for(lambda: started_since(members, two_began) >= 36, 30, lambda: "none after the leave\n" + logs())
            two_ended = time.time()
            starts = starts_of(members)
    finally:
        delete_topics([s.name for s in specs], kafka_config)

    times = [t for t, _ in starts]
    for window in WINDOWS_S:
        # Three members' bursts at most: max(1, share x 1 s) each, together the fleet's 1 s plus one per member.
        limit = FLEET_RATE * window + FLEET_RATE + 3
        assert most_in_window(times, window) <= limit, f"{most_in_window(times, window)} starts in {window} s"
    three = rate_between(starts, three_began, three_ended)
    two = rate_between(starts, two_began, two_ended)
    most = {window: most_in_window(times, window) for window in WINDOWS_S}
    print(f"fleet rate {FLEET_RATE}/s: 3 members {three:.2f}/s, 2 members {two:.2f}/s; most starts in a window: {most}")
    assert three >= 0.7 * FLEET_RATE, f"3 members started {three:.2f}/s: the cap should be what limits them"
    # Two members on their old shares (2 of 6 each) could start 2/3 of the rate; with the leaver's, all of it.
    assert two >= 0.85 * FLEET_RATE, f"2 members started {two:.2f}/s: the leaver's share was not taken over"
    per_member = [rate_between([s for s in starts if s[1] == i], two_began, two_ended) for i in (0, 1)]
    assert all(rate <= FLEET_RATE / 2 * 1.2 + 1 for rate in per_member), per_member
