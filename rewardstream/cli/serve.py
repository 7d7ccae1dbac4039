"""``rewardstream serve [--host H] [--port P]``: the HTTP gateway (SandboxFusion ``/run_code``, rewards).

The CLI wires it: the gateway (``streams.gateway``) talks only to Kafka; whether a task exists, and its latest
version (each generation is pinned to it), come from the task registry (``workers.tasks``), handed to it here.
"""

from __future__ import annotations

from collections.abc import Callable

import typer

from rewardstream.cli.common import configure_logging, load_settings
from rewardstream.cli.main import app
from schemas.settings import GatewaySettings, Settings, defaults, env_name


def task_checker(settings: Settings) -> Callable[[str], bool]:
    """Whether a task id is in the registry (its public part, what trainers may know of)."""
    from workers.tasks.reader import registry_from_settings

    registry = registry_from_settings(settings)

    def exists(task_id: str) -> bool:
        try:
            registry.public(task_id)
        except Exception:  # not found, or an id that cannot be a file name: no such task either way
            return False
        return True

    return exists


def task_versions(settings: Settings) -> Callable[[str], str | None]:
    """A task's latest version in the registry, read at each call (None when it cannot be told): what the
    gateway pins each generation to, so every role grades it against that one version."""
    from workers.tasks.reader import registry_from_settings

    registry = registry_from_settings(settings)

    def latest(task_id: str) -> str | None:
        try:
            return registry.latest_version(task_id)
        except Exception:  # not found or unreadable: the generation goes unpinned (the roles take the latest)
            return None

    return latest


def _default(field: str) -> str:
    """``RS_GATEWAY_<FIELD>, <its default>``, for an option's help."""
    return f"{env_name(f'gateway.{field}')}, {getattr(defaults(GatewaySettings), field)}"


@app.command()
def serve(
    host: str | None = typer.Option(None, "--host", help=f"bind address (default {_default('host')})"),
    port: int | None = typer.Option(None, "--port", min=0, max=65535, help=f"port (default {_default('port')})"),
) -> None:
    """Serve the HTTP gateway until SIGTERM: SandboxFusion-compatible /run_code, /v1/rewards, /get_reward
    (OpenRLHF), /openapi.json. Tokens (RS_GATEWAY_TOKENS) are required unless it binds to loopback."""
    from streams.gateway.config import GatewayConfig
    from streams.gateway.server import serve as run_gateway

    settings = load_settings()
    configure_logging()
    config = GatewayConfig.from_settings(settings, host=host, port=port)
    run_gateway(config, task_checker(settings), task_version=task_versions(settings))
