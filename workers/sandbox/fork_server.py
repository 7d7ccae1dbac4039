"""The process backend's fork server from the host: started once per toolchain family under bubblewrap,
handed each run's fds, restarted when it is gone (its in-sandbox program is ``fork_server_main``)."""

from __future__ import annotations

import contextlib
import os
import queue
import secrets
import signal
import socket
import subprocess
import threading
from array import array
from collections.abc import Sequence
from pathlib import Path

from schemas.errors import SandboxError
from workers.sandbox.common import SANDBOX_PATH
from workers.sandbox.guest_program import PYTHON_FLAGS, guest_program

_FORK_SERVER_START_S = 15.0
HOST_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}


class ForkServer:
    """The pre-started sandbox interpreter (see ``fork_server_main``), restarted when it is gone.

    Started from a dedicated keeper thread: ``--die-with-parent`` is a parent-death signal bound to the thread
    that forked bwrap, so the server lives exactly as long as the worker process, not as some pool thread.
    """

    def __init__(self, *, bwrap: str, rootfs: Path, uid: int, seccomp: bytes) -> None:
        self._bwrap = bwrap
        self._rootfs = rootfs
        self._uid = uid
        self._seccomp = seccomp
        self._program = guest_program("fork_server_main.py")
        self.tag = f"rs-forkserver-of-{os.getpid()}-{secrets.token_hex(3)}"
        self._lock = threading.Lock()
        self._closed = False
        self._proc: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None
        self._requests: queue.Queue[bool] = queue.Queue()
        self._replies: queue.Queue[tuple[subprocess.Popen[bytes], socket.socket] | Exception] = queue.Queue()
        self._keeper = threading.Thread(target=self._keep, name="rs-forkserver", daemon=True)
        self._keeper.start()

    def _keep(self) -> None:
        while self._requests.get():
            try:
                self._replies.put(self._spawn())
            except Exception as exc:
                self._replies.put(exc)

    def _spawn(self) -> tuple[subprocess.Popen[bytes], socket.socket]:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            argv = [
                self._bwrap,
                "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
                "--die-with-parent", "--new-session",
                "--ro-bind", str(self._rootfs), "/",
                "--proc", "/proc",
                "--dev", "/dev",
                "--remount-ro", "/dev",
                "--clearenv", "--setenv", "PATH", SANDBOX_PATH, "--setenv", "LANG", "C.UTF-8",
                "--chdir", "/",
                "--cap-add", "ALL",
                "--", *self._program.argv(
                    ("/usr/bin/python3", *PYTHON_FLAGS),
                    str(theirs.fileno()), str(self._uid), str(len(self._seccomp)),
                    self.tag,  # lets tests and SREs find a worker's fork server
                ),
            ]  # fmt: skip
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),),
                env=HOST_ENV,
                cwd="/",
                close_fds=True,
            )
        finally:
            theirs.close()
        try:
            if proc.stdin is None:
                raise SandboxError("fork server stdin missing")
            proc.stdin.write(self._program.stdin(self._seccomp))
            proc.stdin.close()
            ours.settimeout(_FORK_SERVER_START_S)
            if ours.recv(16) != b"ready":
                raise SandboxError(f"fork server did not start (exit {proc.poll()})")
            ours.settimeout(None)
        except (OSError, SandboxError) as exc:
            _kill(proc)
            proc.wait()
            ours.close()
            raise SandboxError(f"fork server did not start: {exc}") from exc
        return proc, ours

    def _ensure(self) -> socket.socket:
        if self._closed:
            raise SandboxError("fork server is closed")
        if self._sock is not None and self._proc is not None and self._proc.poll() is None:
            return self._sock
        self._stop()
        self._requests.put(True)
        try:
            reply = self._replies.get(timeout=_FORK_SERVER_START_S * 2)
        except queue.Empty as exc:
            raise SandboxError("fork server did not start in time") from exc
        if isinstance(reply, Exception):
            raise reply
        self._proc, self._sock = reply
        return self._sock

    def launch(self, fds: Sequence[int]) -> None:
        """Hand one run's fds to the server; it forks the run's supervisor. Retries once on a dead server."""
        message = [b"run"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array("i", fds))]
        with self._lock:
            for attempt in (1, 2):
                sock = self._ensure()
                try:
                    sock.sendmsg(*message)
                    return
                except OSError:
                    self._stop()
                    if attempt == 2:
                        raise

    def restart(self) -> None:
        """End the server and everything it forked (its pid namespace); the next launch starts a new one."""
        with self._lock:
            self._stop()

    def _stop(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._proc is not None:
            _kill(self._proc)
            self._proc.wait()
            self._proc = None

    def close(self) -> None:
        """Stop the server (its pid namespace, in-flight runs included, dies with it) and the keeper."""
        with self._lock:
            self._closed = True
            self._stop()
            self._requests.put(False)
        self._keeper.join(timeout=5)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGKILL)
