"""The io suites of the grading harness: one child per case, stdin from a memfd, stdout/stderr read by the
parent with caps; the case's program is the candidate's text run as ``__main__``, or a workspace task's (or a
built program's) command in its work dir.

Guest code (standard library only), spliced into the grading harness (``harness``).
"""

from __future__ import annotations

import builtins
import functools
import os
import select
import signal
import sys
import time

from guest.as_main import main_status
from guest.call_suites import Job
from guest.candidate_server import child_common, kill_group, load_module
from guest.child_pipes import MAX_ERROR_CHARS, bound_read, bound_write_all, quietly
from guest.clock import ProcLimit
from guest.harness_records import SuiteRecords, stopped_record

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs start-up time
if TYPE_CHECKING:
    from typing import Any, TypeAlias

    from guest.child_pipes import Capture
    from guest.harness_workspace import Workspace

    #: What an io case runs: a program's text, or a workspace task's command (argv) in its workspace.
    Program: TypeAlias = "str | tuple[list[str], Workspace]"


def run_io_suite(job: Job, suite: dict[str, Any], out: SuiteRecords, capture: Capture) -> None:
    timeout_s = float(suite["timeout_s"])
    secrets, ws = job.secrets, job.ws
    code: Program = str(job.header["code"]) if ws is None else (list(suite["command"]), ws)
    cap = int(suite.get("max_stdout_bytes", 1 << 20))
    for case in suite["cases"]:
        cid = str(case["id"])
        stdin = str(case.get("stdin", "")).encode()
        out.case(_io_case(cid, code, stdin, secrets, timeout_s, cap, capture))


def _io_case(  # noqa: PLR0917
    cid: str, code: Program, stdin: bytes, secrets: tuple[bytearray, ...], timeout_s: float, cap: int, capture: Capture
) -> dict[str, object]:
    started = time.monotonic()
    mem = os.memfd_create("stdin")
    bound_write_all(mem, stdin)
    os.lseek(mem, 0, os.SEEK_SET)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            os.close(out_r)
            os.close(err_r)
            child_common(secrets, mem, out_w, err_w)
            for fd in (mem, out_w, err_w):
                os.close(fd)
            status = _exec_main(code) if isinstance(code, str) else _exec_command(*code)
        except BaseException:
            status = 1
        finally:
            os._exit(status)
    for fd in (mem, out_w, err_w):
        os.close(fd)
    limit = ProcLimit(timeout_s)
    try:
        stdout, stderr, stopped, truncated = _collect(out_r, err_r, pid, limit, cap, capture)
    finally:
        os.close(out_r)
        os.close(err_r)
    exit_code, sig = _reap(pid, stopped is not None or truncated)
    if stopped is not None:
        return {**stopped_record(cid, stopped, limit), "ms": round((time.monotonic() - started) * 1000, 3)}
    record: dict[str, object] = {
        "id": cid,
        "ms": round((time.monotonic() - started) * 1000, 3),
        **limit.limit.figures(),
    }
    if truncated:
        return {**record, "ok": False, "error": f"stdout exceeds {cap} bytes"}
    try:
        text = stdout.decode("utf-8")
    except UnicodeDecodeError:
        return {**record, "ok": False, "error": "stdout is not valid UTF-8"}
    tail = stderr.decode("utf-8", "replace")[-MAX_ERROR_CHARS:]
    if exit_code != 0:
        why = f"exit code {exit_code}" if sig is None else f"killed by signal {sig}"
        return {**record, "ok": False, "error": why, "stderr_tail": tail, "stdout": text}
    return {**record, "ok": True, "stdout": text, "stderr_tail": tail}


def _exec_main(code: str) -> int:
    """Run the candidate program as ``__main__``; its exit status (SystemExit honoured like CPython)."""
    return main_status(functools.partial(_run_as_main, code))


def _run_as_main(code: str) -> None:
    sys.argv = ["solution.py"]
    _site_exit_builtins()
    load_module(code, "__main__")


def _exec_command(argv: list[str], ws: Workspace) -> int:
    """Become a workspace task's command (an io case, or its public command suite) in the workspace, with the
    environment ``Workspace`` made; 127 when it cannot be run."""
    try:
        os.chdir(ws.dir)
        os.execvpe(argv[0], argv, ws.env)  # noqa: S606 - the task's command, in the sandbox
    except OSError as exc:
        why = f"cannot run {argv[0][:200]}: {exc.strerror}\n".encode()
        quietly(lambda: os.write(2, why))
    return 127


def _site_exit_builtins() -> None:
    """``exit``/``quit`` as ``site`` defines them (the harness runs with ``-S``): io programs use them."""
    try:
        import _sitebuiltins

        builtins.exit = _sitebuiltins.Quitter("exit", "Ctrl-D (i.e. EOF)")
        builtins.quit = _sitebuiltins.Quitter("quit", "Ctrl-D (i.e. EOF)")
    except Exception:  # noqa: S110 - without them a program calling exit() just fails its case
        pass


def _collect(  # noqa: PLR0917
    out_r: int, err_r: int, pid: int, limit: ProcLimit, cap: int, capture: Capture | None = None
) -> tuple[bytes, bytes, str | None, bool]:
    """Read a child's stdout (capped) and stderr (tail kept) until both close and the child has ended, or its
    limit stops it (the third item: why)."""
    out = bytearray()
    err = bytearray()
    open_fds = {out_r, err_r}
    exited = os.pidfd_open(pid)
    try:
        while open_fds or not _readable(exited):
            stopped = limit.poll()
            if stopped is not None:
                return bytes(out), bytes(err), stopped, False
            watched = list(open_fds) or [exited]
            ready, _, _ = select.select(watched, [], [], limit.next_wait())
            more = _drain(ready, out_r, err_r, out, err, cap, capture)
            if more is None:
                return bytes(out[:cap]), bytes(err), None, True
            open_fds -= more
    finally:
        os.close(exited)
    return bytes(out), bytes(err), None, False


def _readable(fd: int) -> bool:
    """Whether ``fd`` (a pidfd: the process ended) is readable now."""
    return bool(select.select([fd], [], [], 0)[0])


def _drain(  # noqa: PLR0917
    ready: list[int], out_r: int, err_r: int, out: bytearray, err: bytearray, cap: int, capture: Capture | None
) -> set[int] | None:
    """Read what is ready of a child's pipes: the ones that closed, or None once stdout passed ``cap``."""
    closed: set[int] = set()
    for fd in ready:
        if fd not in (out_r, err_r):
            continue  # the pidfd: the child ended
        chunk = bound_read(fd, 1 << 16)
        if chunk and capture is not None:
            capture.add(0 if fd == out_r else 1, chunk)
        if not chunk:
            closed.add(fd)
        elif fd == out_r:
            out += chunk
            if len(out) > cap:
                return None
        else:
            err += chunk
            del err[: max(0, len(err) - 4 * MAX_ERROR_CHARS)]
    return closed


def _reap(pid: int, force: bool) -> tuple[int | None, int | None]:
    """Exit code and signal of a finished child; its whole process group is killed either way."""
    if force:
        kill_group(pid)
        return None, signal.SIGKILL
    _, status = os.waitpid(pid, 0)
    quietly(lambda: os.killpg(pid, signal.SIGKILL))  # daemonized leftovers in its group
    if os.WIFSIGNALED(status):
        return None, os.WTERMSIG(status)
    return os.WEXITSTATUS(status), None
