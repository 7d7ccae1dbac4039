"""The candidate's side of the grading harness: the children it forks, and the server child that holds the
candidate module and answers calls.

Why: only these children ever run candidate code. Each one first wipes the secrets (the nonce, the job),
re-plumbs fds 0-2 to /dev/null or pipes to the parent, takes its own process group and dies with the parent;
the parent kills every process a case left (``sweep_strays``) before the next case.

Guest code (standard library only), spliced into the grading harness (``harness``).
"""

from __future__ import annotations

import functools
import io
import os
import signal
import sys
import types

from guest.child_pipes import (
    OutputPipes,
    check_reply,
    describe_exc,
    quietly,
    recv_msg,
    send_msg,
)
from guest.clock import ProcLimit, run_tree
from guest.plumbing import PR_SET_PDEATHSIG, prctl_ok
from guest.typed_values import HarnessError, NonPlainError, decode_value, encode_value

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs start-up time
if TYPE_CHECKING:
    from typing import Any

    from guest.child_pipes import Capture


def _wipe(*bufs: bytearray) -> None:
    for b in bufs:
        b[:] = bytes(len(b))


def child_common(
    secrets: tuple[bytearray, ...], stdin_fd: int | None, stdout_fd: int | None, stderr_fd: int | None
) -> None:
    """First thing in every child: wipe secrets, re-plumb fds 0-2, own process group, die with parent."""
    _wipe(*secrets)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(stdin_fd if stdin_fd is not None else null, 0)
    os.dup2(stdout_fd if stdout_fd is not None else null, 1)
    os.dup2(stderr_fd if stderr_fd is not None else null, 2)
    os.close(null)
    quietly(os.setsid)
    prctl_ok(PR_SET_PDEATHSIG, signal.SIGKILL)
    try:
        with open("/proc/self/oom_score_adj", "w") as f:  # the OOM killer should pick the candidate
            f.write("1000")
    except OSError:
        pass
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), write_through=False)
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), write_through=True)
    _STD[:] = [sys.stdout, sys.stderr]


#: The child's own stdout/stderr wrappers (not whatever the candidate put in ``sys.stdout``), flushed after
#: every load and call so the parent has the output before the reply.
_STD: list[io.TextIOWrapper] = []


def _flush_std() -> None:
    for stream in _STD:
        try:  # noqa: SIM105 - contextlib is not imported here (start-up cost)
            stream.flush()
        except BaseException:  # noqa: S110 - a closed or broken stream only loses the candidate's own output
            pass


def load_module(code: str, name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__file__ = "solution.py"
    sys.modules[name] = module
    compiled = compile(code, "solution.py", "exec", dont_inherit=True)
    exec(compiled, module.__dict__)  # noqa: S102 - this is the sandboxed candidate
    return module


def _import_entry(req: dict[str, Any]) -> types.ModuleType:
    """A workspace task's entry module, imported with the workspace as the working directory.

    The workspace goes on ``sys.path`` AFTER the standard library (a planted ``json.py`` or ``os.py`` never
    stands in for the real one), and bytecode is looked up in an empty directory outside it (a planted
    ``__pycache__`` pyc is never loaded for a source) and never written.
    """
    ws = req["workspace"]
    os.chdir(str(ws["dir"]))
    sys.pycache_prefix = str(ws["pycache"])
    sys.dont_write_bytecode = True
    sys.path.append(str(ws["dir"]))
    name = str(req["module"])
    __import__(name)
    return sys.modules[name]


def _serve(req_fd: int, rep_fd: int) -> None:
    """Server child: load the candidate module, then answer call requests until EOF."""
    module: types.ModuleType | None = None
    while True:
        try:
            req = recv_msg(req_fd, None)
        except HarnessError:
            return
        if not isinstance(req, dict):
            return
        op = req.get("op")
        if op == "load":
            try:
                module = _import_entry(req) if "module" in req else load_module(str(req["code"]), "solution")
                reply: dict[str, object] = {"ok": True}
            except BaseException as exc:
                reply = {"ok": False, "error": "module failed to load: " + describe_exc(exc)}
            _flush_std()
            send_msg(rep_fd, reply)
        elif op == "call" and module is not None:
            reply = _call(module, req)
            _flush_std()
            send_msg(rep_fd, reply)
        else:
            return


def _call(module: types.ModuleType, req: dict[str, Any]) -> dict[str, object]:
    """Run one call; the reply is the tagged value or an error, never an exception."""
    try:
        fn = getattr(module, str(req["fn"]))
        args = decode_value(req.get("args", []))
        kwargs = decode_value(req.get("kwargs", {"$d": []}))
        assert isinstance(args, list)  # noqa: S101 - built by the parent
        assert isinstance(kwargs, dict)  # noqa: S101
    except BaseException as exc:
        return {"ok": False, "error": "cannot call: " + describe_exc(exc)}
    try:
        value = fn(*args, **kwargs)
    except BaseException as exc:
        return {"ok": False, "error": describe_exc(exc)}
    try:
        return {"ok": True, "value": encode_value(value)}
    except NonPlainError as exc:
        return {"ok": False, "error": str(exc)}
    except BaseException as exc:
        return {"ok": False, "error": "return value could not be serialized: " + describe_exc(exc)}


class Server:
    """Parent-side handle on a server child that holds the candidate module."""

    def __init__(self, pid: int, req_fd: int, rep_fd: int, output: OutputPipes) -> None:
        self.pid = pid
        self.req_fd = req_fd
        self.rep_fd = rep_fd
        self.output = output
        self.alive = True

    @classmethod
    def spawn(cls, secrets: tuple[bytearray, ...], capture: Capture) -> Server:
        """Fork a server child (its own session and process group, kept by ``sweep_strays`` while alive)."""
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # child
            code = 0
            try:
                for fd in (req_w, rep_r, out_r, err_r):
                    os.close(fd)
                child_common(secrets, None, out_w, err_w)
                os.close(out_w)
                os.close(err_w)
                _serve(req_r, rep_w)
            except BaseException:
                code = 1
            finally:
                _flush_std()
                os._exit(code)
        for fd in (req_r, rep_w, out_w, err_w):
            os.close(fd)
        _LIVE_SERVERS.add(pid)
        return cls(pid, req_w, rep_r, OutputPipes(capture, out_r, err_r))

    def limit(self, timeout_s: float) -> ProcLimit:
        """A fresh limit of ``timeout_s`` on this server and the harness (one case's)."""
        return ProcLimit(timeout_s)

    def request(self, msg: dict[str, object], limit: ProcLimit) -> dict[str, Any]:
        """Send one request; the reply as a dict. HarnessError (and a killed server) on any failure."""
        if not self.alive:
            raise HarnessError("candidate process is gone")
        try:
            send_msg(self.req_fd, msg)
            reply = recv_msg(self.rep_fd, limit, self.output)
        except (HarnessError, OSError) as exc:
            self.kill()
            why = limit.limit.reason
            raise HarnessError(limit.limit.stop_text() if why else f"candidate process died: {exc}") from exc
        try:
            return check_reply(reply)
        except HarnessError:
            self.kill()
            raise

    def kill(self) -> None:
        if not self.alive:
            return
        self.alive = False
        _LIVE_SERVERS.discard(self.pid)
        kill_group(self.pid)
        for fd in (self.req_fd, self.rep_fd):
            quietly(functools.partial(os.close, fd))
        self.output.finish()


#: The process groups of live server children (each is its own group): a case's leftovers are everything else.
_LIVE_SERVERS: set[int] = set()


def sweep_strays(rounds: int = 5) -> None:
    """SIGKILL every process the harness started but the live servers' process groups, and reap what became
    ours: what a case left running (a child that left its group, a daemon) would otherwise compute in the
    background of later cases, on time no case's limit was counting while it waited.

    Only the harness's own descendants (``run_tree``; it is their subreaper, so a daemon stays one): never a
    process it did not start, wherever it runs. A sweep of every process it could signal would, run outside a
    sandbox as root, end the machine's processes."""
    me = os.getpid()
    for _ in range(rounds):
        killed = False
        for pid, fields in run_tree(me).items():
            if pid == me or pid in _LIVE_SERVERS:
                continue
            try:
                if os.getpgid(pid) in _LIVE_SERVERS:
                    continue
                if fields[0] in (b"Z", b"X"):
                    if int(fields[1]) == me:
                        os.waitpid(pid, os.WNOHANG)
                    continue
                os.kill(pid, signal.SIGKILL)
                killed = True
            except OSError:
                continue
        if not killed:
            return


def kill_group(pid: int) -> None:
    """SIGKILL a child's process group (and the child, should it have left the group), then reap it."""
    quietly(lambda: os.killpg(pid, signal.SIGKILL))
    quietly(lambda: os.kill(pid, signal.SIGKILL))
    quietly(lambda: os.waitpid(pid, 0))  # ChildProcessError is an OSError
