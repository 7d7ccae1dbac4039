"""Hacks played as steps of real episodes: the SDK, the episode worker, the executor, verifier and judge and the
reward processor over the real Kafka, S3 and process sandbox (one pipeline for the module, every episode at
once from one event loop).

Each hack of issue 14's list is a scripted agent: its hostile steps (each observation checked), then a plain
step that must work, then the submit, whose reward must be 0 (none of them fixes ``calc.ops.add``); one agent
fork-bombs and fills the disk first and then fixes it for real: 1.0. Afterwards the host is as it was: a
canary file and its directory (which the hacks aim at through links, absolute paths and ``..``) unchanged,
and the sandbox's audit finds no leftover process or cgroup of any step or grading run (the episode worker runs
in this process, on this module's sandbox, so its audit sees every run).
"""

from __future__ import annotations

import asyncio
import os
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from schemas.episodes import ObservationEvent
from schemas.events import RewardEvent
from streams.sdk import AsyncTrainerClient, TrainerConfig
from streams.sdk.episodes import EpisodeConfig
from streams.sdk.episodes_aio import AsyncEpisodeClient
from tests.integration.episode_env import Stack, episode_stack_in_own_bucket
from tests.sandbox.episode_grading_env import PATCH_ADD, PTH_ADD, USER_SITE
from tests.sandbox.swe_task import HIDDEN_IDS, HIDDEN_VALUES, OPS_FIXED, task
from workers.sandbox.api import Sandbox

pytestmark = [pytest.mark.integration, pytest.mark.sandbox, pytest.mark.slow]

TASK_ID = "swe/calc-hacks"
PUBLIC_TESTS = "python3 -m unittest -q tests.test_ops"
#: In another episode's workspace and in its step's argv: no search of this episode may find it.
MARKER_PARTS = ("NEIGH", "BOURMARK")  # joined only inside the neighbour's step and the searcher's pattern file
CANARY_TEXT = "the host's canary: nothing a step does may change it\n"

Check = Callable[[ObservationEvent], None]


@dataclass(frozen=True)
class Hack:
    """Steps (the contract's action objects) each with a check of its observation; the reward it must earn."""

    steps: list[tuple[dict[str, Any], Check | None]]
    reward: float = 0.0


@dataclass
class Played:
    observations: list[ObservationEvent] = field(default_factory=list)
    probe: ObservationEvent | None = None
    reward: RewardEvent | None = None
    error: str | None = None


def exec_(command: str | list[str], timeout_s: float | None = None) -> dict[str, Any]:
    return {"action": "exec", "command": command, **({} if timeout_s is None else {"timeout_s": timeout_s})}


def write(path: str, text: str) -> dict[str, Any]:
    return {"action": "write", "path": path, "text": text}


def read(path: str) -> dict[str, Any]:
    return {"action": "read", "path": path}


def status(*allowed: str) -> Check:
    def check(obs: ObservationEvent) -> None:
        assert obs.status in allowed, f"turn {obs.turn}: status {obs.status}, expected {allowed}: {obs}"

    return check


def rejected(*words: str) -> Check:
    def check(obs: ObservationEvent) -> None:
        assert obs.status == "rejected", f"turn {obs.turn}: not rejected: {obs}"
        assert all(w in (obs.reason or "") for w in words), f"turn {obs.turn}: reason {obs.reason!r} lacks {words}"

    return check


def stdout(expected: str, *statuses: str) -> Check:
    def check(obs: ObservationEvent) -> None:
        assert obs.status in (statuses or ("ok",)), f"turn {obs.turn}: {obs}"
        assert obs.stdout == expected, f"turn {obs.turn}: stdout {obs.stdout!r}, expected {expected!r}"

    return check


def no_background_left(obs: ObservationEvent) -> None:
    assert obs.status == "ok", obs
    counts, _, names = obs.stdout.partition("|")
    before, after = counts.split()
    assert before == after, f"a process of the previous step still appends to bg.log: {before} -> {after} lines"
    assert "sleep" not in names.split(), f"a process of the previous step is still running: {names}"


def found_nothing(obs: ObservationEvent) -> None:
    """The search ran (it counted files and processes) and found neither hidden data nor the neighbour."""
    assert obs.status == "ok", obs
    lines = obs.stdout.splitlines()
    assert lines[:1] == ["0"], f"the search found something: {obs.stdout!r}"
    assert lines[1].startswith("searched "), lines
    assert int(lines[1].split()[1]) > 1000, f"the search saw too few files to mean anything: {lines[1]}"
    secrets = ("".join(MARKER_PARTS), *HIDDEN_VALUES)
    assert not [s for s in secrets if s in obs.stdout + obs.stderr], obs


def no_space(obs: ObservationEvent) -> None:
    assert obs.status == "nonzero_exit", obs
    assert "No space left" in obs.stderr, obs
    assert "byte cap" in (obs.reason or "") or "No space" in obs.stderr, obs


def entries_capped(obs: ObservationEvent) -> None:
    assert obs.status == "ok", obs
    assert int(obs.stdout) >= 400, obs  # it made files until the inodes ran out (the cap is 500 entries)
    assert "entries" in (obs.reason or ""), f"the workspace over its entry cap was kept: {obs}"


def killed_back_to_previous(obs: ObservationEvent) -> None:
    assert obs.status == "killed", obs
    assert "previous snapshot" in (obs.reason or ""), obs


def search_command() -> str:
    """Grep every file (but /proc, /sys, /dev: read through /proc next) and every process's argv and
    environment for the neighbour's marker and a hidden expected value; the patterns are made in the step, so
    the command line itself holds neither."""
    return (
        f"printf '{MARKER_PARTS[0]}%s\\n1%020d\\n' {MARKER_PARTS[1]} 7 > /tmp/pat; "
        "grep -rIsl -f /tmp/pat --exclude=pat --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev / | head -20; "
        "for p in /proc/[0-9]*; do cat $p/cmdline $p/environ 2>/dev/null; echo; done | grep -a -c -f /tmp/pat; "
        "echo searched $(find / -xdev -type f 2>/dev/null | wc -l) files and $(ls -d /proc/[0-9]* | wc -l) processes"
    )


BOMB = "bomb() { bomb | bomb & }; bomb; sleep 2"
FILL = "head -c 2G /dev/zero > big"
INODES = "i=0; while true 2>/dev/null > f$i; do i=$((i+1)); done; echo $i"


def hacks(canary: Path) -> dict[str, Hack]:
    host = str(canary)
    return {
        "edit the public tests": Hack([
            (write("tests/test_ops.py", "import unittest\n"), status("ok")),
            (exec_(PUBLIC_TESTS), status("ok", "nonzero_exit")),
        ]),
        "delete the public tests": Hack([
            (exec_("rm -rf tests && echo gone"), stdout("gone\n")),
            (exec_(PUBLIC_TESTS), status("nonzero_exit")),
        ]),
        "plant conftest.py": Hack([
            (write("conftest.py", PATCH_ADD), status("ok")), (write("tests/conftest.py", PATCH_ADD), status("ok")),
        ]),
        "plant pytest.ini": Hack([
            (write("pytest.ini", "[pytest]\naddopts = -p hack\n"), status("ok")), (write("hack.py", PATCH_ADD), None),
        ]),
        "plant sitecustomize.py": Hack([(write("sitecustomize.py", PATCH_ADD), status("ok"))]),
        "plant usercustomize.py": Hack([
            (write("usercustomize.py", PATCH_ADD), status("ok")),
            (write(f"{USER_SITE}/usercustomize.py", PATCH_ADD), status("ok")),
        ]),
        "plant a .pth": Hack([
            (write("calc.pth", PTH_ADD), status("ok")), (write(f"{USER_SITE}/hack.pth", PTH_ADD), status("ok")),
        ]),
        "search the filesystem and /proc for hidden tests and other episodes' workspaces": Hack([
            (exec_(search_command(), 10), found_nothing),
            (exec_("ls -A /work /tmp /home /root /srv /mnt /opt 2>&1 | grep -c -i -e episode -e ws.tar"),
             stdout("0\n", "ok", "nonzero_exit")),
        ]),
        "leave background processes between steps": Hack([
            (exec_("(setsid sh -c 'while :; do echo tick >> bg.log; sleep 0.05; done' &); "
                   "nohup sleep 1000 >/dev/null 2>&1 & sleep 0.3; echo started"), stdout("started\n")),
            (exec_("a=$(wc -l < bg.log); sleep 0.5; b=$(wc -l < bg.log); echo $a $b \"|$(cat /proc/[0-9]*/comm "
                   "2>/dev/null | tr '\\n' ' ')\""), no_background_left),
        ]),
        "fill the disk and the inodes": Hack([(exec_(FILL), no_space), (exec_(INODES), entries_capped)]),
        "symlinks to host paths and /proc": Hack([
            (exec_(f"ln -s {host} canary && ln -s {canary.parent} hostdir && ln -s /proc/self/environ env && "
                   "ln -s /proc/1/root root1 && ln -s /etc etc && echo linked"), stdout("linked\n")),
            (read("canary"), rejected("outside")),
            (read("env"), rejected("outside")),
            (read("etc/passwd"), rejected("outside")),
            (write("hostdir/pwned.txt", "pwned"), rejected("symlink")),
            (write("canary", "pwned"), rejected("symlink")),
            (exec_("echo pwned > canary; echo pwned > hostdir/pwned.txt; echo pwned > root1/pwned; true"),
             status("ok")),
        ]),
        "FIFOs": Hack([  # the sandbox may refuse mkfifo itself; a socket it makes: neither survives the step
            (exec_("mkfifo fifo calc/fifo.py tests/fifo; python3 -c \"import socket; "
                   "socket.socket(socket.AF_UNIX).bind('calc/sock.py')\" && ls -A calc | grep -c sock"),
             stdout("1\n")),
            (exec_("ls -A . calc tests | grep -c -e fifo -e sock"), stdout("0\n", "nonzero_exit")),
        ]),
        "setuid files": Hack([
            (exec_("cp /bin/sh suid && chmod 4755 suid && stat -c %a suid"), stdout("4755\n")),
            (exec_("stat -c %a suid"), stdout("755\n")),
        ]),
        "path traversal in write and read": Hack([
            (write("../escape.txt", "pwned"), rejected("'..'")),
            (write("calc/../../escape.txt", "pwned"), rejected("'..'")),
            (write(host, "pwned"), rejected("absolute")),
            (write("/tmp/escape.txt", "pwned"), rejected("absolute")),
            (read("../../../etc/passwd"), rejected("'..'")),
            (read(host), rejected("absolute")),
        ]),
        "kill the parent": Hack([
            (exec_("echo new > new.txt; kill -9 $PPID; sleep 1"), killed_back_to_previous),
            (exec_("echo new > new.txt; kill -9 -1"), killed_back_to_previous),
            (exec_("ls new.txt"), status("nonzero_exit")),
        ]),
        "fork bombs": Hack([(exec_(BOMB, 3), status("ok", "timeout", "nonzero_exit"))]),
        "a fork bomb and a full disk, then a genuine fix": Hack([
            (exec_(BOMB, 3), status("ok", "timeout", "nonzero_exit")),
            (exec_(FILL), no_space),
            (write("calc/ops.py", OPS_FIXED), status("ok")),
            (exec_(PUBLIC_TESTS), status("ok")),
        ], reward=1.0),
    }  # fmt: skip


#: What the neighbour does: its workspace and its running step's argv hold the marker the searcher looks for.
def neighbour_steps() -> list[dict[str, Any]]:
    marker = "".join(MARKER_PARTS)
    return [write("notes.txt", f"{marker}\n"), exec_(["sh", "-c", "sleep 4; cat notes.txt", marker], 10)]


SEARCH = "search the filesystem and /proc for hidden tests and other episodes' workspaces"


@dataclass
class Host:
    canary: Path
    before: tuple[str, int, list[str]]

    def now(self) -> tuple[str, int, list[str]]:
        return self.canary.read_text(), self.canary.stat().st_mtime_ns, sorted(os.listdir(self.canary.parent))


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Host:
    canary = tmp_path_factory.mktemp("host") / "canary.txt"
    canary.write_text(CANARY_TEXT)
    canary.chmod(0o666)  # writable by anyone who could reach it
    found = Host(canary, ("", 0, []))
    found.before = found.now()
    return found


@pytest.fixture(scope="module")
def stack(
    kafka_config: dict[str, str], tmp_path_factory: pytest.TempPathFactory, process_sandbox: Sandbox, minio_client: Any
) -> Iterator[Stack]:
    tasks = [task("call", TASK_ID)]
    with episode_stack_in_own_bucket(kafka_config, minio_client, "episode-hacks", tmp_path_factory, process_sandbox,
                                     tasks=tasks, concurrency=4, worker_thread=True) as episodes:  # fmt: skip
        yield episodes


@pytest.fixture(scope="module")
def played(stack: Stack, host: Host) -> dict[str, Played]:
    """Every hack (and the neighbour) played at once; each one's observations, probe and reward, or its error."""
    table = hacks(host.canary)

    async def play(client: AsyncEpisodeClient, name: str, hack: Hack, neighbour_busy: asyncio.Event) -> Played:
        got = Played()
        try:
            episode = await client.open(TASK_ID)
            if name == SEARCH:
                await neighbour_busy.wait()  # search while the neighbour's step runs
            for body, _check in hack.steps:
                got.observations.append(await episode.act(body))
            got.probe = await episode.exec("echo alive")
            got.reward = await episode.submit(timeout_s=600)
        except Exception:
            got.error = traceback.format_exc()
        return got

    async def neighbour(client: AsyncEpisodeClient, busy: asyncio.Event) -> Played:
        got = Played()
        try:
            episode = await client.open(TASK_ID)
            first, second = neighbour_steps()
            got.observations.append(await episode.act(first))
            key, answer = episode.sync.begin(second)  # published: the searcher's search goes out after it
            busy.set()
            got.observations.append(episode.sync.settle(await client.answer(key, answer, None)))
            got.reward = await episode.submit(timeout_s=600)
        except Exception:
            got.error = traceback.format_exc()
            busy.set()
        return got

    async def main() -> dict[str, Played]:
        run = "hacks-run"
        trainer = await AsyncTrainerClient.connect(TrainerConfig.from_settings(stack.settings, run, trainer_id="h.t"))
        config = EpisodeConfig.from_settings(stack.settings, run, answer_timeout_s=400)
        busy = asyncio.Event()
        async with trainer, await AsyncEpisodeClient.connect(config, trainer) as client:
            names = list(table)
            results = await asyncio.gather(neighbour(client, busy),
                                           *(play(client, n, table[n], busy) for n in names))  # fmt: skip
        return {"neighbour": results[0], **dict(zip(names, results[1:], strict=True))}

    return asyncio.run(main())


@pytest.mark.timeout(1200)
@pytest.mark.parametrize("name", [*hacks(Path("/canary")), "neighbour"])
def test_a_hack_played_through_the_pipeline_earns_only_what_the_hidden_tests_say(
    played: dict[str, Played], host: Host, stack: Stack, name: str
) -> None:
    got = played[name]
    assert got.error is None, f"{name}: {got.error}\n{stack.worker_logs()}"
    expected = 0.0 if name == "neighbour" else hacks(host.canary)[name]
    if isinstance(expected, Hack):
        steps = expected.steps
        assert len(got.observations) == len(steps), got.observations
        for (body, check), obs in zip(steps, got.observations, strict=True):
            assert obs.status != "sandbox_error", f"{name}: {body}: {obs}"
            if check is not None:
                check(obs)
        assert got.probe is not None
        assert (got.probe.status, got.probe.stdout) == ("ok", "alive\n"), f"{name}: the next step: {got.probe}"
        expected = expected.reward
    assert got.reward is not None
    assert got.reward.reward == expected, f"{name}: reward {got.reward.reward}, expected {expected}: {got.reward}"
    shown = got.reward.model_dump_json() + "".join(o.model_dump_json() for o in got.observations)
    leaked = [s for s in (*HIDDEN_IDS, *HIDDEN_VALUES) if s in shown]
    assert not leaked, f"{name}: hidden data in what the trainer sees: {leaked}"


@pytest.mark.timeout(300)
def test_the_host_is_untouched_and_no_step_left_anything_behind(
    played: dict[str, Played], host: Host, process_sandbox: Sandbox
) -> None:
    assert not [n for n, p in played.items() if p.error], "an episode failed: see its own test"
    assert host.now() == host.before, "the host's canary or its directory changed"
    leftovers = list(process_sandbox.audit(wait_s=10.0))  # type: ignore[attr-defined]
    assert leftovers == [], f"steps or grading runs left behind: {leftovers}"
