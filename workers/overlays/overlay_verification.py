"""Verification of an image task on the process backend (the docker backend's is ``containers.verification``,
whose rules hold here word for word): a fresh overlay of the task image's tree whose upper directory the host
fills before anything runs with the agent's final WORKDIR (an opaque directory: nothing of the image's WORKDIR
shows through, files the agent deleted stay deleted), ``tests/`` at ``/tests`` and ``rs-as-agent``; then
``test.sh`` as root of the step's user namespace under the verifier's timeout. The reward files are read from the
upper directory once the overlay is unmounted, regular files only (a link there is not followed)."""

from __future__ import annotations

import io
import os
import stat
import tarfile
import time
from pathlib import Path

from schemas.environments import TaskEnvironment, VerifierSuite
from workers.containers import as_agent
from workers.containers.image_containers import MAX_OUTPUT_BYTES, output_tail
from workers.containers.reward_file import MAX_REWARD_FILE_BYTES, VerifierReward, read_reward
from workers.containers.verification import LOGS_DIR, OUTPUT_FILE, RUN_SCRIPT, TESTS_DIR, Verification
from workers.episodes.snapshot import Caps, unpack
from workers.overlays import ids
from workers.overlays.host import OverlayHost
from workers.overlays.overlay_run import OverlayRun, chown_tree, overlay_run
from workers.overlays.upper import OPAQUE, make_parents

_MAX_READ_ENTRIES = 64
_MAX_WORKDIR_ENTRIES = 1 << 20


def verify_on_overlay(
    host: OverlayHost, image: str, environment: TaskEnvironment, verifier: VerifierSuite, workdir_tar: bytes | None
) -> Verification:
    """Run ``verifier`` on the agent's final WORKDIR (``workdir_tar``, a canonical snapshot; None: the image's own)
    in a fresh overlay of ``image`` (SandboxError/OSError: the host's)."""
    started = time.monotonic()
    rootfs = host.rootfs(image)
    with overlay_run(host, rootfs, environment, env=dict(verifier.env)) as run:
        _stage(run, environment.workdir, verifier, workdir_tar)
        run.mount()
        script = f"{as_agent.prepare_script(environment.workdir)} && {RUN_SCRIPT}"
        ended = run.run(["bash", "-c", script], timeout_s=verifier.timeout_s, cwd=environment.workdir,
                        output_cap=0).ended  # fmt: skip
        run.unmount()
        files = _read_files(run.upper, LOGS_DIR, {OUTPUT_FILE: MAX_OUTPUT_BYTES}, MAX_REWARD_FILE_BYTES + 1)
    reward = read_reward(files)
    written = None if reward.source is None or reward.source not in files else files[reward.source]
    if ended == "timeout":
        reward = VerifierReward(0.0, None, f"test.sh ran past its timeout ({verifier.timeout_s:g} s)")
    output = output_tail(files.get(OUTPUT_FILE, b""))
    reward_file = None if written is None else written.decode("utf-8", "replace")
    return Verification(reward, ended == "timeout", output, time.monotonic() - started, rootfs.image_id,
                        reward_file, backend="process")  # fmt: skip


def _stage(run: OverlayRun, workdir: str, verifier: VerifierSuite, workdir_tar: bytes | None) -> None:
    """Fill the empty upper directory: the agent's WORKDIR, ``/tests``, ``/logs/verifier`` and ``rs-as-agent``,
    all made by the host, none through a link."""
    upper, lower = run.upper, run.rootfs.path
    for directory in (workdir, LOGS_DIR, as_agent.PATH):
        make_parents(upper, lower, directory)
    if workdir_tar is not None:
        mine = upper / workdir.lstrip("/")
        mine.mkdir()
        os.setxattr(mine, OPAQUE, b"y")
        caps = Caps(max_bytes=run.environment.storage_mb << 20, max_entries=_MAX_WORKDIR_ENTRIES)
        unpack(workdir_tar, mine, caps)
    run.put_dir(TESTS_DIR, verifier.tests.tar(), 0o700)
    logs = upper / LOGS_DIR.lstrip("/")
    logs.mkdir(mode=0o755, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(as_agent.install_tar())) as tar:
        tar.extractall(upper / os.path.dirname(as_agent.PATH).lstrip("/"), filter="data")
    made = [upper / workdir.lstrip("/")] if workdir_tar is not None else []
    for path in (*made, logs, upper / as_agent.PATH.lstrip("/")):
        chown_tree(path, ids.BASE)


def _read_files(upper: Path, directory: str, caps: dict[str, int], default_cap: int) -> dict[str, bytes]:
    """The regular files directly in ``directory`` of the upper directory, each cut to its cap; {} if it is not
    a directory there. Nothing is followed: test.sh (root) may have made any name on the way a link."""
    out: dict[str, bytes] = {}
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(upper, flags)
    except OSError:
        return out
    try:
        for name in directory.strip("/").split("/"):
            inner = os.open(name, flags, dir_fd=fd)
            os.close(fd)
            fd = inner
        with os.scandir(fd) as found:
            entries = sorted(found, key=lambda e: e.name)[:_MAX_READ_ENTRIES]
        for entry in entries:
            if not stat.S_ISREG(entry.stat(follow_symlinks=False).st_mode):
                continue
            opened = os.open(entry.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=fd)
            with os.fdopen(opened, "rb") as handle:
                out[entry.name] = handle.read(caps.get(entry.name, default_cap))
    except OSError:  # a link or a file where a directory was: no reward file the tests could have meant
        return out
    finally:
        os.close(fd)
    return out
