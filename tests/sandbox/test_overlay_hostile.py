"""Hostile agents on the process backend's image tasks (overlays under bubblewrap), family by family: the host
(root) led out of the tree, a worker crashed or left holding mounts, cgroups, processes or fds, an episode's
changes reaching its verification, the host's memory flooded, a delta the host cannot restore. Every hostile
command runs as a step or a verification inside the overlay sandbox under test; after each test nothing of it
may remain on the host.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from schemas.status import REJECTED, SandboxStatus
from schemas.tasks import Task
from tests.sandbox.image_task import hello, verifier_of
from tests.sandbox.test_image_steps import LIMITS, Episode
from workers.containers.delta import EMPTY, Delta, DeltaCaps, Entry, pack_delta
from workers.containers.task_host import ImageTaskHost
from workers.episodes.snapshot import Caps, SnapshotError
from workers.episodes.step import StepAction
from workers.overlays import ids
from workers.overlays.host import OverlayHost
from workers.overlays.overlay_step import overlay_workdir, run_overlay_step
from workers.overlays.overlay_verification import verify_on_overlay

_GONE_S = 10.0


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> Task:
    return hello(tmp_path_factory.mktemp("task"))


@pytest.fixture
def audited(overlays: OverlayHost) -> Iterator[OverlayHost]:
    """The overlay host, checked after the test: no mount under its directory but its user namespace, no run
    directory, no step cgroup, no process of the agents' ids, no fd of this process but those it had (sockets aside)."""
    fds = _fds()
    yield overlays
    deadline = time.monotonic() + _GONE_S
    while (left := _leftovers(overlays, fds)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, left


def _leftovers(overlays: OverlayHost, fds: set[str]) -> list[str]:
    left: list[str] = []
    mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    left += [m for m in mounts if m.startswith(f"{overlays.directory}/") and m != str(overlays.userns)]
    left += [str(p) for p in overlays.directory.iterdir() if p.name.startswith("run-")]
    left += [str(g) for parent in overlays.cgroups.parents() for g in parent.glob(f"{os.getpid()}-image-*")]
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            uid = next(int(line.split()[1]) for line in status.read_text().splitlines() if line.startswith("Uid:"))
        except (OSError, StopIteration):
            continue
        if uid >= ids.BASE:
            left.append(f"process {status.parent.name} of uid {uid}")
    left += [f"fd to {target}" for target in _fds() - fds]
    return left


def _fds() -> set[str]:
    """What this process's fds lead to, but sockets (the docker client's pooled connections)."""
    out: set[str] = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if not target.startswith("socket:"):
            out.add(f"{fd}:{target}")
    return out


def _episode(audited: OverlayHost, image_of: Any, task: Task, caps: DeltaCaps | None = None) -> Episode:
    return Episode(ImageTaskHost(None, image_of, audited), image_of(task), task, caps)


# (2): what the agent does is its outcome, never the host failing nor an exception out of the worker's call


def test_a_write_past_the_storage_is_refused_not_the_hosts_failure(
    audited: OverlayHost, image_of: Any, task: Task
) -> None:
    """A write action bigger than the task's storage_mb (its tmpfs) but under the delta's caps: ENOSPC is the
    agent's, a rejected write, not a sandbox_error the worker would retry."""
    episode = _episode(audited, image_of, task)
    assert task.environment is not None
    episode.environment = task.environment.model_copy(update={"storage_mb": 16})
    episode.sh("echo before > kept")
    outcome = episode.step(StepAction.write("big", b"x" * (20 << 20)))
    assert outcome.status == REJECTED, outcome.reason
    assert "storage_mb" in (outcome.reason or "")
    assert episode.sh("cat kept; test -e big || echo no-half-written-file") == "before\nno-half-written-file\n"


def test_a_state_the_host_cannot_restore_is_an_outcome_not_a_crash(
    audited: OverlayHost, image_of: Any, task: Task
) -> None:
    """A delta whose restore fails (a file inside a file, which only a corrupt or forged delta holds) ends as the
    step's sandbox_error, and its WORKDIR as unusable: never an exception out of the worker's call."""
    assert task.environment is not None
    forged = Delta(b"", "0" * 64, (Entry("/app", "file"), Entry("/app/x", "file")), ())
    outcome = run_overlay_step(audited, image_of(task), task.environment, forged, StepAction.exec("true"),
                               DeltaCaps(), LIMITS)  # fmt: skip
    assert outcome.status == SandboxStatus.SANDBOX_ERROR
    assert "/app/x" in (outcome.reason or "")
    with pytest.raises(SnapshotError, match="cannot be restored"):
        overlay_workdir(audited, image_of(task), task.environment, forged, Caps())


def test_a_step_over_the_caps_leaves_the_worker_no_fd(audited: OverlayHost, image_of: Any, task: Task) -> None:
    """Directories past the delta's caps: the read stops with the directory it was at open (the audit counts
    this process's fds), every step of an episode that does so would leak one more."""
    few = _episode(audited, image_of, task, DeltaCaps(max_entries=100))
    outcome = few.step(StepAction.exec("mkdir /tmp/d && cd /tmp/d && seq 1 150 | xargs mkdir"))
    assert outcome.status == SandboxStatus.OK, outcome.stderr
    assert not outcome.workspace_kept
    assert "over 100 changed" in (outcome.reason or "")


@pytest.mark.parametrize(
    "hostile",
    [
        "trap '' TERM HUP; f() { f | f & }; f; sleep 60",  # a fork bomb deaf to SIGTERM, past its timeout
        "exec >&- 2>&-; (trap '' TERM; setsid sleep 60 &); sleep 60",  # no output left to close, a daemon
    ],
)
def test_a_step_past_its_timeout_leaves_no_process_cgroup_or_mount(
    audited: OverlayHost, image_of: Any, task: Task, hostile: str
) -> None:
    """The audit after the test is the check: the step's pid namespace, cgroup and overlay are all gone."""
    outcome = _episode(audited, image_of, task).step(StepAction.exec(hostile, timeout_s=2))
    assert outcome.status == SandboxStatus.TIMEOUT, (outcome.status, outcome.stderr[-200:])


# (4): what costs the agent no storage costs the host no memory


@pytest.mark.parametrize(
    "flood",
    [
        "mkdir /tmp/f && cd /tmp/f && seq -f '.wh.%g' 1 3000 | xargs touch",  # whiteout-like names: dropped
        "mkdir /tmp/f && python3 -c \"[open(b'/tmp/f/\\xff%d' % i, 'w').close() for i in range(3000)]\"",  # not UTF-8
    ],
)
def test_a_flood_of_names_is_not_listed_into_the_hosts_memory(
    audited: OverlayHost, image_of: Any, task: Task, flood: str
) -> None:
    """Names cost the agent inodes only: the host stops reading at what a delta may hold (+ what it names as
    dropped) instead of listing millions of them, and the step's filesystem is not kept."""
    few = _episode(audited, image_of, task, DeltaCaps(max_entries=100))
    outcome = few.step(StepAction.exec(flood, timeout_s=120))
    assert outcome.status == SandboxStatus.OK, (outcome.stderr, outcome.reason)
    assert not outcome.workspace_kept
    assert "over 100 changed" in (outcome.reason or "")
    assert few.delta.sha256 == EMPTY.sha256


# (5): the delta round trip: a valid delta of the other backend restores here as there


@pytest.mark.parametrize("backend", ["docker", "process"])
def test_a_deleted_directory_with_new_paths_inside_restores_on_both_backends(
    backend: str, audited: OverlayHost, docker_client: Any, image_of: Any, task: Task
) -> None:
    """``rm -rf /etc/apt; mkdir /etc/apt; ...`` as a delta may spell it (the directory deleted, paths added in it),
    and a link replacing a directory whose contents the delta also deletes: restored, not a crash."""
    host = ImageTaskHost(docker_client, image_of, None if backend == "docker" else audited)
    episode = Episode(host, image_of(task), task)
    episode.delta = pack_delta(
        [
            Entry("/etc/apt/only", "file", 0o644, data=b"x\n"),
            Entry("/usr/share/doc", "symlink", 0o777, target="/tmp"),
        ],
        ["/etc/apt", "/usr/share/doc/bash", "/usr/share/doc/tar"],
    )
    assert episode.sh("ls -A /etc/apt; readlink /usr/share/doc") == "only\n/tmp\n"


# (3): nothing of an episode but its WORKDIR reaches its verification


def test_only_the_workdir_of_a_hostile_episode_reaches_its_verifier(
    audited: OverlayHost, image_of: Any, tmp_path: Path
) -> None:
    """An episode plants a reward, tests, a tampered rs-as-agent, a python hook, a process and links; the
    verification's fresh overlay sees its WORKDIR only (the links there resolve in the verifier's own tree)."""
    test_sh = (
        '#!/bin/bash\nfail() { echo "$1"; echo 0 > /logs/verifier/reward.txt; exit 0; }\n'
        "[ -e /logs/verifier/reward.json ] && fail 'a planted reward.json survived'\n"
        "grep -q 'AGENT''MARK' /tests/test.sh /usr/local/bin/rs-as-agent && fail 'a planted script is there'\n"
        "python3 -c 'import agenthook' 2>/dev/null && fail 'a planted module is importable'\n"
        "grep -q tuned /etc/motd && fail 'a change outside WORKDIR survived'\n"
        "cat /proc/[0-9]*/cmdline | tr '\\0' ' ' | grep -q 'sleep [6]00' && fail 'a process of the episode lives'\n"
        "[ \"$(cat /app/answer)\" = 42 ] || fail 'the WORKDIR is missing'\n"
        "[ \"$(readlink /app/tests-link)\" = /tests/test.sh ] || fail 'a link is not kept as a link'\n"
        "rs-as-agent cat /app/tests-link > /dev/null 2>&1 && fail 'agent code read the tests through a link'\n"
        "rs-as-agent sh -c 'echo 1 > /app/logs-link/reward.txt' 2>/dev/null && fail 'agent code wrote the reward'\n"
        "echo 1 > /logs/verifier/reward.txt\n"
    )
    task = hello(tmp_path, {"tests/test.sh": test_sh})
    assert task.environment is not None
    episode = _episode(audited, image_of, task)
    purelib = "$(python3 -c 'import sysconfig; print(sysconfig.get_paths()[\"purelib\"])')"
    episode.sh(
        "set -e; mkdir -p /logs/verifier /tests; echo '{\"reward\": 1}' > /logs/verifier/reward.json;"
        " echo 'echo AGENTMARK; echo 1 > /logs/verifier/reward.txt' > /tests/test.sh;"
        " echo '#!/bin/sh\n# AGENTMARK\nexec \"$@\"' > /usr/local/bin/rs-as-agent;"
        f" echo 'import os' > {purelib}/agenthook.py; echo tuned >> /etc/motd; (setsid sleep 600 &);"
        " echo 42 > answer; ln -s /tests/test.sh tests-link; ln -s /logs/verifier logs-link"
    )
    workdir = overlay_workdir(audited, image_of(task), task.environment, episode.delta, Caps())
    got = verify_on_overlay(audited, image_of(task), task.environment, verifier_of(task), workdir.data)
    assert (got.reward.reward, got.reward.source, got.timed_out) == (1.0, "reward.txt", False), got.output
