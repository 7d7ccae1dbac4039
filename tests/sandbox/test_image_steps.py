"""Agent steps on image tasks, on both backends: each step a fresh container of the task image (docker) or a
fresh overlay of its unpacked tree under bubblewrap (process) with the episode's delta restored, so whatever a
step changes anywhere is what the next step sees, and nothing else (no process, no mount) survives it.

The task image is built once for the module (tests.sandbox.image_task's sample task: python:3.11-slim, WORKDIR
/app holding hello.py) and removed after it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from schemas.status import REJECTED, SandboxStatus
from schemas.tasks import Task
from tests.sandbox.image_task import CreatedContainers, hello
from workers.containers.delta import EMPTY, Delta, DeltaCaps, read_delta
from workers.containers.image_step import run_image_step
from workers.containers.task_host import ImageTaskHost
from workers.episodes.step import StepAction, StepLimits, StepOutcome
from workers.overlays.host import OverlayHost
from workers.overlays.overlay_step import run_overlay_step

#: Where ``pip install`` puts a module in the task image.
PURELIB = "$(python3 -c 'import sysconfig; print(sysconfig.get_paths()[\"purelib\"])')"
LIMITS = StepLimits(output_cap_bytes=4096, read_cap_bytes=4096)


Stepper = Callable[..., StepOutcome]


class Episode:
    """A sequence of steps on one task, each from the delta the last one left, on one backend."""

    def __init__(self, host: ImageTaskHost, image: str, task: Task, caps: DeltaCaps | None = None) -> None:
        assert task.environment is not None
        self.image, self.environment = image, task.environment
        self.run: Stepper = (
            functools.partial(run_image_step, host.client)
            if host.overlays is None
            else functools.partial(run_overlay_step, host.overlays)
        )
        self.caps = caps or DeltaCaps()
        self.delta: Delta = EMPTY

    def step(self, action: StepAction) -> StepOutcome:
        outcome = self.run(self.image, self.environment, self.delta, action, self.caps, LIMITS)
        assert outcome.status != SandboxStatus.SANDBOX_ERROR, outcome.reason
        self.delta = read_delta(outcome.snapshot, self.caps)
        assert self.delta.sha256 == outcome.sha256
        return outcome

    def sh(self, script: str, timeout_s: float = 30.0) -> str:
        outcome = self.step(StepAction.exec(script, timeout_s=timeout_s))
        assert outcome.status == SandboxStatus.OK, (outcome.status, outcome.stderr, outcome.reason)
        return outcome.stdout.decode()


@pytest.fixture(scope="module")
def module_task(tmp_path_factory: pytest.TempPathFactory) -> Task:
    return hello(tmp_path_factory.mktemp("task"))


@pytest.fixture(params=["docker", "process"])
def host(request: pytest.FixtureRequest, docker_client: Any, image_of: Any) -> ImageTaskHost:
    """The backend a test's steps run on: containers, or overlays under bubblewrap."""
    overlays = request.getfixturevalue("overlays") if request.param == "process" else None
    return ImageTaskHost(docker_client, image_of, overlays)


@pytest.fixture
def episode(host: ImageTaskHost, image_of: Any, module_task: Task) -> Episode:
    return Episode(host, image_of(module_task), module_task)


def test_changes_anywhere_are_what_the_next_step_sees(
    episode: Episode, monkeypatch: pytest.MonkeyPatch, docker_client: Any
) -> None:
    created = CreatedContainers(monkeypatch)
    episode.sh(
        f"set -e; echo 'VALUE = 42' > {PURELIB}/agentmod.py; echo tuned >> /etc/motd;"
        " rm hello.py; mkdir -p build/out && echo o > build/out/x.o; ln -s /etc/motd motd-link; chmod 0700 build;"
        " rm -rf /usr/share/doc && mkdir /usr/share/doc && echo only > /usr/share/doc/README"
    )
    assert episode.step(StepAction.write("notes/todo.txt", b"relative to WORKDIR")).status == SandboxStatus.OK
    seen = episode.sh(
        "pwd; python3 -c 'import agentmod; print(agentmod.VALUE)'; tail -1 /etc/motd; ls; cat notes/todo.txt; echo;"
        " stat -c '%a' build; readlink motd-link; ls /usr/share/doc"
    )
    assert seen.split("\n") == [
        "/app", "42", "tuned", "build", "motd-link", "notes", "relative to WORKDIR", "700", "/etc/motd", "README", "",
    ]  # fmt: skip
    read = episode.step(StepAction.read("motd-link"))
    assert read.status == SandboxStatus.OK
    assert read.content is not None
    assert read.content.endswith(b"tuned\n")
    assert created.left(docker_client) == []


def test_a_step_that_changes_nothing_keeps_the_same_address(episode: Episode) -> None:
    episode.sh("echo state > /root/state")
    before = episode.delta.sha256
    assert episode.sh("cat /root/state; ls / > /dev/null") == "state\n"
    assert episode.delta.sha256 == before
    assert episode.step(StepAction.read("hello.py")).content == b'print("helo")\n'
    assert episode.delta.sha256 == before


def test_nothing_but_files_survives_a_step(episode: Episode) -> None:
    episode.sh("(sleep 600 &) ; mkfifo /tmp/pipe; echo $$ > /tmp/pid")
    assert "/tmp/pipe" in episode.delta.dropped or not any(e.path == "/tmp/pipe" for e in episode.delta.entries)
    alive = episode.sh("for p in /proc/[0-9]*; do cat $p/cmdline 2>/dev/null | tr '\\0' ' '; echo; done")
    assert "sleep 600" not in alive
    assert episode.sh("test -e /tmp/pipe && echo there || echo gone") == "gone\n"


def test_a_timed_out_command_keeps_what_it_wrote(episode: Episode) -> None:
    outcome = episode.step(StepAction.exec("echo partial > progress; sleep 60", timeout_s=1.0))
    assert outcome.status == SandboxStatus.TIMEOUT
    assert "1.0 s" in (outcome.reason or "")
    assert episode.sh("cat progress") == "partial\n"


def test_output_is_cut_to_its_cap_and_exit_codes_come_back(episode: Episode) -> None:
    outcome = episode.step(StepAction.exec("head -c 100000 /dev/zero | tr '\\0' a; echo err >&2; exit 3"))
    assert outcome.status == SandboxStatus.NONZERO_EXIT
    assert outcome.exit_code == 3
    assert len(outcome.stdout) == LIMITS.output_cap_bytes
    assert outcome.stdout_truncated
    assert outcome.stderr == b"err\n"
    assert not outcome.stderr_truncated
    killed = episode.step(StepAction.exec(["sh", "-c", "kill -9 $$"]))
    assert killed.signal == 9
    assert killed.status == SandboxStatus.KILLED


def test_changes_over_the_caps_are_not_kept(host: ImageTaskHost, image_of: Any, module_task: Task) -> None:
    small = Episode(host, image_of(module_task), module_task, DeltaCaps(max_bytes=64 << 10))
    small.sh("echo kept > kept")
    kept = small.delta.sha256
    outcome = small.step(StepAction.exec("head -c 200000 /dev/urandom > /tmp/big"))
    assert not outcome.workspace_kept
    assert "not kept" in (outcome.reason or "")
    assert outcome.sha256 == kept
    assert small.sh("cat kept; test -e /tmp/big || echo no-big") == "kept\nno-big\n"
    too_big = small.step(StepAction.write("big", b"x" * (65 << 10)))
    assert too_big.status == REJECTED
    assert small.delta.sha256 == kept


def test_bad_paths_and_missing_files_are_rejected(episode: Episode) -> None:
    for action in (StepAction.read("../etc/passwd"), StepAction.read("/etc/passwd"), StepAction.read("missing")):
        outcome = episode.step(action)
        assert outcome.status == REJECTED, action
    episode.sh("mkdir -p adir")
    assert episode.step(StepAction.write("adir", b"x")).status == REJECTED
    assert episode.sh("test -d adir && echo dir") == "dir\n"


def test_a_daemon_failure_is_the_infrastructures(docker_client: Any, module_task: Task) -> None:
    assert module_task.environment is not None
    outcome = run_image_step(
        docker_client, "rs-task/no-such-image:0", module_task.environment, EMPTY, StepAction.exec("true"),
        DeltaCaps(), LIMITS,
    )  # fmt: skip
    assert outcome.status == SandboxStatus.SANDBOX_ERROR
    assert "no-such-image" in (outcome.reason or "")
    assert outcome.sha256 == EMPTY.sha256


def test_a_host_failure_on_the_process_backend_is_the_infrastructures(overlays: OverlayHost, module_task: Task) -> None:
    assert module_task.environment is not None
    outcome = run_overlay_step(
        overlays, "rs-task/no-such-image:0", module_task.environment, EMPTY, StepAction.exec("true"),
        DeltaCaps(), LIMITS,
    )  # fmt: skip
    assert outcome.status == SandboxStatus.SANDBOX_ERROR
    assert "no-such-image" in (outcome.reason or "")
    assert outcome.sha256 == EMPTY.sha256


def test_the_host_keeps_names_it_can_check_and_drops_the_rest(episode: Episode, tmp_path: Path) -> None:
    outcome = episode.step(
        StepAction.exec("touch /tmp/$(head -c 300 /dev/zero | tr '\\0' n); touch /tmp/.wh.x; touch ok")
    )
    assert outcome.status == SandboxStatus.OK
    assert "left out" in (outcome.reason or "")
    assert "/tmp/.wh.x" in outcome.dropped
    assert episode.sh("ls ok") == "ok\n"
    assert list(tmp_path.iterdir()) == []  # the host wrote nothing of the agent's anywhere


def test_millions_of_empty_files_are_not_read_into_memory(
    host: ImageTaskHost, image_of: Any, module_task: Task
) -> None:
    """Empty files cost no storage, so only the listing's own cap stops them: past it nothing more is read."""
    few = Episode(host, image_of(module_task), module_task, DeltaCaps(max_entries=100))
    many = "mkdir /tmp/m && cd /tmp/m && seq -f '%0100g' 1 12000 | xargs touch"
    outcome = few.step(StepAction.exec(many, timeout_s=120))
    assert outcome.status == SandboxStatus.OK
    assert not outcome.workspace_kept
    assert "too long to read" in (outcome.reason or "") or "over 100 changed" in (outcome.reason or "")
    assert few.delta.sha256 == EMPTY.sha256


def test_an_agent_that_deletes_the_tools_of_the_restore_still_steps(episode: Episode) -> None:
    """Deleting rm, bash, libraries and thousands of other files of the image: the next step restores all of it."""
    doomed = "find /usr/share /etc /var /usr/lib/python3.11 -type f | grep -v ld.so | head -9000"
    episode.sh(f"{doomed} | xargs rm -f; rm -f /usr/bin/rm /usr/bin/bash /usr/bin/xargs")
    deleted = episode.delta.deleted
    others = [p for p in deleted if p.startswith(("/usr/share/", "/etc/", "/var/"))]
    assert len("".join(others)) > 64 << 10  # more than one command line of deletions besides the system's
    probes = " || ".join(f"test -e {p}" for p in ("/usr/bin/rm", "/usr/bin/bash", others[0], others[-1], deleted[-1]))
    assert episode.sh(f"{probes} || echo gone") == "gone\n"


def test_an_endless_writer_is_stopped_at_the_output_limit(episode: Episode) -> None:
    outcome = episode.step(StepAction.exec("echo before > kept; yes", timeout_s=120))
    assert outcome.status == SandboxStatus.OUTPUT_LIMIT
    assert "bytes of output" in (outcome.reason or "")
    assert outcome.wall_ms < 60_000  # stopped by its output, not by its timeout
    assert len(outcome.stdout) == LIMITS.output_cap_bytes
    assert episode.sh("cat kept") == "before\n"


def test_links_never_lead_the_host_out_of_the_tree(episode: Episode, tmp_path: Path) -> None:
    """Reads and writes through the agent's links resolve inside its filesystem, never on the host's."""
    secret = tmp_path / "host-secret"
    secret.write_text("host\n")
    episode.sh(f"ln -s {secret} link; ln -s ../../../../../..{secret} dots; ln -s / rootlink")
    assert episode.step(StepAction.read("link")).status == REJECTED
    assert episode.step(StepAction.read("dots")).status == REJECTED
    assert episode.step(StepAction.write("link", b"agent\n")).status == SandboxStatus.OK
    assert episode.step(StepAction.write(f"rootlink{secret}", b"agent\n")).status == SandboxStatus.OK
    assert secret.read_text() == "host\n"
    assert episode.sh(f"cat link {secret}; test -L link || echo replaced") == "agent\nagent\nreplaced\n"


def test_root_in_a_process_step_is_nobody_on_the_host(overlays: OverlayHost, image_of: Any, module_task: Task) -> None:
    from workers.overlays import ids

    episode = Episode(ImageTaskHost(None, image_of, overlays), image_of(module_task), module_task)
    mapped = episode.sh("id -u; cat /proc/self/uid_map; ls /proc | grep -c '^[0-9]'").split()
    assert mapped[:4] == ["0", "0", str(ids.BASE), str(ids.SIZE)]
    assert int(mapped[4]) <= 5  # its own pid namespace (its init, sh, ls, grep): no host process is visible
    refused = episode.step(
        StepAction.exec("mount -t tmpfs none /mnt || echo refused; echo x > /proc/sys/kernel/domainname")
    )
    assert b"refused" in refused.stdout
    assert refused.status == SandboxStatus.NONZERO_EXIT
