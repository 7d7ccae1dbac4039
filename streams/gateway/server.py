"""Run one gateway replica under uvicorn until SIGTERM/SIGINT (uvicorn drains open requests first).

The socket is bound here, before uvicorn starts, so a taken port is one clear error (and port 0 reports the
port it got). Kafka need not be up: the tails keep trying, and ``/health`` and the API answer 503 until they
read (``up --pipeline`` waits for ``/health`` to answer 200).
"""

from __future__ import annotations

import logging
import socket
import sys
from collections.abc import Callable

import uvicorn

from schemas.errors import ConfigError
from schemas.kafka_acls import GATEWAY_GROUP_PREFIX
from streams.gateway.app import GatewayDeps, create_app
from streams.gateway.bridge import Publisher, ReplyTail, RewardTail
from streams.gateway.config import GatewayConfig
from streams.gateway.metrics import GatewayMetrics

log = logging.getLogger("rewardstream.gateway")


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (IPv4 or IPv6); a taken port is a ConfigError naming the setting."""
    try:
        family, kind, proto, _name, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as exc:
        raise ConfigError(f"cannot resolve the gateway's host {host!r} (RS_GATEWAY_HOST): {exc}") from exc
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(1024)
    except OSError as exc:
        sock.close()
        raise ConfigError(
            f"the gateway cannot listen on {host}:{port} ({exc.strerror}): choose another port with RS_GATEWAY_PORT "
            "(or --port)"
        ) from exc
    sock.set_inheritable(True)
    return sock


def serve(
    config: GatewayConfig,
    task_exists: Callable[[str], bool],
    *,
    log_level: str = "info",
    task_version: Callable[[str], str | None] | None = None,
) -> None:
    """Serve until stopped; the Kafka clients are closed on the way out. ``task_version`` gives a task's latest
    version, which the generations of ``/v1/rewards`` and ``/get_reward`` are pinned to (None: unpinned)."""
    sock = bind(config.host, config.port)
    port = sock.getsockname()[1]
    metrics = GatewayMetrics()
    publisher = Publisher(config.kafka, config.kafka_timeout_s)
    replies = ReplyTail(config.kafka, config.run_replies_topic, config.reply_partition, config.instance_id)
    rewards = RewardTail(
        config.kafka, config.rewards_topic, cache_size=config.reward_cache, lookback=config.reward_lookback,
        group=f"{GATEWAY_GROUP_PREFIX}{config.instance_id}",
    )  # fmt: skip
    try:
        replies.start()
        rewards.start()
        deps = GatewayDeps(config, publisher, replies, rewards, task_exists, metrics)
        if task_version is not None:
            deps.task_version = task_version
        app = create_app(deps)
        server = uvicorn.Server(
            uvicorn.Config(
                app,
                log_level=log_level,
                access_log=False,
                lifespan="off",
                server_header=False,
                timeout_graceful_shutdown=30,
                timeout_keep_alive=30,
            )
        )
        shown = f"[{config.host}]" if ":" in config.host else config.host
        print(
            f"gateway: listening on http://{shown}:{port} (instance {config.instance_id}, replies partition "
            f"{config.reply_partition}, tokens {'required' if config.tokens else 'off (loopback)'})",
            file=sys.stderr,
            flush=True,
        )
        server.run(sockets=[sock])
    finally:
        rewards.close()
        replies.close()
        publisher.close()
        sock.close()
