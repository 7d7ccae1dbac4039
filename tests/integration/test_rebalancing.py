"""Pods added or removed mid-run, against the real broker: members of one group (``sleeping_worker``: the
production loop, runs that sleep) join and leave while runs are in flight. Every generation gets exactly one
result, none lost, none doubled; and the runs of a partition a member keeps are never dropped (cooperative
rebalancing: only the partitions that move are revoked, and their started runs finish within the drain)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from schemas.codec import encode
from schemas.topics import catalog, topic_for
from tests.integration.helpers import PARTITIONS
from tests.integration.reward_env import REPO, Reader
from tests.integration.test_crash_loop import generation, produce, read_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RUN_S = 2.0  # each run sleeps this long; far below the revoke drain (10 s) and the SIGTERM drain (30 s)


@dataclass
class Member:
    """One worker process of the group."""

    proc: subprocess.Popen[bytes]
    log: Path
    starts: Path

    def started(self) -> list[str]:
        """Generation ids whose runs this member started, in order."""
        if not self.starts.exists():
            return []
        return [line.split()[0] for line in self.starts.read_text().splitlines() if line.strip()]

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


@contextmanager
def member(name: str, prefix: str, group: str, tmp: Path, *extra: str) -> Iterator[Member]:
    """A ``sleeping_worker`` process in ``group`` (``extra``: more of its arguments); SIGKILLed at the end if it
    is still there."""
    env = {**os.environ, "RS_TOPIC_PREFIX": prefix, "RS_TOPIC_PARTITIONS": str(PARTITIONS),
           "RS_CACHE_DIR": str(tmp), "PYTHONWARNINGS": "ignore"}  # fmt: skip
    log, starts = tmp / f"{name}.log", tmp / f"{name}.starts"
    argv = [sys.executable, "-m", "tests.integration.sleeping_worker", "--group", group, "--starts", str(starts),
            "--sleep", str(RUN_S), "--rebalance-drain", "10", *extra]  # fmt: skip
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield Member(proc, log, starts)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def wait_for(until: Callable[[], bool], timeout_s: float, why: Callable[[], str]) -> None:
    deadline = time.monotonic() + timeout_s
    while not until():
        assert time.monotonic() < deadline, why()
        time.sleep(0.05)


def one_result_each(results: Reader, gids: list[str], members: list[Member]) -> None:
    """Every generation's result arrives, and (once nothing more comes) exactly once."""

    def logs() -> str:
        return "\n".join(m.text()[-3000:] for m in members)

    read_until([results], lambda: len(set(results.values)) >= len(gids), 240,
               lambda: f"results {len(results.values)}/{len(gids)}\n{logs()}")  # fmt: skip
    results.settle()
    got = Counter(v.decode() for v in results.values)
    assert got == Counter(gids), f"lost {set(gids) - set(got)}, doubled {[g for g, n in got.items() if n > 1]}"


def setup(kafka_config: dict[str, str], prefix: str, count: int) -> tuple[list[str], Reader, str]:
    specs = catalog(prefix, PARTITIONS, 1)
    gids = [f"g{i}" for i in range(count)]
    produce(kafka_config, topic_for("generations", specs).name, [(g.encode(), encode(generation(g))) for g in gids])
    return gids, Reader(kafka_config, topic_for("executions", specs).name), f"{prefix}sleepers"


@pytest.mark.timeout(300)
def test_a_member_joining_mid_run_drops_no_run(kafka_config: dict[str, str], prefix: str, tmp_path: Path) -> None:
    gids, results, group = setup(kafka_config, prefix, 36)  # ~12 s of runs for one member alone
    try:
        with ExitStack() as stack:
            first = stack.enter_context(member("first", prefix, group, tmp_path))
            wait_for(lambda: len(first.started()) >= 6, 120, lambda: "first never started\n" + first.text())
            second = stack.enter_context(member("second", prefix, group, tmp_path))
            one_result_each(results, gids, [first, second])
            by_first, by_second = first.started(), second.started()
        assert by_second, "the second member never took a partition: no rebalance happened mid-run"
        assert "revoked [" in first.text(), first.text()[-3000:]
        # No run thrown away: neither the kept partitions' (never revoked) nor the moved one's (drained).
        started = Counter(by_first + by_second)
        assert started == Counter(gids), f"started again: {[g for g, n in started.items() if n > 1]}"
        assert len(by_first) < len(gids), "the first member ran everything: the join came too late"
        assert "did not finish within" not in first.text()
    finally:
        results.close()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_member_leaving_mid_run_loses_and_doubles_nothing(
    kafka_config: dict[str, str], prefix: str, tmp_path: Path, how: signal.Signals
) -> None:
    gids, results, group = setup(kafka_config, prefix, 36)
    try:
        with ExitStack() as stack:
            staying = stack.enter_context(member("staying", prefix, group, tmp_path))
            leaving = stack.enter_context(member("leaving", prefix, group, tmp_path))
            wait_for(lambda: len(leaving.started()) >= 2 and len(staying.started()) >= 2, 120,
                     lambda: f"not both running\n{staying.text()[-2000:]}\n{leaving.text()[-2000:]}")  # fmt: skip
            kept_before = set(staying.started())
            os.killpg(leaving.proc.pid, how)
            code = leaving.proc.wait(timeout=60)
            one_result_each(results, gids, [staying, leaving])
            by_staying, by_leaving = staying.started(), leaving.started()
        assert code == (0 if how == signal.SIGTERM else -signal.SIGKILL), leaving.text()[-3000:]
        assert kept_before, "the staying member had no run in flight when the other left"
        # The staying member's runs are never thrown away: it only gains partitions.
        twice = [g for g, n in Counter(by_staying).items() if n > 1]
        assert not twice, f"the staying member ran again: {twice}"
        again = set(by_staying) & set(by_leaving)
        if how == signal.SIGTERM:  # the leaver drained: what it started, it finished and committed
            assert not again, f"re-run after a clean leave: {again}"
    finally:
        results.close()
