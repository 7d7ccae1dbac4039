"""A worker's share of the fleet's sandbox start rate (``RS_SANDBOX_FLEET_START_RATE``), paced by a token bucket.

Why: when KEDA scales a role from 0 to 50 pods, all of them start their first runs at once, and what every host
shares (the S3 task registry and artifacts, image pulls, the Kubernetes API server) takes a storm that host
admission (``admission``) cannot see: a host paces only itself. No coordinator is added, because the consumer
group already is one: a member that owns ``k`` of the ``n`` partitions its group reads paces its starts at
``fleet_rate * k / n``. A partition has one owner at a time, so the members' rates add up to the fleet rate
(never more; exactly, once the group has settled) whatever the number of pods, and each member learns of every
change from its own rebalance callbacks: no extra traffic. A member owning nothing starts nothing.

The bucket holds at most ``max(1, rate x BURST_S)`` tokens, and a share that grows brings no tokens with it
(they come at the new rate), so the fleet's starts in any window of ``w`` seconds stay within
``fleet_rate x w`` plus the members' bursts.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from schemas.errors import SandboxError
from schemas.settings import Settings

log = logging.getLogger(__name__)

#: How many seconds of its rate a member may start at once after an idle spell (at least one start).
BURST_S = 1.0
_EPSILON = 1e-9


def fleet_share(fleet_rate: float, owned: int, total: int) -> float:
    """A member's start rate: the fleet's, times the fraction of its group's partitions it owns."""
    if fleet_rate <= 0 or owned <= 0 or total <= 0:
        return 0.0
    return fleet_rate * min(owned, total) / total


def burst_of(rate: float) -> float:
    """The most tokens a bucket filling at ``rate`` holds: one second of it, at least one start (none at 0)."""
    return max(1.0, rate * BURST_S) if rate > 0 else 0.0


@dataclass
class TokenBucket:
    """Tokens at ``rate`` per second, at most ``burst_of(rate)``. Pure: the caller gives the time."""

    rate: float = 0.0
    tokens: float = 0.0
    stamp: float = 0.0

    def _refill(self, now: float) -> None:
        if now > self.stamp:
            self.tokens = min(burst_of(self.rate), self.tokens + (now - self.stamp) * self.rate)
            self.stamp = now

    def set_rate(self, rate: float, now: float) -> None:
        """From ``now`` on, fill at ``rate``; tokens above its burst are dropped, none are added."""
        self._refill(now)
        self.rate = rate
        self.tokens = min(self.tokens, burst_of(rate))

    def take(self, now: float) -> float:
        """Take a token (0.0), or say how long until there is one (``inf`` at rate 0; nothing is taken)."""
        self._refill(now)
        if self.tokens >= 1.0 - _EPSILON:  # a rounding short of a whole token must not wait forever
            self.tokens -= 1.0
            return 0.0
        if self.rate <= 0:
            return math.inf
        return (1.0 - self.tokens) / self.rate


class FleetPace:
    """One worker process's pacing of its sandbox starts at its share of ``fleet_rate``; thread-safe.

    The worker loop calls ``owned`` after every assignment change (``workers.rebalancing``); each sandbox start
    calls ``acquire`` (``Admission.admit``, after the host's slot and pace, so the start follows its token)."""

    def __init__(self, fleet_rate: float, clock: Callable[[], float] = time.monotonic) -> None:
        if fleet_rate <= 0:
            raise ValueError("a fleet pace needs a positive fleet rate (0 means none: build no FleetPace)")
        self.fleet_rate = fleet_rate
        self._clock = clock
        self._bucket = TokenBucket(stamp=clock())
        self._changed = threading.Condition()
        self._closed = False
        self.partitions = (0, 0)

    @property
    def rate(self) -> float:
        """This worker's current share of the fleet's starts per second."""
        return self._bucket.rate

    def owned(self, owned: int, total: int) -> None:
        """This member now owns ``owned`` of the ``total`` partitions its group reads."""
        with self._changed:
            if (owned, total) != self.partitions:
                log.info("fleet share: %d of %d partitions, %.4g of the fleet's %.4g sandbox starts/s",
                         owned, total, fleet_share(self.fleet_rate, owned, total), self.fleet_rate)  # fmt: skip
            self.partitions = (owned, total)
            self._bucket.set_rate(fleet_share(self.fleet_rate, owned, total), self._clock())
            self._changed.notify_all()

    def acquire(self) -> float:
        """Wait for a start token; how long it waited. Raises ``SandboxError`` when this worker owns no
        partition (its runs belong to partitions it gave up: nothing of them may start) or is closed."""
        began = self._clock()
        with self._changed:
            while True:
                if self._closed:
                    raise SandboxError("the worker is stopping: no sandbox starts")
                wait = self._bucket.take(self._clock())
                if wait == 0.0:
                    return self._clock() - began
                if math.isinf(wait):
                    raise SandboxError(
                        "this worker owns no partition of its input, so its share of the fleet's sandbox starts "
                        "(RS_SANDBOX_FLEET_START_RATE) is 0: the run belongs to a partition it gave up"
                    )
                self._changed.wait(wait)

    def close(self) -> None:
        """Every waiting and later ``acquire`` raises."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()


def fleet_pace(settings: Settings) -> FleetPace | None:
    """The pace of a worker that starts sandboxes, if ``RS_SANDBOX_FLEET_START_RATE`` sets a fleet cap."""
    rate = settings.sandbox.fleet_start_rate
    return FleetPace(rate) if rate > 0 else None
