"""Verification of an image task on the docker backend: a FRESH container of the task's image, whose WORKDIR is
replaced by the agent's final one and nothing else of the episode, ``tests/`` staged at ``/tests``, then
``test.sh`` as root (as in Harbor) under the verifier's timeout; the reward is the file it wrote.

Why a fresh container: whatever the agent changed outside WORKDIR (site-packages, ``/usr``, ``/etc``, PATH,
``/logs``, ``/tests``, a process left running) never reaches the tests. What the host causes (the daemon
failing, the image missing) is a ``ContainerInfraError``: withheld and retried, never a 0. A test.sh past its
own timeout is a 0, as in Harbor: the tests ran the agent's code. ``rs-as-agent`` is installed for the tests to
run that code unprivileged (``as_agent``).
"""

from __future__ import annotations

import posixpath
import time
from dataclasses import dataclass
from typing import Any

from schemas.environments import TaskEnvironment, VerifierSuite
from workers.containers import as_agent
from workers.containers.image_containers import MAX_OUTPUT_BYTES, container_run, output_tail
from workers.containers.reward_file import JSON_FILE, MAX_REWARD_FILE_BYTES, TEXT_FILE, VerifierReward, read_reward

LOGS_DIR = "/logs/verifier"
TESTS_DIR = "/tests"
OUTPUT_FILE = "test-stdout.txt"
RUN_SCRIPT = (
    f"rm -f -- {LOGS_DIR}/{JSON_FILE} {LOGS_DIR}/{TEXT_FILE} && chmod 0700 {TESTS_DIR} && "
    f"chmod +x {TESTS_DIR}/test.sh && ({TESTS_DIR}/test.sh) > {LOGS_DIR}/{OUTPUT_FILE} 2>&1"
)


@dataclass(frozen=True, slots=True)
class Verification:
    """What one verification decided: the reward (and why), whether test.sh ran past its own timeout, the
    tail of its output, and how long the whole verification took; and its evidence: the id of the image the
    container ran (None if the daemon did not say) and the reward file as written (None: there was none)."""

    reward: VerifierReward
    timed_out: bool
    output: str
    seconds: float
    image_id: str | None = None
    reward_file: str | None = None
    backend: str = "docker"

    def as_json(self) -> dict[str, Any]:
        """JSON form for the CLI and a verdict's details."""
        return {"reward": self.reward.reward, "source": self.reward.source, "reason": self.reward.reason,
                "values": dict(self.reward.values), "timed_out": self.timed_out, "output": self.output,
                "seconds": round(self.seconds, 3), "image_id": self.image_id,
                "reward_file": self.reward_file}  # fmt: skip


def verify(
    client: Any, image: str, environment: TaskEnvironment, verifier: VerifierSuite, workdir_tar: bytes | None
) -> Verification:
    """Run ``verifier`` on the agent's final WORKDIR (``workdir_tar``: its contents as a canonical snapshot, which
    the host's snapshot rules made or checked; None: the image's own WORKDIR, untouched) in a fresh container of
    ``image``."""
    started = time.monotonic()
    with container_run(client, image, environment, purpose="verifier", env=verifier.env) as run:
        if workdir_tar is not None:
            run.replace_dir(environment.workdir, workdir_tar)
        run.stage(f"mkdir -p {TESTS_DIR} {LOGS_DIR} {posixpath.dirname(as_agent.PATH)}")
        run.put(TESTS_DIR, verifier.tests.tar())
        run.put(posixpath.dirname(as_agent.PATH), as_agent.install_tar())
        run.stage(as_agent.prepare_script(environment.workdir))
        ended = run.shell(RUN_SCRIPT, timeout_s=verifier.timeout_s, cwd=environment.workdir)
        caps = {OUTPUT_FILE: MAX_OUTPUT_BYTES}
        files = run.read_files(LOGS_DIR, caps, default_cap=MAX_REWARD_FILE_BYTES + 1)  # one byte over tells
        image_id = run.image_id
    reward = read_reward(files)
    written = None if reward.source is None or reward.source not in files else files[reward.source]
    if ended == "timeout":
        reward = VerifierReward(0.0, None, f"test.sh ran past its timeout ({verifier.timeout_s:g} s)")
    elif ended == "storage":
        reward = VerifierReward(0.0, None, f"the verifier's container wrote over {environment.storage_mb} MiB")
    output = output_tail(files.get(OUTPUT_FILE, b""))
    reward_file = None if written is None else written.decode("utf-8", "replace")
    return Verification(reward, ended == "timeout", output, time.monotonic() - started, image_id, reward_file)
