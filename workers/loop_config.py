"""The knobs of one transactional worker loop (``workers.transactional_loop``) and what it committed."""

from __future__ import annotations

from dataclasses import dataclass

from bus.config import COOPERATIVE
from bus.crash_guard import DEFAULT_ATTEMPTS
from schemas.settings import WorkerSettings, defaults
from workers.retry import RetryPolicy

_DEFAULTS = defaults(WorkerSettings)


@dataclass(frozen=True)
class WorkerConfig:
    """Knobs of one worker; ``rewardstream.cli.worker`` builds it from Settings (whose defaults these are)."""

    role: str
    source_topic: str
    dlq_topic: str
    group_id: str
    transactional_id: str
    concurrency: int = _DEFAULTS.concurrency
    max_in_flight: int = _DEFAULTS.max_in_flight  # 0: 16 x concurrency, at least 64
    #: Each transaction costs the broker; results wait at most this long.
    commit_interval_s: float = _DEFAULTS.commit_interval_s
    commit_batch: int = 500
    poll_timeout_s: float = 0.02
    drain_timeout_s: float = _DEFAULTS.drain_timeout_s
    #: A revoked partition's started runs get this long to finish and commit (``workers.rebalancing``).
    rebalance_drain_s: float = _DEFAULTS.rebalance_drain_s
    #: The group's ``partition.assignment.strategy`` (``bus.config``): incremental, or ``range`` for a worker
    #: reading more than one topic (the executor), whose members must each own a share of every topic.
    assignment: str = COOPERATIVE
    kafka_timeout_s: float = 30.0
    handler_attempts: int = 5
    handler_backoff_s: float = 0.5
    handler_backoff_max_s: float = 10.0
    lag_every_s: float = 5.0
    timer_interval_s: float = 1.0
    #: Deaths of the process while one message ran alone before that message is dead-lettered unrun.
    crash_attempts: int = DEFAULT_ATTEMPTS
    #: The SASL user this worker's clients log in as (``RS_KAFKA_SASL_USERNAME``): what a refused ACL names.
    kafka_user: str | None = None

    @property
    def principal_config(self) -> dict[str, str]:
        """The part of a client config ``bus.access`` names a principal from (no password: none is needed)."""
        return {"sasl.username": self.kafka_user} if self.kafka_user else {}

    @property
    def handler_retry(self) -> RetryPolicy:
        """The retry policy of a failed handler run (no jitter: the loop's own timers spread the retries)."""
        return RetryPolicy(self.handler_attempts, self.handler_backoff_s, self.handler_backoff_max_s, jitter=0.0)

    @property
    def incremental(self) -> bool:
        """Rebalances move only the partitions that change owner (``on_assign`` gets the delta)."""
        return self.assignment == COOPERATIVE

    @property
    def buffer_limit(self) -> int:
        """Events buffered (accepted, not yet committed) before the partitions are paused."""
        return self.max_in_flight if self.max_in_flight > 0 else max(64, 16 * self.concurrency)


@dataclass
class WorkerStats:
    """What this worker committed (for tests and the CLI's exit line)."""

    committed: int = 0
    results: int = 0
    dead_letters: int = 0
    transactions: int = 0
    aborted: int = 0
    #: Producers replaced after a failure left them unusable (``workers.producer_recovery``).
    renewed: int = 0
