"""The Harbor half of ``rewardstream demo``: the shipped Harbor tasks (``rewardstream tasks examples``) written,
loaded (their images built on this host's docker daemon) and played by scripted agents as episodes.

A fixing agent plays every task (1.0); on every other task an agent gives up (submits the buggy code: every case
fails, 0.0), on the rest one hacks (looks for the fix in the git history, which the image does not keep, plants
``conftest.py``/``sitecustomize.py``/``unittest.py`` in WORKDIR and writes the reward file by hand: 0.0).
"""

from __future__ import annotations

import contextlib
import io

from rich.console import Console

from rewardstream.cli.demo_episodes import DemoEpisode
from schemas.settings import Settings
from schemas.tasks import Task
from workers.tasks.harbor.examples import EXAMPLES
from workers.tasks.harbor.examples.agents import fix_actions, give_up_actions, hack_actions


def load_harbor_tasks(console: Console, settings: Settings) -> None:
    """Write the shipped tasks under the cache directory and load them into the registry, images built."""
    from rewardstream.cli.task_images import task_image_source
    from workers.sandbox.docker_backend import docker_client
    from workers.tasks.harbor.examples import write_tasks
    from workers.tasks.registry import TaskRegistry

    out = settings.local.cache_dir / "harbor-examples"
    write_tasks(out)
    client = docker_client(settings)
    image_of = task_image_source(settings, client)

    def build(tasks: list[Task]) -> None:
        for task in tasks:
            image_of(task)

    try:
        with contextlib.redirect_stderr(io.StringIO()):  # a warning per fix branch and tag the images leave out
            report = TaskRegistry.from_settings(settings).load_dir(out, prepare=build)
    finally:
        client.close()
    stored = len(report.added) + len(report.updated) + len(report.unchanged)
    console.print(
        f"loaded {stored} Harbor tasks from {out}; their images keep only HEAD's git history (the branches and "
        "tags holding the fixes are not in them)"
    )


def harbor_episodes() -> list[DemoEpisode]:
    """A fixing agent on every shipped task; a giving-up or a hacking one on every other task."""
    out: list[DemoEpisode] = []
    for i, spec in enumerate(EXAMPLES):
        out.append(DemoEpisode(spec.name, "fix", fix_actions(spec), 1.0))
        if i % 2 == 0:
            out.append(DemoEpisode(spec.name, "give-up", give_up_actions(spec), 0.0))
        else:
            out.append(DemoEpisode(spec.name, "hack", hack_actions(spec), 0.0))
    return out
