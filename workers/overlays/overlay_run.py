"""One sandbox of an image task on the process backend: a tmpfs of the task's ``storage_mb`` holding the overlay's
upper directory (the episode's delta), the overlay of the image's unpacked tree mounted by the host, and each
command under bubblewrap in the id-mapped user namespace (root there, nobody on the host), in fresh pid, net,
ipc, uts and mount namespaces, its own cgroup (the task's CPUs, memory, pids), the seccomp filter and
``no_new_privs``. When a command's first process ends every other one in its pid namespace dies with it."""

from __future__ import annotations

import contextlib
import io
import os
import secrets
import selectors
import subprocess
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

from schemas.environments import TaskEnvironment
from schemas.errors import SandboxError
from workers.containers.executed import Captured, Ended, Executed, OutputOverError
from workers.overlays import ids
from workers.overlays.host import OverlayHost
from workers.overlays.in_root import TreeFiles
from workers.overlays.rootfs import ImageRootfs
from workers.overlays.upper import make_parents
from workers.sandbox.fork_server import HOST_ENV
from workers.sandbox.mounts import MS_NODEV, MS_NOSUID
from workers.sandbox.run_spec import memfd

_PIDS_LIMIT = 4096
#: What root in a step may still do (as the docker backend's containers): own, read, write and chmod files,
#: switch users; all of it only over what the user namespace maps.
_CAPABILITIES = ("CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID", "CAP_SETUID", "CAP_SETGID", "CAP_KILL")
_READ_CHUNK = 1 << 16
_KILL_S = 10.0


class OverlayInfraError(SandboxError):
    """The host failed a step of the sandbox's life (a mount, the cgroup, bubblewrap): never the task's."""


class OverlayRun:
    """A mounted overlay of ``rootfs``; ``run`` executes commands in it, ``files`` reads and writes its tree."""

    def __init__(
        self,
        host: OverlayHost,
        rootfs: ImageRootfs,
        environment: TaskEnvironment,
        directory: Path,
        env: dict[str, str] | None = None,
    ) -> None:
        self.host, self.rootfs, self.environment = host, rootfs, environment
        self.env = env or {}
        self.upper = directory / "upper"
        self.merged = directory / "merged"
        self.work = directory / "work"
        self.files = TreeFiles(self.merged, (ids.BASE, ids.BASE))
        self._directory = directory
        self._mounted = False

    def mount(self) -> None:
        """Mount the overlay (lower: the image; upper: whatever ``upper`` holds now)."""
        # metacopy and redirect_dir off whatever the kernel's defaults: with them, an upper directory may hold a
        # file's metadata without its data, or a moved directory as a pointer into the image, which a delta
        # read from it would silently lose.
        options = f"lowerdir={self.rootfs.path},upperdir={self.upper},workdir={self.work},metacopy=off,redirect_dir=off"
        self.host.mounter.mount("overlay", self.merged, "overlay", MS_NOSUID | MS_NODEV, options)
        self._mounted = True

    def unmount(self) -> None:
        """Unmount the overlay, so its upper directory may be read."""
        if self._mounted:
            self.host.mounter.umount(self.merged)
            self._mounted = False

    def put_dir(self, path: str, tar: bytes, mode: int) -> Path:
        """Make the directory ``path`` (mode ``mode``) in the upper directory, its parents as the image has them,
        and extract ``tar`` into it, all owned by the image's root: the host stages what a command is handed
        (``/tests``, ``/solution``) before anything runs, never through a link. Before ``mount`` only."""
        make_parents(self.upper, self.rootfs.path, path)
        directory = self.upper / path.lstrip("/")
        directory.mkdir(exist_ok=True)
        directory.chmod(mode)
        with tarfile.open(fileobj=io.BytesIO(tar), mode="r:*") as archive:
            archive.extractall(directory, filter="data")
        chown_tree(directory, ids.BASE)
        return directory

    def write_file(self, path: str, data: bytes) -> str | None:
        """Write one file of the merged tree (see ``TreeFiles.write_file``)."""
        return self.files.write_file(path, data)

    def read_file(self, path: str, cap: int) -> tuple[bytes, int] | str:
        """Read one file of the merged tree (see ``TreeFiles.read_file``)."""
        return self.files.read_file(path, cap)

    def run(self, argv: list[str], *, timeout_s: float, cwd: str, output_cap: int) -> Executed:
        """Run ``argv`` as root with cwd ``cwd``, keeping the first ``output_cap`` bytes of each stream, until its
        first process ends (the rest die with it), it runs past ``timeout_s`` or writes past OUTPUT_LIMIT_BYTES."""
        env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root",
               **self.rootfs.env, **self.environment.env, **self.env}  # fmt: skip
        group = self.host.cgroups.create(f"{os.getpid()}-image-{secrets.token_hex(4)}",
                                         memory_bytes=self.environment.memory_mb << 20, pids=_PIDS_LIMIT,
                                         cpus=self.environment.cpus)  # fmt: skip
        seccomp = memfd("seccomp", self.host.seccomp)
        try:
            procs = [str(p) for p in group.procs_files()]
            join = "".join(f'echo $$ > "${i}" && ' for i in range(1, len(procs) + 1))
            argv_all = [
                "/bin/sh", "-c", f'{join}shift {len(procs)} && exec "$@"', "rs-overlay-step", *procs,
                self.host.nsenter, f"--user={self.host.userns}", "--",
                self.host.bwrap,
                "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
                "--die-with-parent", "--new-session",
                "--bind", str(self.merged), "/", "--proc", "/proc", "--dev", "/dev",
                "--chdir", cwd, "--clearenv",
                *[a for k, v in sorted(env.items()) for a in ("--setenv", k, v)],
                "--cap-drop", "ALL", *[a for c in _CAPABILITIES for a in ("--cap-add", c)],
                "--seccomp", str(seccomp),
                "--", *argv,
            ]  # fmt: skip
            proc = subprocess.Popen(argv_all, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    pass_fds=(seccomp,), env=HOST_ENV, start_new_session=True)  # fmt: skip
            os.close(seccomp)
            seccomp = -1
            ended = _pump(proc, Captured(output_cap), timeout_s)
            captured = ended[1]
            if ended[0] != "finished":
                group.kill_all(_KILL_S)
            code = proc.wait(timeout=_KILL_S)
            return Executed(ended[0], code if ended[0] == "finished" else None, *captured.result())
        except (OSError, subprocess.SubprocessError) as exc:
            raise OverlayInfraError(f"running a command of an image task failed: {exc}") from exc
        finally:
            if seccomp >= 0:
                os.close(seccomp)
            group.destroy(_KILL_S)


def chown_tree(top: Path, host_id: int) -> None:
    """Give ``top`` and everything below it (links themselves, not what they name) to ``host_id``."""
    os.lchown(top, host_id, host_id)
    for directory, dirs, files in os.walk(top):
        for name in (*dirs, *files):
            os.lchown(os.path.join(directory, name), host_id, host_id)


def _pump(proc: subprocess.Popen[bytes], captured: Captured, timeout_s: float) -> tuple[Ended, Captured]:
    """Read both streams until they close, the deadline passes or the output is over its limit."""
    assert proc.stdout is not None  # noqa: S101 - PIPE
    assert proc.stderr is not None  # noqa: S101 - PIPE
    deadline = time.monotonic() + timeout_s
    with selectors.DefaultSelector() as selector, proc.stdout, proc.stderr:
        selector.register(proc.stdout, selectors.EVENT_READ, 0)
        selector.register(proc.stderr, selectors.EVENT_READ, 1)
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                return "timeout", captured
            for key, _ in selector.select(left):
                chunk = os.read(key.fileobj.fileno(), _READ_CHUNK)  # type: ignore[union-attr]
                if not chunk:
                    selector.unregister(key.fileobj)
                    continue
                try:
                    captured.add(*((chunk, None) if key.data == 0 else (None, chunk)))
                except OutputOverError:
                    return "output", captured
    return "finished", captured


@contextlib.contextmanager
def overlay_run(
    host: OverlayHost, rootfs: ImageRootfs, environment: TaskEnvironment, env: dict[str, str] | None = None
) -> Iterator[OverlayRun]:
    """A fresh sandbox of ``rootfs`` (its upper directory empty, not yet mounted; ``env`` added to the task's
    for every command), removed after."""
    directory = host.directory / f"run-{secrets.token_hex(6)}"
    directory.mkdir(mode=0o711)
    try:
        host.mounter.mount("tmpfs", directory, "tmpfs", MS_NOSUID | MS_NODEV,
                           f"size={environment.storage_mb}m,mode=0711")  # fmt: skip
        run = OverlayRun(host, rootfs, environment, directory, env)
        for path in (run.upper, run.work, run.merged):
            path.mkdir(mode=0o755)
        os.chown(run.upper, ids.BASE, ids.BASE)
        yield run
    finally:
        with contextlib.suppress(SandboxError):
            host.mounter.umount(directory / "merged")
        host.mounter.umount(directory)
        directory.rmdir()
