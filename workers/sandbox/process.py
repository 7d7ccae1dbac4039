"""The ``process`` backend: bubblewrap namespaces + cgroups + rlimits + seccomp, no daemon needed.

Launch chain per run (all exec, no Python in between):
  ``sh`` (root: joins the run cgroup, sets rlimits) -> ``setpriv`` (drops to the unprivileged sandbox uid,
  no groups/capabilities, parent-death signal) -> ``bwrap`` (user/pid/net/mount/ipc/uts/cgroup namespaces,
  read-only rootfs, capped tmpfs work dir, seccomp) -> ``/bin/sh`` start marker -> the program.
Everything is measured and enforced by the parent: wall clock, cgroup CPU time and memory peak, output caps.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import secrets
import selectors
import shlex
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from schemas.errors import SandboxError
from schemas.settings import Settings
from workers.sandbox.api import SandboxResult, SandboxSpec, SandboxStatus
from workers.sandbox.audit import poll_until_empty, processes_of_uid
from workers.sandbox.cgroups import GROUP_NAME, CgroupManager, CgroupStats, RunCgroup
from workers.sandbox.mounts import Mounter, mounts_under, remove_tree
from workers.sandbox.seccomp import build_filter

CRASH_SIGNALS = frozenset(
    {
        signal.SIGSEGV,
        signal.SIGBUS,
        signal.SIGABRT,
        signal.SIGILL,
        signal.SIGFPE,
        signal.SIGSYS,
        signal.SIGTRAP,
    }
)
_READ_CHUNK = 1 << 16
_DRAIN_GRACE_S = 1.0
_NOFILE = 1024
_SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
_HOST_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
# Paths inside the sandbox's own mount namespace (private tmpfs binds, not the host's /tmp).
SANDBOX_TMP = "/tmp"  # noqa: S108
SANDBOX_SHM = "/dev/shm"  # noqa: S108
SANDBOX_WORK = "/work"


def base_env(uid_home: str = "/work") -> dict[str, str]:
    """The whole environment candidate code sees (plus ``spec.env``): nothing from the worker."""
    return {
        "PATH": _SANDBOX_PATH,
        "HOME": uid_home,
        "LANG": "C.UTF-8",
        "TMPDIR": SANDBOX_TMP,
        "PYTHONDONTWRITEBYTECODE": "1",
    }


def classify(
    *,
    stopped_for: SandboxStatus | None,
    oom_kills: int,
    exit_code: int | None,
    sig: int | None,
) -> SandboxStatus:
    """Turn what the parent observed into one status (shared by both backends).

    An OOM kill anywhere in the tree wins: it is the root cause even if the run then hung until the timeout.
    """
    if oom_kills > 0:
        return SandboxStatus.MEMORY_LIMIT
    if stopped_for is not None:
        return stopped_for
    if sig is not None:
        return SandboxStatus.CRASHED if sig in CRASH_SIGNALS else SandboxStatus.KILLED
    return SandboxStatus.OK if exit_code == 0 else SandboxStatus.NONZERO_EXIT


def error_result(backend: str, message: str, wall_ms: float = 0.0) -> SandboxResult:
    """A ``sandbox_error`` result: the infrastructure failed, the program is not to blame."""
    return SandboxResult(
        status=SandboxStatus.SANDBOX_ERROR,
        exit_code=None,
        signal=None,
        stdout=b"",
        stderr=b"",
        stdout_truncated=False,
        stderr_truncated=False,
        wall_ms=wall_ms,
        cpu_ms=0.0,
        max_rss_kb=0,
        backend=backend,
        error=message,
    )


def check_relpath(name: str) -> PurePosixPath:
    """Validate a ``spec.files`` key: relative, no ``..``, not empty."""
    path = PurePosixPath(name)
    if path.is_absolute() or not path.parts or ".." in path.parts:
        raise SandboxError(f"spec.files: invalid relative path {name!r}")
    return path


@dataclass(slots=True)
class _Capture:
    """Bounded stdout/stderr capture (never more than ``limit`` bytes per stream), behind a start gate.

    stdout must begin with ``marker``, printed by the start shim before the program exists: a program can
    neither suppress it nor forge one for a sandbox that never started.
    """

    limit: int
    marker: bytes = b""
    data: dict[str, bytearray] = field(default_factory=lambda: {"out": bytearray(), "err": bytearray()})
    truncated: dict[str, bool] = field(default_factory=lambda: {"out": False, "err": False})
    prefix: bytearray = field(default_factory=bytearray)
    started_at: float | None = None
    bad_start: bool = False

    def feed(self, which: str, chunk: bytes) -> bool:
        """Append a chunk; return False once the cap is exceeded or stdout did not start with the marker."""
        if which == "out" and self.started_at is None and self.marker:
            self.prefix += chunk
            if len(self.prefix) < len(self.marker):
                return True
            if not self.prefix.startswith(self.marker):
                self.bad_start = True
                return False
            self.started_at = time.monotonic()
            chunk = bytes(self.prefix[len(self.marker) :])
        buf = self.data[which]
        room = self.limit - len(buf)
        if len(chunk) > room:
            buf += chunk[: max(room, 0)]
            self.truncated[which] = True
            return False
        buf += chunk
        return True


@dataclass(slots=True)
class _Observed:
    stopped_for: SandboxStatus | None = None
    started_at: float | None = None
    ended_at: float | None = None
    returncode: int | None = None


class ProcessSandbox:
    """Thread-safe; one instance serves many concurrent runs. ``close()`` removes its mounts."""

    name = "process"

    def __init__(self, settings: Settings, rootfs: Path) -> None:
        tools = {t: shutil.which(t, path=_HOST_ENV["PATH"]) for t in ("bwrap", "setpriv", "sh")}
        missing = [t for t, p in tools.items() if p is None]
        if missing:
            raise SandboxError(f"process sandbox needs {missing} (Debian: bubblewrap, util-linux, dash)")
        self._bwrap, self._setpriv, self._sh = (str(tools[t]) for t in ("bwrap", "setpriv", "sh"))
        if not (rootfs / "usr" / "bin" / "python3").exists():
            raise SandboxError(f"sandbox rootfs {rootfs} is incomplete (no /usr/bin/python3)")
        self._uid = settings.sandbox_uid
        self._seccomp = build_filter()
        self._mounter = Mounter()
        self._cgroups = CgroupManager(settings.sandbox_cgroup_parent)
        self._lock = threading.Lock()
        self._active = 0
        self._closed = False
        self._counter = itertools.count()
        base = settings.sandbox_run_dir
        base.mkdir(parents=True, exist_ok=True)
        base.chmod(0o711)
        self.sweep_stale(base)
        self._dir = base / f"{os.getpid()}-{secrets.token_hex(4)}"
        self._rootfs = self._dir / "rootfs"
        self._runs = self._dir / "runs"
        try:
            for d in (self._dir, self._rootfs, self._runs):
                d.mkdir(mode=0o711)
                d.chmod(0o711)
            self._mounter.bind_readonly(rootfs, self._rootfs)
        except (OSError, SandboxError) as exc:
            remove_tree(self._mounter, self._dir)
            raise SandboxError(f"cannot prepare {self._dir}: {exc}") from exc

    def sweep_stale(self, base: Path) -> int:
        """Remove mounts, dirs and cgroups left by workers that died (named ``<pid>-...``); return count."""
        removed = self._cgroups.sweep()
        for child in base.iterdir():
            owner = child.name.split("-", 1)[0]
            if owner.isdigit() and not _alive(int(owner)):
                remove_tree(self._mounter, child)
                removed += 1
        return removed

    @property
    def cgroup_parents(self) -> list[Path]:
        """Where run cgroups are created (tests check that nothing stays there)."""
        return self._cgroups.parents()

    @property
    def run_dir(self) -> Path:
        """This instance's host directory (rootfs bind and run mounts live below it)."""
        return self._dir

    def audit(self, wait_s: float = 0.0) -> list[str]:
        """Leftovers of finished runs: run cgroups, run mounts, sandbox-uid processes outside any sandbox."""
        return poll_until_empty(self._leftovers, wait_s)

    def _leftovers(self) -> list[str]:
        found: list[str] = []
        if self._active == 0:
            prefix = f"{os.getpid()}-"
            for parent in self._cgroups.parents():
                with contextlib.suppress(FileNotFoundError):
                    found += [f"cgroup {p}" for p in parent.iterdir() if p.is_dir() and p.name.startswith(prefix)]
            found += [f"mount {m}" for m in mounts_under(self._runs)]
            with contextlib.suppress(FileNotFoundError):
                found += [f"run dir {p}" for p in self._runs.iterdir()]
        for proc in processes_of_uid(self._uid):
            if GROUP_NAME not in proc.cgroups and "docker" not in proc.cgroups:
                found.append(f"escaped process {proc.pid} ({proc.cmdline})")
        return found

    def close(self) -> None:
        """Unmount the rootfs bind and remove this instance's directory; idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        remove_tree(self._mounter, self._dir)

    def run(self, spec: SandboxSpec) -> SandboxResult:
        """Run ``spec``; every failure of the machinery becomes a ``sandbox_error`` result."""
        t0 = time.monotonic()
        with self._lock:
            if self._closed:
                return error_result(self.name, "sandbox is closed")
            self._active += 1
        try:
            return self._run(spec)
        except (SandboxError, OSError, subprocess.SubprocessError, ValueError) as exc:
            return error_result(self.name, f"{type(exc).__name__}: {exc}", (time.monotonic() - t0) * 1e3)
        finally:
            with self._lock:
                self._active -= 1

    def _run(self, spec: SandboxSpec) -> SandboxResult:
        run_id = f"{os.getpid()}-{next(self._counter)}-{secrets.token_hex(3)}"
        mnt = self._runs / run_id
        group: RunCgroup | None = None
        result: SandboxResult | None = None
        try:
            mnt.mkdir(mode=0o711)
            self._mounter.tmpfs(mnt, size_mb=spec.workdir_size_mb, inodes=spec.workdir_inodes)
            self._populate(mnt, spec.files)
            group = self._cgroups.create(
                run_id, memory_bytes=spec.memory_mb << 20, pids=spec.pids_limit, cpus=spec.cpus
            )
            result = self._execute(spec, mnt, group)
        finally:
            cleanup_error = self._cleanup(mnt, group)
        if cleanup_error is not None:
            raise SandboxError(f"cleanup failed: {cleanup_error}")
        return result

    def _cleanup(self, mnt: Path, group: RunCgroup | None) -> str | None:
        errors: list[str] = []
        if group is not None:
            try:
                group.destroy()
            except SandboxError as exc:
                errors.append(str(exc))
        try:
            self._mounter.umount(mnt)
            if mounts_under(mnt):
                errors.append(f"{mnt} still mounted")
            else:
                with contextlib.suppress(FileNotFoundError):
                    mnt.rmdir()
        except (SandboxError, OSError) as exc:
            errors.append(str(exc))
        return "; ".join(errors) or None

    def _populate(self, mnt: Path, files: Mapping[str, bytes]) -> None:
        """Create work/tmp/shm in the run tmpfs and write ``spec.files`` owned by the sandbox uid."""
        uid = self._uid
        for sub, mode in (("work", 0o755), ("tmp", 0o1777), ("shm", 0o1777)):
            d = mnt / sub
            d.mkdir()
            os.chown(d, uid, uid)
            d.chmod(mode)
        work = mnt / "work"
        for name, data in files.items():
            rel = check_relpath(name)
            target = work.joinpath(*rel.parts)
            for parent in reversed(target.relative_to(work).parents):
                p = work / parent
                if not p.exists():
                    p.mkdir()
                    os.chown(p, uid, uid)
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
            try:
                _write_all(fd, data)
                os.fchown(fd, uid, uid)
            finally:
                os.close(fd)

    def _argv(self, spec: SandboxSpec, mnt: Path, group: RunCgroup, seccomp_fd: int, marker: bytes) -> list[str]:
        attach = "".join(f"echo $$ > {shlex.quote(str(p))} || exit 1\n" for p in group.procs_files())
        launcher = f'{attach}ulimit -c 0 && ulimit -n {_NOFILE} && exec "$@"'
        uid = str(self._uid)
        env = {**base_env(), **spec.env}
        env_args = [a for k, v in env.items() for a in ("--setenv", k, v)]
        # The start marker on stdout proves bwrap finished its setup: it is printed before the program
        # exists, so a program can neither suppress it nor forge one for a sandbox that never started.
        start = 'printf %s "$0" && exec "$@"'
        return [
            self._sh, "-c", launcher, "rs-launch",
            self._setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
            "--inh-caps=-all", "--bounding-set=-all", "--pdeathsig=KILL", "--",
            self._bwrap,
            "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent", "--new-session",
            "--uid", uid, "--gid", uid, "--hostname", "sandbox",
            "--ro-bind", str(self._rootfs), "/",
            "--proc", "/proc",
            "--dev", "/dev",
            "--bind", str(mnt / "shm"), SANDBOX_SHM,
            "--remount-ro", "/dev",
            "--bind", str(mnt / "work"), SANDBOX_WORK,
            "--bind", str(mnt / "tmp"), SANDBOX_TMP,
            "--chdir", SANDBOX_WORK,
            "--clearenv", *env_args,
            "--seccomp", str(seccomp_fd),
            "--", "/bin/sh", "-c", start, marker.decode(), *spec.argv,
        ]  # fmt: skip

    def _execute(self, spec: SandboxSpec, mnt: Path, group: RunCgroup) -> SandboxResult:
        if not spec.argv:
            raise SandboxError("spec.argv is empty")
        stdin_fd = _memfd("stdin", spec.stdin)
        seccomp_fd = _memfd("seccomp", self._seccomp)
        marker = f"<rs-start-{secrets.token_hex(8)}>".encode()
        proc: subprocess.Popen[bytes] | None = None
        obs = _Observed()
        cap = _Capture(spec.output_limit_bytes, marker)
        try:
            argv = self._argv(spec, mnt, group, seccomp_fd, marker)
            spawn_at = time.monotonic()
            proc = subprocess.Popen(
                argv,
                stdin=stdin_fd,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=(seccomp_fd,),
                env=_HOST_ENV,
                cwd="/",
                close_fds=True,
            )
            self._watch(proc=proc, spec=spec, spawn_at=spawn_at, cap=cap, obs=obs)
        finally:
            for fd in (stdin_fd, seccomp_fd):
                os.close(fd)
            if proc is not None:
                _kill(proc)
                group.kill_all()
                proc.wait()
                for stream in (proc.stdout, proc.stderr):
                    if stream is not None:
                        stream.close()
        stats = group.stats()
        return self._result(proc.returncode, obs, cap, stats, spawn_at)

    def _watch(
        self,
        *,
        proc: subprocess.Popen[bytes],
        spec: SandboxSpec,
        spawn_at: float,
        cap: _Capture,
        obs: _Observed,
    ) -> None:
        """Pump output with caps until the program ends, the clock runs out or output overflows."""
        if proc.stdout is None or proc.stderr is None:
            raise SandboxError("output pipes missing")
        pidfd = os.pidfd_open(proc.pid)
        sel = selectors.DefaultSelector()
        try:
            sel.register(proc.stdout.fileno(), selectors.EVENT_READ, "out")
            sel.register(proc.stderr.fileno(), selectors.EVENT_READ, "err")
            sel.register(pidfd, selectors.EVENT_READ, "exit")
            deadline = spawn_at + spec.timeout_s
            drain_until: float | None = None
            while sel.get_map():
                now = time.monotonic()
                if drain_until is None and now >= deadline:
                    obs.stopped_for = SandboxStatus.TIMEOUT
                    return
                if drain_until is not None and now >= drain_until:
                    return
                for key, _ in sel.select((drain_until or deadline) - now):
                    fd, which = int(key.fd), str(key.data)
                    if which == "exit":
                        obs.ended_at = time.monotonic()
                        sel.unregister(fd)
                        drain_until = obs.ended_at + _DRAIN_GRACE_S
                        continue
                    chunk = os.read(fd, _READ_CHUNK)
                    if not chunk:
                        sel.unregister(fd)
                    elif not cap.feed(which, chunk):
                        obs.stopped_for = None if cap.bad_start else SandboxStatus.OUTPUT_LIMIT
                        return
                    if obs.started_at is None and cap.started_at is not None:
                        # The clock starts when the program does, not when bwrap starts.
                        obs.started_at = cap.started_at
                        deadline = obs.started_at + spec.timeout_s
        finally:
            sel.close()
            os.close(pidfd)
            if obs.ended_at is None:
                obs.ended_at = time.monotonic()

    def _result(
        self,
        returncode: int | None,
        obs: _Observed,
        cap: _Capture,
        stats: CgroupStats,
        spawn_at: float,
    ) -> SandboxResult:
        started = obs.started_at
        ended = obs.ended_at or time.monotonic()
        if started is None:
            # No start marker: bwrap never reached the program, so nothing here is the program's doing.
            detail = bytes(cap.data["err"][-400:]).decode(errors="replace").strip()
            why = obs.stopped_for or f"exit {returncode}"
            return error_result(self.name, f"sandbox did not start ({why}): {detail}", (ended - spawn_at) * 1e3)
        exit_code: int | None = None
        sig: int | None = None
        if obs.stopped_for is None and returncode is not None:
            # bwrap reports a signal death of the program as 128 + signal number.
            if returncode < 0:
                sig = -returncode
            elif 128 < returncode < 128 + 65:
                sig = returncode - 128
            else:
                exit_code = returncode
        status = classify(stopped_for=obs.stopped_for, oom_kills=stats.oom_kills, exit_code=exit_code, sig=sig)
        return SandboxResult(
            status=status,
            exit_code=exit_code,
            signal=sig,
            stdout=bytes(cap.data["out"]),
            stderr=bytes(cap.data["err"]),
            stdout_truncated=cap.truncated["out"],
            stderr_truncated=cap.truncated["err"],
            wall_ms=round((ended - started) * 1e3, 3),
            cpu_ms=round(stats.cpu_ms, 3),
            max_rss_kb=stats.memory_peak_bytes // 1024,
            backend=self.name,
            pids_limit_hit=stats.pids_limit_hits > 0,
        )


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    try:
        _write_all(fd, data)
        os.lseek(fd, 0, os.SEEK_SET)
    except OSError:
        os.close(fd)
        raise
    return fd


def _kill(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
