"""A task's oracle on the process backend (the docker backend's is ``containers.oracle``, whose rules hold here):
a fresh overlay of the task image's tree whose upper directory the host fills with ``solution/`` at
``/solution`` before anything runs, ``solve.sh`` run as root of the step's user namespace in WORKDIR, and the
WORKDIR it leaves read from the merged tree as a snapshot once its processes are gone. What ``tasks validate``
hands to the verifier to show the task can be solved, on the backend its episodes run on."""

from __future__ import annotations

import posixpath

from schemas.environments import Oracle, TaskEnvironment
from workers.containers.image_containers import MAX_OUTPUT_BYTES, output_tail
from workers.containers.oracle import LOGS_DIR, OUTPUT_FILE, RUN_SCRIPT, SOLUTION_DIR, oracle_env
from workers.episodes.snapshot import Caps, Packed
from workers.overlays.host import OverlayHost
from workers.overlays.overlay_run import overlay_run
from workers.overlays.overlay_step import merged_workdir


def run_oracle_on_overlay(
    host: OverlayHost, image: str, environment: TaskEnvironment, oracle: Oracle, *, timeout_s: float, caps: Caps
) -> tuple[Packed | None, str]:
    """The WORKDIR ``solve.sh`` leaves (None if it ran past ``timeout_s``) and the tail of its output
    (SnapshotError: a WORKDIR no snapshot may hold; SandboxError/OSError: the host's)."""
    rootfs = host.rootfs(image)
    with overlay_run(host, rootfs, environment, env=oracle_env(oracle)) as run:
        run.put_dir(SOLUTION_DIR, oracle.solution.tar(), 0o755)
        run.mount()
        ended = run.run(["bash", "-c", RUN_SCRIPT], timeout_s=timeout_s, cwd=environment.workdir,
                        output_cap=0).ended  # fmt: skip
        read = run.read_file(posixpath.join(LOGS_DIR, OUTPUT_FILE), MAX_OUTPUT_BYTES)  # inside the tree's root
        output = output_tail(read[0] if isinstance(read, tuple) else b"")
        return (merged_workdir(run, environment.workdir, caps) if ended == "finished" else None), output
