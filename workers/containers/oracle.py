"""A task's oracle on the docker backend: ``solution/`` staged at ``/solution`` of a container of the task's
image, ``solve.sh`` run as root in WORKDIR (as Harbor's oracle agent does), the WORKDIR it leaves as a snapshot.
What ``tasks validate`` hands to the verifier to show the task can be solved."""

from __future__ import annotations

from typing import Any

from schemas.environments import Oracle, TaskEnvironment
from workers.containers.image_containers import MAX_OUTPUT_BYTES, container_run, output_tail
from workers.containers.workdir import workdir_snapshot
from workers.episodes.snapshot import Caps, Packed

SOLUTION_DIR = "/solution"
#: Where solve.sh's output goes (the agent's logs, as in Harbor), and the file.
LOGS_DIR = "/logs/agent"
OUTPUT_FILE = "oracle.txt"
#: What runs the oracle on either backend: as root, cwd WORKDIR.
RUN_SCRIPT = (
    f"chmod +x {SOLUTION_DIR}/solve.sh && mkdir -p {LOGS_DIR} && "
    f"({SOLUTION_DIR}/solve.sh) > {LOGS_DIR}/{OUTPUT_FILE} 2>&1"
)


def oracle_env(oracle: Oracle) -> dict[str, str]:
    """The environment solve.sh gets besides the task's: no package manager prompts, then the task's own."""
    return {"DEBIAN_FRONTEND": "noninteractive", **oracle.env}


def run_oracle(
    client: Any, image: str, environment: TaskEnvironment, oracle: Oracle, *, timeout_s: float, caps: Caps
) -> tuple[Packed | None, str]:
    """The WORKDIR ``solve.sh`` leaves (None if it ran past ``timeout_s``) and the tail of its output."""
    with container_run(client, image, environment, purpose="oracle", env=oracle_env(oracle)) as run:
        run.stage(f"mkdir -p {SOLUTION_DIR}")
        run.put(SOLUTION_DIR, oracle.solution.tar())
        finished = run.shell(RUN_SCRIPT, timeout_s=timeout_s, cwd=environment.workdir) == "finished"
        output = output_tail(run.read_files(LOGS_DIR, {}, default_cap=MAX_OUTPUT_BYTES).get(OUTPUT_FILE, b""))
        return (workdir_snapshot(run, environment.workdir, caps) if finished else None), output
