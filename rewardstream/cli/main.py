"""Entry point of the ``rewardstream`` command: registers each area's commands.

Errors from rewardstream become one plain line on stderr and exit code 2; never a stack trace.
"""

from __future__ import annotations

import sys

import typer

from schemas.errors import RewardstreamError

app = typer.Typer(
    name="rewardstream",
    help="Reward pipeline for RL post-training of code models.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def _register() -> None:
    """Import each command module; each adds its commands to ``app``."""
    from rewardstream.cli import (
        demo,  # noqa: F401
        episode,  # noqa: F401
        explain,  # noqa: F401
        grade,  # noqa: F401
        logs,  # noqa: F401
        replay,  # noqa: F401
        reward,  # noqa: F401
        sandbox,  # noqa: F401
        serve,  # noqa: F401
        services,  # noqa: F401
        submit,  # noqa: F401
        tasks,  # noqa: F401
        topics,  # noqa: F401
        worker,  # noqa: F401
    )


def main() -> None:
    """Console-script entry point."""
    _register()
    try:
        app()
    except RewardstreamError as exc:
        print(f"rewardstream: error: {exc}", file=sys.stderr)
        sys.exit(2)
