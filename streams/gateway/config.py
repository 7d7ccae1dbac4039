"""What one gateway replica needs to know, from Settings: bind, tokens, caps, topics and its own identity.

Why a refusal here: a gateway reachable from other machines runs any program it is sent (in a sandbox, on
our executors) and publishes generations under any run id, so on a non-loopback bind it must have tokens;
the check is made before anything binds, and the error says which setting to set.
"""

from __future__ import annotations

import ipaddress
import zlib
from collections.abc import Mapping
from dataclasses import dataclass

from bus.instance import new_instance_id
from schemas.errors import ConfigError
from schemas.settings import Settings, shared_fields
from schemas.topics import catalog_for, topic_for


def is_loopback(host: str) -> bool:
    """Whether ``host`` binds only to this machine (127.0.0.0/8, ::1, ``localhost``)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def parse_tokens(raw: str | None) -> tuple[str, ...]:
    """Comma-separated tokens, blanks dropped; a token with whitespace inside is refused (a paste error)."""
    if raw is None:
        return ()
    tokens = tuple(t.strip() for t in raw.split(",") if t.strip())
    for n, token in enumerate(tokens):
        if any(ch.isspace() for ch in token):
            raise ConfigError(f"RS_GATEWAY_TOKENS: token {n + 1} contains whitespace")
        if len(token) < 16:
            raise ConfigError(f"RS_GATEWAY_TOKENS: token {n + 1} is shorter than 16 characters")
    return tokens


def home_partition(instance_id: str, partitions: int) -> int:
    """The partition of the replies topic this replica reads (replicas that share one filter by id)."""
    return zlib.crc32(instance_id.encode()) % partitions


def default_instance_id() -> str:
    """host-pid-random: a restarted replica is a new one (a reply to the old one is ignored)."""
    return new_instance_id("gw-")


@dataclass(frozen=True)
class GatewayConfig:
    """One replica's configuration; ``from_settings`` refuses an open bind without tokens."""

    host: str
    port: int
    tokens: tuple[str, ...]
    token_concurrency: int
    max_body_bytes: int
    body_timeout_s: float
    peer_body_reads: int
    max_batch: int
    reward_wait_s: float
    run_queue_s: float
    reward_cache: int
    reward_lookback: int
    kafka_timeout_s: float
    instance_id: str
    kafka: Mapping[str, str]
    partitions: int
    generations_topic: str
    rewards_topic: str
    run_requests_topic: str
    run_replies_topic: str

    @classmethod
    def from_settings(cls, settings: Settings, *, host: str | None = None, port: int | None = None) -> GatewayConfig:
        """The replica these settings describe (``host``/``port`` override the bind)."""
        bind = settings.gateway.host if host is None else host
        raw = settings.gateway.tokens.get_secret_value() if settings.gateway.tokens is not None else None
        tokens = parse_tokens(raw)
        if not tokens and not is_loopback(bind):
            raise ConfigError(
                f"the gateway would listen on {bind}, which is not loopback, without tokens: set RS_GATEWAY_TOKENS "
                "(comma-separated bearer tokens, 16+ characters each) or bind to 127.0.0.1 (RS_GATEWAY_HOST)"
            )
        specs = catalog_for(settings)
        own = {
            "host": bind,
            "port": settings.gateway.port if port is None else port,
            "tokens": tokens,
            "instance_id": settings.gateway.instance_id or default_instance_id(),
        }
        return cls(
            **{**shared_fields(settings.gateway, cls), **own},  # the caps and timeouts as they are set
            kafka=settings.kafka_client_config(),
            partitions=settings.kafka.topic_partitions,
            generations_topic=topic_for("generations", specs).name,
            rewards_topic=topic_for("rewards", specs).name,
            run_requests_topic=topic_for("run_requests", specs).name,
            run_replies_topic=topic_for("run_replies", specs).name,
        )

    @property
    def reply_partition(self) -> int:
        """This replica's partition of the replies topic."""
        return home_partition(self.instance_id, self.partitions)
