"""The step driver: runs INSIDE the sandbox (standard library only, on the toolchain's own python3).

One driver run is one step of a program in a language: a compile (the compiler, then the built files sent
back) or a run (the program with its stdin, then the files the caller fetches). Why a driver between the
sandbox and the program, rather than the program as the sandbox's argv:

* The step's own time limit, output caps and exit status are measured by a process the program does not own:
  the driver forks the program into a process group of its own, with stdin from a memfd and stdout/stderr to
  pipes only the driver reads; the driver is non-dumpable, so a same-uid program can neither ptrace it nor
  open its memory or fds. The sandbox still enforces the whole run (time, memory, pids) from outside.
* Files come back framed on the driver's stdout, which no program process holds: each record is
  ``\\n@@RS1 <nonce> <json>\\n`` with the nonce the host sent on stdin. What comes back is never trusted on
  the host: file names are re-validated and sizes capped there (``workers.languages.steps``), and the bytes
  only ever go into another sandbox run.
* A compile's files are read only after the compiler and its process group are gone; whatever a program
  leaves running is killed with the sandbox at the end of the run.

Protocol: stdin is the 32-byte nonce, ``\\n``, one JSON header line, then the program's stdin. Header:
``argv``; ``timeout_s``, the program's limit (its CPU time and its own time, never time it waited for a CPU:
``guest.clock``, over every process of the run); ``max_output_bytes`` (per stream; more ends
the step as ``output_limit``); ``executables`` (files made executable first: the host writes every file
0644); ``collect`` (paths whose regular files are sent back); ``collect_always`` (also after a failed step);
``max_collect_bytes``; ``max_collect_files``. Records: ``hello``; ``step`` (``exit``, ``signal``,
``timeout``, ``output_limit``, ``contention`` (the host starved the step past its ceiling: no verdict),
``ms``, ``cpu_ms``, ``wait_ms``, ``max_rss_kb``, ``stdout``/``stderr`` base64, ``stdout_bytes``/
``stderr_bytes`` written); one ``file`` per file collected (``path``, ``b64``) or ``missing`` (``path``,
``why``); ``done``.
Started as ``python3 -I -S -B -c SOURCE``.
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import signal
import stat
import sys
import time

from guest.clock import HOST, ProcLimit
from guest.framing import NONCE_LEN, frame_prefix
from guest.plumbing import (
    PR_SET_DUMPABLE,
    PR_SET_PDEATHSIG,
    b64,
    become_subreaper,
    make_executable,
    read_all,
    write_all,
)

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs start-up time
if TYPE_CHECKING:
    from typing import Any

READ_CHUNK = 1 << 16


def _prctl(option: int, arg: int) -> bool:
    return bool(ctypes.CDLL(None, use_errno=True).prctl(option, ctypes.c_ulong(arg), 0, 0, 0) == 0)


class Out:
    """The framed record channel (the driver's stdout)."""

    def __init__(self, nonce: bytes) -> None:
        self.prefix = b"\n" + frame_prefix(nonce)

    def emit(self, record: dict[str, Any]) -> None:
        write_all(1, self.prefix + json.dumps(record, separators=(",", ":")).encode() + b"\n")


def _child(argv: list[str], stdin_fd: int, out_w: int, err_w: int) -> None:
    """The program: its own session and process group, killed if the driver dies, first pick of the OOM
    killer, default signal dispositions, only fds 0-2; never returns."""
    code = 127
    try:
        os.setsid()
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        try:
            with open("/proc/self/oom_score_adj", "w") as f:
                f.write("1000")
        except OSError:
            pass
        os.dup2(stdin_fd, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        os.closerange(3, 1 << 16)
        for sig in range(1, signal.NSIG):
            try:  # noqa: SIM105 - contextlib is not imported here (start-up cost)
                signal.signal(sig, signal.SIG_DFL)
            except (OSError, ValueError):
                pass
        os.execvpe(argv[0], argv, dict(os.environ))  # noqa: S606 - the sandboxed program
    except OSError as exc:
        try:  # noqa: SIM105
            os.write(2, f"cannot run {argv[0][:200]}: {exc.strerror}\n".encode())
        except OSError:
            pass
    finally:
        os._exit(code)


def _kill_group(pid: int) -> None:
    try:  # noqa: SIM105
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass


def _spawn(argv: list[str], stdin: bytes) -> tuple[int, int, int]:
    """Fork the program; (pid, its stdout's read end, its stderr's read end)."""
    mem = os.memfd_create("stdin")
    write_all(mem, stdin)
    os.lseek(mem, 0, os.SEEK_SET)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(out_r)
        os.close(err_r)
        _child(argv, mem, out_w, err_w)
    for fd in (mem, out_w, err_w):
        os.close(fd)
    return pid, out_r, err_r


class Streams:
    """The program's stdout and stderr as the driver reads them: the first ``cap`` bytes of each kept."""

    def __init__(self, out_r: int, err_r: int, cap: int) -> None:
        self.fds = (out_r, err_r)
        self.open = {out_r, err_r}
        self.data = {out_r: bytearray(), err_r: bytearray()}
        self.written = {out_r: 0, err_r: 0}
        self.cap = cap
        self.over = False

    def read(self, fd: int) -> None:
        chunk = os.read(fd, READ_CHUNK)
        if not chunk:
            self.open.discard(fd)
            return
        self.written[fd] += len(chunk)
        buf = self.data[fd]
        room = self.cap - len(buf)
        buf += chunk[: max(room, 0)]
        if len(chunk) > room:
            self.over = True

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)


def _pump(pid: int, streams: Streams, limit: ProcLimit) -> str | None:
    """Read the program's output until it ends (then drain briefly), its limit stops it or its output cap;
    why the limit stopped it, or None. The drain reads what the pipes hold even past its deadline: a driver
    the host kept off the CPU past it must not lose output the program wrote (a verdict measures the program,
    not the host), only stop waiting for more."""
    exited = os.pidfd_open(pid)
    drain_until: float | None = None
    try:
        while streams.open and not streams.over:
            if drain_until is None:
                stopped = limit.poll()
                if stopped is not None:
                    return stopped
                wait = limit.next_wait()
            else:
                wait = max(drain_until - time.monotonic(), 0.0)
            watched = [*streams.open, *([exited] if drain_until is None else [])]
            ready, _, _ = select.select(watched, [], [], wait)
            if exited in ready:
                # The program ended: what it left in its group goes now, then its pipes are drained (a process
                # it moved out of its group may hold them open: not for long).
                _kill_group(pid)
                drain_until = time.monotonic() + 0.5
                continue
            if not ready and drain_until is not None:
                return None  # drained: nothing more came before the deadline
            for fd in ready:
                streams.read(fd)
        return None
    finally:
        os.close(exited)


def run_step(header: dict[str, Any], stdin: bytes) -> dict[str, Any]:
    """Run the program to its end, its deadline or its output cap; what happened, as a ``step`` record."""
    argv = [str(a) for a in header["argv"]]
    started = time.monotonic()
    pid, out_r, err_r = _spawn(argv, stdin)
    limit = ProcLimit(float(header["timeout_s"]))
    streams = Streams(out_r, err_r, int(header["max_output_bytes"]))
    stopped: str | None = None
    try:
        stopped = _pump(pid, streams, limit)
    finally:
        ended = time.monotonic()
        _kill_group(pid)
        _, status, usage = os.wait4(pid, 0)
        streams.close()
    killed = stopped is not None or streams.over
    return {
        "exit": None if killed or os.WIFSIGNALED(status) else os.WEXITSTATUS(status),
        "signal": None if killed or not os.WIFSIGNALED(status) else os.WTERMSIG(status),
        "timeout": stopped is not None and stopped != HOST,
        "contention": stopped == HOST,
        "output_limit": streams.over,
        "ms": round((ended - started) * 1000, 3),
        "wait_ms": limit.limit.figures()["wait_ms"],
        "cpu_ms": round((usage.ru_utime + usage.ru_stime) * 1000, 3),
        "max_rss_kb": int(usage.ru_maxrss),
        "stdout": b64(streams.data[out_r]),
        "stderr": b64(streams.data[err_r]),
        "stdout_bytes": streams.written[out_r],
        "stderr_bytes": streams.written[err_r],
    }


def _inside(root: str, path: str) -> bool:
    real = os.path.realpath(path)
    return real == root or real.startswith(root + "/")


def _files_under(root: str, rel: str) -> list[str]:
    """Regular files at or under ``rel`` (never following a link), sorted; raises OSError if absent."""
    if not stat.S_ISDIR(os.lstat(os.path.join(root, rel)).st_mode):
        return [rel]
    found: list[str] = []
    stack = [rel]
    while stack:
        current = stack.pop()
        with os.scandir(os.path.join(root, current)) as entries:
            for entry in entries:
                name = current + "/" + entry.name
                if entry.is_dir(follow_symlinks=False):
                    stack.append(name)
                elif entry.is_file(follow_symlinks=False):
                    found.append(name)
    return sorted(found)


def place(pairs: list[list[str]]) -> None:
    """Move each staged file of the work dir to its absolute path (the run's own /tmp or /mnt, checked on
    the host), directories created, never through a link; then the staging folder goes. A file that cannot
    be placed stays unplaced: the program then fails to find it, the caller's failure, not the sandbox's."""
    for staged, target in pairs:
        parent = "/"
        try:
            for part in target.split("/")[1:-1]:
                parent = os.path.join(parent, part)
                if not os.path.isdir(parent):
                    os.mkdir(parent, 0o755)
            src = os.open(staged, os.O_RDONLY | os.O_NOFOLLOW)
            try:
                dst = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
                try:
                    write_all(dst, read_all(src))
                finally:
                    os.close(dst)
            finally:
                os.close(src)
        except OSError as exc:
            os.write(2, f"cannot place {target[:200]}: {exc.strerror}\n".encode())
    if pairs:
        _remove_tree(pairs[0][0].split("/", 1)[0])


def _remove_tree(top: str) -> None:
    for current, dirs, files in os.walk(top, topdown=False):
        for name in files:
            os.unlink(os.path.join(current, name))
        for name in dirs:
            os.rmdir(os.path.join(current, name))
    os.rmdir(top)


def _root_of(name: str, cwd: str) -> tuple[str, str]:
    """(root, path under it): an absolute name (``/mnt/x``) is under its first directory, others the work dir's."""
    if name.startswith("/"):
        top, _, rest = name[1:].partition("/")
        return os.path.realpath("/" + top), rest
    return cwd, name


def collect(out: Out, names: list[str], max_bytes: int, max_files: int) -> None:
    """Send back every regular file at or under ``names`` (relative to the work dir, or absolute under the
    run's /tmp or /mnt as the host checked), within the caps."""
    cwd = os.path.realpath(os.getcwd())
    budget, count = max_bytes, 0
    for name in names:
        root, rel = _root_of(name, cwd)
        prefix = name[: len(name) - len(rel)] if root != cwd else ""  # "/mnt/" for "/mnt/x"
        try:
            if not rel or not _inside(root, os.path.join(root, os.path.dirname(rel) or ".")):
                out.emit({"missing": name, "why": "outside the work dir"})
                continue
            files = _files_under(root, rel)
        except OSError as exc:
            out.emit({"missing": name, "why": exc.strerror or "unreadable"})
            continue
        except RecursionError:  # realpath recurses once per link: a long chain the program made (its doing)
            out.emit({"missing": name, "why": "too many levels of symbolic links"})
            continue
        for path in files:
            count += 1
            if count > max_files:
                out.emit({"missing": prefix + path, "why": f"more than {max_files} files"})
                return
            try:
                fd = os.open(os.path.join(root, path), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            except OSError as exc:
                out.emit({"missing": prefix + path, "why": exc.strerror or "unreadable"})
                continue
            try:
                if not os.path.isfile(f"/proc/self/fd/{fd}") or not _inside(root, f"/proc/self/fd/{fd}"):
                    out.emit({"missing": prefix + path, "why": "not a regular file of the work dir"})
                    continue
                data = os.read(fd, budget + 1) if budget >= 0 else b""
                more = os.read(fd, 1) if len(data) <= budget else b""
            except OSError as exc:
                out.emit({"missing": prefix + path, "why": exc.strerror or "unreadable"})
                continue
            finally:
                os.close(fd)
            if len(data) > budget or more:
                out.emit({"missing": prefix + path, "why": f"over the {max_bytes}-byte cap of returned files"})
                return
            budget -= len(data)
            out.emit({"file": prefix + path, "b64": b64(data)})


def main() -> int:
    """One step; the exit status says nothing (only framed records count)."""
    hardened = _prctl(PR_SET_DUMPABLE, 0) and become_subreaper()  # the limit counts a daemon it leaves
    blob = read_all(0)
    nonce = blob[:NONCE_LEN]
    nl = blob.index(b"\n", NONCE_LEN + 1)
    header: dict[str, Any] = json.loads(blob[NONCE_LEN + 1 : nl])
    stdin = blob[nl + 1 :]
    del blob
    out = Out(nonce)
    out.emit({"hello": True, "hardened": hardened})
    place([[str(a), str(b)] for a, b in header.get("place", [])])
    make_executable([str(n) for n in header.get("executables", [])])
    step = run_step(header, stdin)
    out.emit({"step": step})
    if header.get("collect") and (header.get("collect_always") or (step["exit"] == 0)):
        collect(out, [str(n) for n in header["collect"]], int(header["max_collect_bytes"]),
                int(header["max_collect_files"]))  # fmt: skip
    out.emit({"done": True})
    return 0


if __name__ == "__main__":
    sys.stdout.flush()
    os._exit(main())
