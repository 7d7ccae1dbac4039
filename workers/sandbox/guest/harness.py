"""The program that runs INSIDE the sandbox: runs candidate code against one job and reports framed records.

Why it is shaped like this (the grader's trust argument):

* The harness process ("parent") never runs candidate code. Candidate code runs in forked children that
  have no handle on the parent's stdout: their stdin/stdout/stderr are /dev/null or pipes to the parent.
  The parent is made non-dumpable (``prctl(PR_SET_DUMPABLE, 0)``) so a same-uid child can neither ptrace it
  nor open ``/proc/<parent>/fd/*`` or ``/proc/<parent>/mem``.
* Only the parent writes to stdout. Each record is ``\\n@@RS1 <nonce> <json>\\n``; the nonce comes on stdin,
  is read by the kernel straight into a bytearray, is never copied into another object, and every child
  zeroes its copy right after ``fork`` before any candidate code runs.
* ``call``: consecutive call suites share one server child (one fork, one module load per run); the child
  returns each value in a tagged JSON encoding built from exact builtin types only
  (no subclasses, no custom classes, size/depth capped, no NaN/inf). The parent treats every reply as
  hostile (the candidate can write anything on its pipe): ``reply_value`` re-checks it and turns it into
  typed JSON (tuples and sets keep their type), and a reply it cannot check or encode is that case's
  failure, never the harness's. Expected values never enter the sandbox, so a forged value is just a
  wrong answer.
* ``assert``: the task's helpers (from its prompt) and check code run in the PARENT, with the real builtins;
  the only thing of the candidate's they can reach is its entry point (``EntryPoint``), which sends plain
  arguments to the child and gets checked plain values back. The server child is forked before the job is
  even parsed, so the check code (and its expected values) never exists in the candidate's memory or files.
* ``io``: one child per case, stdin from a memfd, stdout/stderr read by the parent with caps.
* What candidate processes write to their stdout/stderr goes to pipes the parent drains whenever it waits
  (never to the parent's stdout, which is the protocol channel). The parent keeps the last ``OUTPUT_CAP``
  bytes of each stream and reports them, base64, in ``output`` records before ``done``: the grader shows
  the policy the candidate's output, never the protocol or check code's output.
* Time limits are the parent's, per case (a call, an io run, an assert check; loading the candidate's module has
  one of its own), enforced with SIGKILL: the CPU time and own time of every process of the run while the case
  runs (one that left the case's group still counts), never time spent waiting for a CPU (``guest.clock``).
  A case the host starved past the ceiling is reported with ``"contention": true``: the host repeats the
  run, it is never the candidate's failure. The outer sandbox enforces the whole run.
* Workspace jobs (an agent episode's final workspace, header ``"workspace"``): the parent restores the tar the
  host sent into ``ws/`` before any candidate process exists (``Workspace.prepare``). A call server imports
  ``module`` of ``module:function`` with ``ws/`` as its working directory and on ``sys.path`` after the
  standard library, bytecode looked up in an empty directory outside the workspace; an io case (or the public
  command, an io suite of one case) becomes the task's command in ``ws/`` under ``PYTHONSAFEPATH`` (``-P``),
  whose ``sitecustomize`` (in a site dir outside the workspace) appends ``ws/`` to ``sys.path`` in the same
  way. Expected values still never enter the sandbox: what the workspace plants can only change its answers.
* Program jobs (a program in another language, header ``"program"``, built by ``workers.languages`` before
  this run): its files are the work dir; io suites only, each case execs the suite's ``command`` (the
  language's run argv) there, exactly as a workspace command runs (``Workspace.program``).

Usage: ``python3 -I harness.py NBYTES N_ASSERT`` with NBYTES of stdin: a 32-byte nonce, then newline-separated
JSON segments (a header ``{"code", "entry_point"}``, then one per suite); N_ASSERT = number of assert suites.
A ``harness_error`` record (infrastructure: the job was malformed) is only ever written for the job's own
shape, checked before the suite it concerns runs.
Standard library only: it runs on the sandbox image's interpreter.
"""

from __future__ import annotations

import binascii
import builtins
import collections
import functools
import io
import json
import math
import os
import select
import signal
import sys
import time
import types

from workers.sandbox.guest.clock import HOST, ProcLimit, become_subreaper, run_tree
from workers.sandbox.guest.framing import MAGIC, NONCE_LEN
from workers.sandbox.guest.plumbing import prctl_ok, read_exact_into

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs start-up time

if TYPE_CHECKING:  # the harness imports nothing it does not need at run time (start-up cost)
    from collections.abc import Callable
    from typing import Any, NoReturn, TypeAlias

    #: What an io case runs: a program's text, or a workspace task's command (argv) in its workspace.
    Program: TypeAlias = "str | tuple[list[str], Workspace]"

MAX_DEPTH = 100
MAX_NODES = 200_000
MAX_INT_BITS = 4096
MAX_VALUE_BYTES = 256 * 1024
MAX_MESSAGE_BYTES = 8 * 1024 * 1024
MAX_ERROR_CHARS = 2000
#: Bytes of the candidate's stdout, and of its stderr, kept (the tail) and reported in ``output`` records.
OUTPUT_CAP = 1 << 20
PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
TAGS = ("$t", "$d", "$s", "$f", "$x")

# Bound before any candidate code runs, so a child that monkey-patches os/json only breaks itself (the
# parent re-validates everything a child sends, so this is robustness, not the security argument).
_write = os.write
_read = os.read
_dumps = json.dumps
_loads = json.loads
#: stdlib dict subclasses accepted as dicts; read with ``dict.items`` so overridden methods never run.
_DICT_TYPES = (dict, collections.OrderedDict, collections.defaultdict, collections.Counter)


class HarnessError(Exception):
    """Something the candidate (or a malformed job) did that ends the current case."""


class NonPlainError(HarnessError):
    """A value that is not a plain builtin value (custom class, subclass, NaN, too big, cyclic)."""


# --------------------------------------------------------------------------------------------------------
# Tagged values: plain JSON where possible; one-key objects for tuple/dict/set/frozenset/non-finite float.


def encode_value(value: object, *, allow_non_finite: bool = False) -> object:
    """Tagged JSON-ready form of ``value``, using exact builtin types only. Raises ``NonPlainError``."""
    budget = [MAX_NODES]
    return _enc(value, 0, budget, allow_non_finite)


def _enc(v: object, depth: int, budget: list[int], nonfinite: bool) -> object:  # noqa: C901, PLR0911, PLR0912
    """One node of ``encode_value``: exact ``type(v) is`` checks, never ``isinstance`` or ``==``."""
    budget[0] -= 1
    if budget[0] < 0:
        raise NonPlainError("value too large (too many elements)")
    if depth > MAX_DEPTH:
        raise NonPlainError("value nested too deeply (or self-referencing)")
    t = type(v)
    if v is None or t is bool:
        return v
    if t is int and isinstance(v, int):
        if v.bit_length() > MAX_INT_BITS:
            raise NonPlainError("integer too large")
        return v
    if t is float and isinstance(v, float):
        if math.isfinite(v):
            return v
        if not nonfinite:
            raise NonPlainError("non-finite float (NaN/inf) is never a valid result")
        return {"$x": "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")}
    if t is str and isinstance(v, str):
        budget[0] -= len(v) // 16
        if len(v) > MAX_VALUE_BYTES:
            raise NonPlainError("string too large")
        return v
    if (t is list or t is tuple or t is set or t is frozenset) and isinstance(v, list | tuple | set | frozenset):
        seq = v
        if len(seq) > MAX_NODES:
            raise NonPlainError("value too large (too many elements)")
        items = [_enc(x, depth + 1, budget, nonfinite) for x in seq]
        if t is list:
            return items
        return {"$t" if t is tuple else ("$s" if t is set else "$f"): items}
    if t in _DICT_TYPES and isinstance(v, dict):
        mapping = v
        if dict.__len__(mapping) > MAX_NODES:
            raise NonPlainError("value too large (too many elements)")
        return {
            "$d": [
                [_enc(k, depth + 1, budget, nonfinite), _enc(x, depth + 1, budget, nonfinite)]
                for k, x in dict.items(mapping)
            ]
        }
    raise NonPlainError(f"not a plain value: {_type_name(v)}")


def _type_name(v: object) -> str:
    """A type name that cannot run candidate code (no metaclass properties, no ``__repr__``)."""
    try:
        name = type.__dict__["__name__"].__get__(type(v))
        return name if type(name) is str else "?"
    except Exception:
        return "?"


def decode_value(obj: object) -> object:
    """Python value from the tagged form the parent sends a child (call arguments; non-finite floats allowed)."""
    t = type(obj)
    if obj is None or t is bool or t is int or t is float or t is str:
        return obj
    if isinstance(obj, list) and t is list:
        return [decode_value(x) for x in obj]
    if not (isinstance(obj, dict) and t is dict and len(obj) == 1):
        raise NonPlainError("malformed tagged value")
    ((tag, body),) = obj.items()
    if tag == "$x":
        if body not in ("nan", "inf", "-inf"):
            raise NonPlainError("non-finite float")
        return float(body)
    if not (isinstance(body, list) and type(body) is list):
        raise NonPlainError("malformed tagged value")
    if tag == "$t":
        return tuple(decode_value(x) for x in body)
    if tag in ("$s", "$f"):
        members = [decode_value(x) for x in body]
        try:
            return set(members) if tag == "$s" else frozenset(members)
        except TypeError as exc:
            raise NonPlainError("unhashable set member") from exc
    if tag == "$d":
        return _decode_pairs(body)
    raise NonPlainError("unknown tag")


def _decode_pairs(body: list[Any]) -> dict[Any, Any]:
    """A ``$d`` body: a list of [key, value] pairs."""
    out: dict[Any, Any] = {}
    for pair in body:
        if type(pair) is not list or len(pair) != 2:
            raise NonPlainError("malformed dict")
        try:
            out[decode_value(pair[0])] = decode_value(pair[1])
        except TypeError as exc:
            raise NonPlainError("unhashable dict key") from exc
    return out


def reply_value(obj: object, *, rich: bool) -> object:
    """A value a candidate process sent back, checked as if it were hostile (it may be: the candidate can
    write anything on its reply pipe): typed JSON for the grader (``rich=False``), or Python values for
    check code (``rich=True``). Raises ``NonPlainError`` for anything the grader must not see or cannot
    write: non-finite floats (``1e999``), huge ints, deep or wide values, lone surrogates, bad tags.

    Typed JSON is plain JSON plus ``$t``/``$s``/``$f`` for tuples and sets and ``$d`` for dicts whose keys
    are not all strings (see ``workers.grading.compare``): the form expected values are stored in.
    """
    return _reply(obj, 0, [MAX_NODES], rich)


def _reply(v: object, depth: int, budget: list[int], rich: bool) -> object:  # noqa: C901, PLR0911, PLR0912
    """One node of ``reply_value``."""
    budget[0] -= 1
    if budget[0] < 0:
        raise NonPlainError("value too large (too many elements)")
    if depth > MAX_DEPTH:
        raise NonPlainError("value nested too deeply (or self-referencing)")
    t = type(v)
    if v is None or t is bool:
        return v
    if t is int:
        if v.bit_length() > MAX_INT_BITS:  # type: ignore[attr-defined]
            raise NonPlainError("integer too large")
        return v
    if t is float:
        if not math.isfinite(v):  # type: ignore[arg-type]
            raise NonPlainError("non-finite float (NaN/inf) is never a valid result")
        return v
    if t is str:
        text: str = v  # type: ignore[assignment]
        if len(text) > MAX_VALUE_BYTES:
            raise NonPlainError("string too large")
        if not _valid_text(text):
            raise NonPlainError("string is not valid Unicode (it holds a lone surrogate)")
        budget[0] -= len(text) // 16
        return text
    if t is list:
        return [_reply(x, depth + 1, budget, rich) for x in v]  # type: ignore[attr-defined]
    if t is dict and len(v) == 1:  # type: ignore[arg-type]
        ((tag, body),) = v.items()  # type: ignore[attr-defined]
        if type(body) is list:
            if tag == "$d":
                return _reply_dict(body, depth, budget, rich)
            if tag in ("$t", "$s", "$f"):
                items = [_reply(x, depth + 1, budget, rich) for x in body]
                if tag == "$t":
                    return tuple(items) if rich else {tag: items}
                if not rich:
                    _distinct_keys(body, depth, "set member")
                    return {tag: items}
                try:
                    return set(items) if tag == "$s" else frozenset(items)
                except TypeError as exc:
                    raise NonPlainError("unhashable set member") from exc
    raise NonPlainError("malformed reply value")


def _distinct_keys(raw: list[Any], depth: int, what: str) -> None:
    """Set members (or dict keys) as a real set (or dict) holds them: hashable and distinct. Typed JSON
    cannot tell, so the rich values are built once more, for this check only."""
    keys = [_reply(x, depth + 1, [MAX_NODES], True) for x in raw]
    try:
        distinct = len(set(keys)) == len(keys)
    except TypeError as exc:
        raise NonPlainError(f"unhashable {what}") from exc
    if not distinct:
        raise NonPlainError(f"a {what} is there twice")


def _reply_dict(body: list[Any], depth: int, budget: list[int], rich: bool) -> object:
    """A ``$d`` body of ``reply_value``: a JSON object when every key is a string (and none looks like a tag),
    else ``$d`` pairs; a dict for check code."""
    pairs: list[tuple[Any, Any]] = []
    for pair in body:
        if type(pair) is not list or len(pair) != 2:
            raise NonPlainError("malformed dict")
        pairs.append((_reply(pair[0], depth + 1, budget, rich), _reply(pair[1], depth + 1, budget, rich)))
    if rich:
        out: dict[Any, Any] = {}
        for key, item in pairs:
            try:
                out[key] = item
            except TypeError as exc:
                raise NonPlainError("unhashable dict key") from exc
        return out
    keys = [k for k, _ in pairs]
    if all(type(k) is str for k in keys):
        if len(set(keys)) != len(keys):
            raise NonPlainError("a dict key is there twice")
        if not (len(keys) == 1 and keys[0] in TAGS):
            return dict(pairs)
    else:
        _distinct_keys([pair[0] for pair in body], depth, "dict key")
    return {"$d": [[k, item] for k, item in pairs]}


def _valid_text(text: str) -> bool:
    """True when ``text`` encodes as UTF-8 (no lone surrogate): only such text can leave the sandbox."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def tag_plain(obj: object) -> object:
    """Tagged form of a plain JSON value from the job (objects become ``$d``)."""
    if isinstance(obj, list):
        return [tag_plain(x) for x in obj]
    if isinstance(obj, dict):
        return {"$d": [[k, tag_plain(v)] for k, v in obj.items()]}
    return obj


def _reject_constant(name: str) -> NoReturn:
    raise NonPlainError(f"non-finite number {name}")


def strict_loads(data: bytes | bytearray | str) -> object:
    """JSON without NaN/Infinity (json's default accepts them)."""
    return _loads(data, parse_constant=_reject_constant)


# --------------------------------------------------------------------------------------------------------
# Low-level plumbing


def _write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    # Not plumbing.write_all: this one writes with ``_write``, bound before any candidate code runs.
    view = memoryview(data)
    while view:
        n = _write(fd, view)
        view = view[n:]


def _quietly(fn: Callable[[], object]) -> None:
    """Run ``fn`` ignoring OSError (cleanup of processes/fds that may already be gone)."""
    try:  # noqa: SIM105 - contextlib is not imported here (start-up cost)
        fn()
    except OSError:
        pass


def _wipe(*bufs: bytearray) -> None:
    for b in bufs:
        b[:] = bytes(len(b))


def send_msg(fd: int, obj: object) -> None:
    """Length-prefixed JSON message on a pipe."""
    body = _dumps(obj, separators=(",", ":"), allow_nan=False).encode()
    _write_all(fd, len(body).to_bytes(4, "big") + body)


def _read_n(fd: int, n: int, limit: ProcLimit | None, sink: OutputPipes | None = None) -> bytes | None:
    """Exactly ``n`` bytes, or None on EOF or once ``limit`` says stop; ``sink``'s pipes are drained while
    waiting."""
    chunks: list[bytes] = []
    left = n
    while left > 0:
        if limit is not None:
            if limit.poll() is not None:
                return None
            watch = [fd, *sink.fds] if sink is not None else [fd]
            ready, _, _ = select.select(watch, [], [], limit.next_wait())
            if not ready:
                continue
            if sink is not None:
                for other in ready:
                    if other != fd:
                        sink.pump(other)
                if fd not in ready:
                    continue
        chunk = _read(fd, min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def recv_msg(fd: int, limit: ProcLimit | None, sink: OutputPipes | None = None) -> object:
    """One length-prefixed JSON message; raises HarnessError on EOF, a limit reached, oversize or bad JSON."""
    head = _read_n(fd, 4, limit, sink)
    if head is None:
        raise HarnessError("no reply (process died or time limit reached)")
    size = int.from_bytes(head, "big")
    if size > MAX_MESSAGE_BYTES:
        raise HarnessError("reply too large")
    body = _read_n(fd, size, limit, sink)
    if body is None:
        raise HarnessError("truncated reply (process died or time limit reached)")
    return parse_msg(body)


def parse_msg(body: bytes) -> object:
    """The JSON of one message body; HarnessError for anything that is not strict JSON (bad UTF-8 too)."""
    try:
        return strict_loads(body)
    except (ValueError, RecursionError, NonPlainError) as exc:
        raise HarnessError("unparsable reply") from exc


def check_reply(reply: object) -> dict[str, Any]:
    """A candidate process's reply as the parent accepts it: an object whose ``ok`` is a bool."""
    if not isinstance(reply, dict) or type(reply.get("ok")) is not bool:
        raise HarnessError("malformed reply")
    return reply


class Capture:
    """The candidate's stdout and stderr as the parent reads them from its children: the last ``cap`` bytes
    of each stream and how many bytes were written in all."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.kept = (bytearray(), bytearray())
        self.total = [0, 0]

    def add(self, stream: int, chunk: bytes) -> None:
        self.total[stream] += len(chunk)
        buf = self.kept[stream]
        buf += chunk
        if len(buf) > 2 * self.cap:  # trimmed in batches: appending stays linear
            del buf[: len(buf) - self.cap]

    def emit(self, out: Emitter) -> None:
        """An ``output`` record for stdout, then stderr, each cut to fit what is left of the output budget;
        none for a stream nothing was written to (the ``done`` record after them says the report is whole)."""
        for stream, name in enumerate(("stdout", "stderr")):
            buf = self.kept[stream]
            if not self.total[stream]:
                continue
            room = (out.budget - 1024) // (2 - stream)  # stdout leaves half for stderr; 1 KiB for the rest
            keep = max(0, min(self.cap, len(buf), room * 3 // 4 - 64))
            data = bytes(buf[len(buf) - keep :])
            b64 = binascii.b2a_base64(data, newline=False).decode("ascii")
            out.emit({"output": name, "b64": b64, "bytes": self.total[stream]})


class OutputPipes:
    """Parent-side read ends of one child's stdout and stderr pipes, feeding a ``Capture``."""

    def __init__(self, capture: Capture, out_r: int, err_r: int) -> None:
        self.capture = capture
        self.streams = {out_r: 0, err_r: 1}
        self.fds = [out_r, err_r]

    def pump(self, fd: int) -> None:
        """Read what is there (the fd was reported readable); EOF closes it."""
        try:
            chunk = _read(fd, 1 << 16)
        except OSError:
            chunk = b""
        if chunk:
            self.capture.add(self.streams[fd], chunk)
        else:
            self._close(fd)

    def finish(self) -> None:
        """After the child is dead: read what is left, then close. Bounded, should an escaped grandchild
        still hold a pipe (it may keep writing): at most 0.5 s or 4 caps."""
        stop = time.monotonic() + 0.5
        budget = 4 * self.capture.cap
        while self.fds and budget > 0 and time.monotonic() < stop:
            ready, _, _ = select.select(self.fds, [], [], 0.02)
            if not ready:
                break
            for fd in ready:
                before = sum(self.capture.total)
                self.pump(fd)
                budget -= sum(self.capture.total) - before
        for fd in list(self.fds):
            self._close(fd)

    def _close(self, fd: int) -> None:
        if fd in self.fds:
            self.fds.remove(fd)
            _quietly(functools.partial(os.close, fd))


def _short(text: str) -> str:
    return (
        text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS // 2] + " ... " + text[-MAX_ERROR_CHARS // 2 :]
    )


def _describe_exc(exc: BaseException) -> str:
    """Traceback text of a candidate exception, never raising (its __str__ may be hostile)."""
    try:
        import traceback  # only when a candidate raised (start-up cost)

        return _short("".join(traceback.format_exception(exc)))
    except BaseException:
        return _type_name(exc)


# --------------------------------------------------------------------------------------------------------
# Workspace jobs (agent episodes): the candidate is a directory, not a program text

#: What a workspace's ``sitecustomize`` (in a site dir outside it, first on ``PYTHONPATH``) does for commands
#: run under ``PYTHONSAFEPATH``: the workspace goes on ``sys.path`` after the stdlib and site-packages.
SITECUSTOMIZE = "import sys\nif {ws!r} not in sys.path:\n    sys.path.append({ws!r})\n"


class Workspace:
    """A workspace job's layout in the work dir, made by the parent before any candidate process exists.

    ``dir`` is the restored workspace (absolute); ``pycache`` an empty directory outside it where bytecode is
    looked up instead of the workspace's ``__pycache__``; ``env`` the whole environment of its commands.
    """

    def __init__(self, directory: str, pycache: str, env: dict[str, str]) -> None:
        self.dir = directory
        self.pycache = pycache
        self.env = env

    @classmethod
    def prepare(cls, spec: object) -> Workspace:
        """Restore the workspace tar the host sent (``spec["tar"]``, a canonical snapshot) into
        ``spec["dir"]`` with the step runner's own ``restore`` (its source is ``spec["restore"]``), and lay
        out the bytecode and site dirs. HarnessError (the job's fault: infrastructure) when anything fails."""
        names = ("tar", "restore", "dir", "pycache", "site")
        if type(spec) is not dict or any(
            type(spec.get(k)) is not str or "/" in spec[k] or spec[k] in ("", ".", "..") for k in names
        ):
            raise HarnessError("workspace job without its file names")
        extra = spec.get("env")
        if type(extra) is not dict or not all(type(k) is str and type(v) is str for k, v in extra.items()):
            raise HarnessError("workspace job without its environment")
        root = os.getcwd()
        ws, pycache, site = (os.path.join(root, spec[k]) for k in ("dir", "pycache", "site"))
        try:
            with open(spec["restore"], "rb") as f:
                source = f.read()
            with open(spec["tar"], "rb") as f:
                data = f.read()
            os.unlink(spec["tar"])
            os.unlink(spec["restore"])
            namespace: dict[str, Any] = {"__name__": "rs_restore", "__builtins__": builtins}
            exec(compile(source, spec["restore"], "exec", dont_inherit=True), namespace)  # noqa: S102 - ours
            for path in (ws, pycache, site):
                os.mkdir(path, 0o755)
            os.chdir(ws)
            try:
                namespace["restore"](data)
            finally:
                os.chdir(root)
            with open(os.path.join(site, "sitecustomize.py"), "w") as f:
                f.write(SITECUSTOMIZE.format(ws=ws))
        except Exception as exc:
            raise HarnessError(f"cannot restore the workspace: {_type_name(exc)}: {exc}") from None
        env = {**os.environ, **extra, "PYTHONPATH": site, "PYTHONPYCACHEPREFIX": pycache}
        return cls(ws, pycache, env)

    @classmethod
    def program(cls, spec: object) -> Workspace:
        """A built program in any language (header ``"program"``): its files are the work dir as the host
        wrote them, io suites run their ``command`` there with the sandbox's environment. ``executables`` are
        made executable first (the host writes every file 0644), never through a link; one that is missing
        or not a regular file is left alone: running it then fails, the candidate's failure."""
        if type(spec) is not dict or type(spec.get("executables")) is not list:
            raise HarnessError("program job without its executables")
        for name in spec["executables"]:
            if type(name) is not str or not name or name.startswith("/") or ".." in name.split("/"):
                raise HarnessError("program job with a bad executable name")
            try:
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            except OSError:
                continue
            try:
                if os.path.isfile(f"/proc/self/fd/{fd}"):
                    os.fchmod(fd, 0o755)
            finally:
                os.close(fd)
        return cls(os.getcwd(), "", dict(os.environ))


# --------------------------------------------------------------------------------------------------------
# Children (candidate side)


def _child_common(
    secrets: tuple[bytearray, ...], stdin_fd: int | None, stdout_fd: int | None, stderr_fd: int | None
) -> None:
    """First thing in every child: wipe secrets, re-plumb fds 0-2, own process group, die with parent."""
    _wipe(*secrets)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(stdin_fd if stdin_fd is not None else null, 0)
    os.dup2(stdout_fd if stdout_fd is not None else null, 1)
    os.dup2(stderr_fd if stderr_fd is not None else null, 2)
    os.close(null)
    _quietly(os.setsid)
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


def _load_module(code: str, name: str) -> types.ModuleType:
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
                module = _import_entry(req) if "module" in req else _load_module(str(req["code"]), "solution")
                reply: dict[str, object] = {"ok": True}
            except BaseException as exc:
                reply = {"ok": False, "error": "module failed to load: " + _describe_exc(exc)}
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
        return {"ok": False, "error": "cannot call: " + _describe_exc(exc)}
    try:
        value = fn(*args, **kwargs)
    except BaseException as exc:
        return {"ok": False, "error": _describe_exc(exc)}
    try:
        return {"ok": True, "value": encode_value(value)}
    except NonPlainError as exc:
        return {"ok": False, "error": str(exc)}
    except BaseException as exc:
        return {"ok": False, "error": "return value could not be serialized: " + _describe_exc(exc)}


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
                _child_common(secrets, None, out_w, err_w)
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
        _kill_group(self.pid)
        for fd in (self.req_fd, self.rep_fd):
            _quietly(functools.partial(os.close, fd))
        self.output.finish()


def stopped_record(cid: str, reason: str, limit: ProcLimit) -> dict[str, object]:
    """The record of a case its limit stopped; ``contention`` marks one the host starved."""
    record: dict[str, object] = {"id": cid, "ok": False, "error": limit.limit.stop_text(), **limit.limit.figures()}
    if reason == HOST:
        record["contention"] = True
    return record


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


def _kill_group(pid: int) -> None:
    """SIGKILL a child's process group (and the child, should it have left the group), then reap it."""
    _quietly(lambda: os.killpg(pid, signal.SIGKILL))
    _quietly(lambda: os.kill(pid, signal.SIGKILL))
    _quietly(lambda: os.waitpid(pid, 0))  # ChildProcessError is an OSError


# --------------------------------------------------------------------------------------------------------
# Parent


class Emitter:
    """Writes nonce-framed records to stdout (fd 1) with ``writev``, so the nonce is never copied."""

    def __init__(self, nonce: bytearray, budget: int) -> None:
        self.nonce = nonce
        self.budget = budget

    def encode(self, record: dict[str, object]) -> bytes:
        """The JSON body of one record, charged to the budget; one that cannot be encoded or does not fit
        becomes its case's failure (a value the candidate forged must never stop the harness)."""
        try:
            body = _dumps(record, separators=(",", ":"), allow_nan=False).encode()
        except (ValueError, TypeError, RecursionError, OverflowError):
            body = _failure_body(record, "result could not be encoded")
        if len(body) > self.budget:
            body = _failure_body(record, "harness output budget exceeded")
        self.budget -= len(body)
        return body

    def emit(self, record: dict[str, object]) -> None:
        """Write one record, framed."""
        body = self.encode(record)
        parts: list[bytes | bytearray] = [b"\n" + MAGIC + b" ", self.nonce, b" ", body, b"\n"]
        total = sum(len(p) for p in parts)
        written = os.writev(1, parts)
        if written < total:  # rare partial write on a pipe: finish it byte-exactly
            rest = memoryview(b"".join(bytes(p) for p in parts))[written:]
            _write_all(1, rest)


def _failure_body(record: dict[str, object], why: str) -> bytes:
    """A case's failure record in place of ``record`` (its suite and id only when they are what they seem)."""
    suite, cid = record.get("suite"), record.get("id")
    failure = {"suite": suite if type(suite) is int else None, "id": cid if type(cid) is str else None}
    return _dumps({**failure, "ok": False, "error": why}, separators=(",", ":")).encode()


class SuiteRecords:
    """The records of one suite: each case is reported once, and ``fail_rest`` reports every case the
    suite did not get to (so whatever stopped it, each case still has its one record)."""

    def __init__(self, out: Emitter, sid: int, case_ids: list[str]) -> None:
        self.out = out
        self.sid = sid
        self.case_ids = case_ids
        self.reported: set[str] = set()

    def case(self, record: dict[str, object]) -> None:
        """Report one case, then end whatever it left running (``sweep_strays``): nothing a case started
        works on in the background of the next one."""
        cid = record.get("id")
        if type(cid) is str and cid not in self.reported:
            self.reported.add(cid)
            self.out.emit({"suite": self.sid, **record})
        sweep_strays()

    def fail_rest(self, why: str) -> None:
        for cid in self.case_ids:
            self.case({"id": cid, "ok": False, "error": why})


class CallServer:
    """The candidate process shared by consecutive call suites (one fork and one module load per run).

    Why sharing is safe: expected values never enter the sandbox and every suite's answers are computed by
    the candidate anyway, so state carried from one suite to the next cannot turn a wrong answer into a
    right one. A server that died or timed out is replaced; assert suites never see it (killed first).
    """

    def __init__(self, capture: Capture) -> None:
        self.server: Server | None = None
        #: Why the candidate did not load (a case's record without its id), or None.
        self.load_error: dict[str, object] | None = {"ok": False, "error": "not loaded"}
        self.capture = capture

    def get(
        self, load: dict[str, object], secrets: tuple[bytearray, ...], timeout_s: float
    ) -> tuple[Server, dict[str, object] | None]:
        """A live server with the candidate loaded (``load`` is the request, under a limit of its own), or the
        one that failed to load and why."""
        if self.server is None or not self.server.alive or self.load_error is not None:
            self.kill()
            self.server = Server.spawn(secrets, self.capture)
            self.load_error = _load(self.server, load, timeout_s)
        return self.server, self.load_error

    def kill(self) -> None:
        if self.server is not None:
            self.server.kill()
            self.server = None


class Job:
    """What every suite of a job runs against: the header (the candidate's code and entry point), the
    restored workspace of a workspace job, and the secrets each child wipes."""

    def __init__(self, header: dict[str, Any], ws: Workspace | None, secrets: tuple[bytearray, ...]) -> None:
        self.header = header
        self.ws = ws
        self.secrets = secrets


def _run_call(job: Job, suite: dict[str, Any], out: SuiteRecords, shared: CallServer) -> None:
    timeout_s = float(suite["timeout_s"])
    secrets = job.secrets
    load, entry = _load_request(job.header, job.ws)
    server, load_error = shared.get(load, secrets, timeout_s)
    for case in suite["cases"]:
        cid = str(case["id"])
        if not server.alive and load_error is None:
            # the candidate killed itself (or timed out); later cases still get a run
            server, load_error = shared.get(load, secrets, timeout_s)
        if load_error is not None:
            out.case({"id": cid, **load_error})
            continue
        msg = {
            "op": "call",
            "fn": entry,
            "args": tag_plain(case.get("args", [])),
            "kwargs": tag_plain(case.get("kwargs", {})),
        }
        out.case(_call_record(cid, server, msg, server.limit(timeout_s)))


def _load_request(job: dict[str, Any], ws: Workspace | None) -> tuple[dict[str, object], str]:
    """(the request that loads the candidate, the function to call): the program's text, or on a workspace
    task the ``module`` of ``module:function`` from the workspace."""
    entry = str(job["entry_point"])
    if ws is None:
        return {"op": "load", "code": str(job["code"])}, entry
    module, _, function = entry.rpartition(":")
    return {"op": "load", "module": module, "workspace": {"dir": ws.dir, "pycache": ws.pycache}}, function


def _load(server: Server, load: dict[str, object], timeout_s: float) -> dict[str, object] | None:
    """Load the candidate module in ``server`` under a limit of its own: None, or the record (without its id)
    of every case that needs it: why it did not load (the candidate's failure), or that the host starved the
    load (``contention``: the host repeats the run)."""
    limit = server.limit(timeout_s)
    try:
        reply = server.request(load, limit)
    except HarnessError as exc:
        if limit.limit.reason is not None:
            record = stopped_record("", limit.limit.reason, limit)
            del record["id"]
            return {**record, "error": f"module load: {record['error']}"}
        return {"ok": False, "error": f"module load: {exc}"}
    return None if reply["ok"] else {"ok": False, "error": _error_text(reply)}


def _call_record(cid: str, server: Server, msg: dict[str, object], limit: ProcLimit) -> dict[str, object]:
    """The record of one call case: the reply's value as typed JSON, or why there is none."""
    started = time.monotonic()
    try:
        reply = server.request(msg, limit)
    except HarnessError as exc:
        if limit.limit.reason is not None:
            return stopped_record(cid, limit.limit.reason, limit)
        return {"id": cid, "ok": False, "error": str(exc)}
    return {**reply_record(cid, reply, round((time.monotonic() - started) * 1000, 3)), **limit.limit.figures()}


def reply_record(cid: str, reply: dict[str, Any], ms: float) -> dict[str, object]:
    """A call case's record from the candidate's (checked, but otherwise arbitrary) reply."""
    if not reply["ok"]:
        return {"id": cid, "ok": False, "error": _error_text(reply), "ms": ms}
    try:
        value = reply_value(reply.get("value"), rich=False)
    except (NonPlainError, RecursionError) as exc:
        return {"id": cid, "ok": False, "error": str(exc), "ms": ms}
    return {"id": cid, "ok": True, "value": value, "ms": ms}


def _error_text(reply: dict[str, Any]) -> str:
    """The error a candidate process reported, if it is text (anything else is the candidate's garbage)."""
    error = reply.get("error")
    if type(error) is not str:
        return "candidate process sent a malformed error"
    return _short(error) if _valid_text(error) else _short(error.encode("utf-8", "replace").decode("utf-8"))


class CandidateCallError(AssertionError):
    """A proxied call failed (the candidate raised, died, timed out or returned a non-plain value)."""


class EntryPoint:
    """Stands in for the candidate's entry point inside the check code: plain values in, plain values out.

    It is the only thing of the candidate's the check can reach. Arguments are copied out as tagged plain
    values (the candidate never holds an object of the check's); replies are checked by ``reply_value``
    and become fresh builtin values. ``answered`` counts the calls that got a value back: the proof that
    the check really exercised the candidate.
    """

    def __init__(self, server: Server, name: str, limit: ProcLimit) -> None:
        self._server = server
        self._name = name
        self._limit = limit
        self.answered = 0

    def __call__(self, *args: object, **kwargs: object) -> object:
        try:
            msg = {
                "op": "call",
                "fn": self._name,
                "args": encode_value(list(args), allow_non_finite=True),
                "kwargs": encode_value(dict(kwargs), allow_non_finite=True),
            }
        except NonPlainError as exc:
            raise CandidateCallError(f"check passed a non-plain argument to {self._name}: {exc}") from None
        try:
            reply = self._server.request(msg, self._limit)
        except HarnessError as exc:
            raise CandidateCallError(f"{self._name}: {exc}") from None
        if not reply["ok"]:
            raise CandidateCallError(f"{self._name} raised: {_error_text(reply)}")
        try:
            value = reply_value(reply.get("value"), rich=True)
        except (NonPlainError, RecursionError) as exc:
            raise CandidateCallError(f"{self._name} returned {exc}") from None
        self.answered += 1
        return value


def check_namespace(entry_point: str, candidate: EntryPoint) -> dict[str, Any]:
    """Globals for the task's helper and check code: the real builtins and the entry point, nothing else.

    Why: a name the check does not define must never resolve to candidate code (a candidate's ``range``,
    ``len`` or ``poly`` would let it decide what the check compares). The harness process never runs
    candidate code, so its ``builtins`` module is the interpreter's own; the task's helpers are run here
    from the task's prompt, not taken from the candidate. The entry point's own name is bound too, as the
    reference harness binds it (some checks call it by name), unless it is a builtin's: ``len`` stays ``len``.
    """
    namespace: dict[str, Any] = {"__name__": "__check__", "__builtins__": builtins}
    if entry_point not in builtins.__dict__:
        namespace[entry_point] = candidate
    return namespace


def _run_assert(job: dict[str, Any], suite: dict[str, Any], server: Server, out: SuiteRecords) -> None:
    """Run the task's helpers and ``check(candidate)`` here in the parent; the candidate answers through
    its entry point only."""
    timeout_s = float(suite["timeout_s"])
    entry = str(job["entry_point"])
    try:
        load_error = _load(server, {"op": "load", "code": str(job["code"])}, timeout_s)
        if load_error is not None:
            out.case({"id": "check", **load_error})
            return
        limit = server.limit(timeout_s)
        candidate = EntryPoint(server, entry, limit)
        namespace = check_namespace(entry, candidate)
        try:
            helpers = str(suite.get("helpers", ""))
            if helpers:
                exec(compile(helpers, "helpers.py", "exec", dont_inherit=True), namespace)  # noqa: S102
            exec(compile(str(suite["check"]), "check.py", "exec", dont_inherit=True), namespace)  # noqa: S102
            namespace["check"](candidate)
        except BaseException as exc:
            if limit.limit.reason is not None:
                out.case({**stopped_record("check", limit.limit.reason, limit), "calls": candidate.answered})
            else:
                out.case({"id": "check", "ok": False, "error": _describe_exc(exc), "calls": candidate.answered})
            return
        if candidate.answered == 0:
            out.case({"id": "check", "ok": False, "error": "check never called the candidate"})
        elif not server.alive:
            out.case({"id": "check", "ok": False, "error": "candidate process died"})
        else:
            out.case({"id": "check", "ok": True, "calls": candidate.answered, **limit.limit.figures()})
    finally:
        server.kill()


def _run_io(job: Job, suite: dict[str, Any], out: SuiteRecords, capture: Capture) -> None:
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
    _write_all(mem, stdin)
    os.lseek(mem, 0, os.SEEK_SET)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            os.close(out_r)
            os.close(err_r)
            _child_common(secrets, mem, out_w, err_w)
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
    status = 0
    try:
        sys.argv = ["solution.py"]
        _site_exit_builtins()
        _load_module(code, "__main__")
    except SystemExit as exc:
        if exc.code is None:
            status = 0
        elif type(exc.code) is int:
            status = int(exc.code) & 0xFF
        else:
            status = 1
    except BaseException:
        import traceback

        traceback.print_exc()
        status = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        status = status or 1
    return status


def _exec_command(argv: list[str], ws: Workspace) -> int:
    """Become a workspace task's command (an io case, or its public command suite) in the workspace, with the
    environment ``Workspace`` made; 127 when it cannot be run."""
    try:
        os.chdir(ws.dir)
        os.execvpe(argv[0], argv, ws.env)  # noqa: S606 - the task's command, in the sandbox
    except OSError as exc:
        why = f"cannot run {argv[0][:200]}: {exc.strerror}\n".encode()
        _quietly(lambda: os.write(2, why))
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
        chunk = _read(fd, 1 << 16)
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
        _kill_group(pid)
        return None, signal.SIGKILL
    _, status = os.waitpid(pid, 0)
    _quietly(lambda: os.killpg(pid, signal.SIGKILL))  # daemonized leftovers in its group
    if os.WIFSIGNALED(status):
        return None, os.WTERMSIG(status)
    return os.WEXITSTATUS(status), None


def _segments(buf: bytearray) -> list[tuple[int, int]]:
    """(start, end) of each newline-separated JSON segment after the nonce."""
    spans = []
    pos = NONCE_LEN
    while pos < len(buf):
        nl = buf.find(b"\n", pos)
        end = len(buf) if nl < 0 else nl
        if end > pos:
            spans.append((pos, end))
        pos = end + 1
    return spans


def _parse_segment(buf: bytearray, span: tuple[int, int]) -> dict[str, Any]:
    obj = strict_loads(bytes(memoryview(buf)[span[0] : span[1]]))
    if not isinstance(obj, dict):
        raise HarnessError("job segment is not an object")
    return obj


def _case_ids(suite: dict[str, Any], seen_assert: bool, workspace: bool = False) -> list[str]:
    """The case ids of a suite segment, once its shape is checked.

    A malformed segment is the job's fault (a ``harness_error``: infrastructure), so it is found here,
    before the suite runs; whatever goes wrong after this is the candidate's doing and fails its cases.
    """
    kind = suite.get("kind")
    if type(suite.get("timeout_s")) not in (int, float):
        raise HarnessError("suite without a timeout")
    if workspace and (kind == "assert" or (kind == "io") != ("command" in suite)):
        raise HarnessError("a workspace job runs call suites and io suites with a command only")
    if kind == "assert":
        if type(suite.get("check")) is not str or type(suite.get("helpers", "")) is not str:
            raise HarnessError("assert suite without check code")
        return ["check"]
    if kind not in ("call", "io") or seen_assert:
        raise HarnessError(f"kind {kind!r} not allowed here")
    cases = suite.get("cases")
    if type(cases) is not list:
        raise HarnessError("suite without cases")
    ids: list[str] = []
    for case in cases:
        if type(case) is not dict or type(case.get("id")) is not str:
            raise HarnessError("case without an id")
        if kind == "call" and not (type(case.get("args", [])) is list and type(case.get("kwargs", {})) is dict):
            raise HarnessError("call case without args")
        if kind == "io" and type(case.get("stdin", "")) is not str:
            raise HarnessError("io case without stdin")
        ids.append(case["id"])
    command = suite.get("command")
    if (
        kind == "io"
        and command is not None
        and not (type(command) is list and command and all(type(a) is str and a and "\0" not in a for a in command))
    ):
        raise HarnessError("io suite with a malformed command")
    return ids


def _safe_sys_path() -> None:
    """Drop the work dir and every writable directory from ``sys.path``: check code run here must never
    import a module a candidate planted (``python3 -I`` already omits the script dir; this is the backstop)."""
    cwd = os.getcwd()
    sys.path[:] = [
        p for p in sys.path if p and os.path.abspath(p) != cwd and not (os.path.isdir(p) and os.access(p, os.W_OK))
    ]
    importlib_invalidate = getattr(sys, "path_importer_cache", None)
    if isinstance(importlib_invalidate, dict):
        importlib_invalidate.clear()


def _workspace_of(job: dict[str, Any]) -> Workspace | None:
    """Where the job's commands run: a restored workspace, a built program's work dir, or none."""
    if "workspace" in job:
        return Workspace.prepare(job["workspace"])
    if "program" in job:
        return Workspace.program(job["program"])
    return None


def main(argv: list[str]) -> int:
    """Run one job: a header segment, then one segment per suite (call/io first, assert suites last).

    Each assert suite gets a server child forked before ANY segment is parsed; once an assert segment has
    been parsed the parent never forks again, so no candidate process ever holds check code.
    Exit status is irrelevant to the verdict: only framed records count.
    """
    hardened = prctl_ok(PR_SET_DUMPABLE, 0) and become_subreaper()
    _safe_sys_path()
    size = int(argv[1])
    n_assert = int(argv[2])
    buf = bytearray(size)
    got = read_exact_into(0, buf)
    nonce = bytearray(NONCE_LEN)
    nonce[:] = memoryview(buf)[:NONCE_LEN]
    buf[:NONCE_LEN] = bytes(NONCE_LEN)
    secrets = (nonce, buf)
    # Nothing is written before this point: the hello record proves the harness started (no candidate ran).
    out = Emitter(nonce, MAX_MESSAGE_BYTES)
    out.emit({"hello": True, "hardened": hardened, "stdin_ok": got == size})
    if got != size:
        out.emit({"harness_error": "short stdin"})
        return 2
    capture = Capture(OUTPUT_CAP)
    servers = [Server.spawn(secrets, capture) for _ in range(n_assert)]
    shared = CallServer(capture)
    try:
        spans = _segments(buf)
        job = _parse_segment(buf, spans[0])
        if type(job.get("code")) is not str or type(job.get("entry_point")) is not str:
            raise HarnessError("header without code or entry point")
        ws = _workspace_of(job)
        seen_assert = False
        for sid, span in enumerate(spans[1:]):
            suite = _parse_segment(buf, span)
            records = SuiteRecords(out, sid, _case_ids(suite, seen_assert, ws is not None))
            if suite["kind"] == "assert" and not servers:
                raise HarnessError("more assert suites than announced")
            try:
                if suite["kind"] == "assert":
                    seen_assert = True
                    shared.kill()
                    _run_assert(job, suite, servers.pop(0), records)
                elif suite["kind"] == "call":
                    _run_call(Job(job, ws, secrets), suite, records, shared)
                else:
                    _run_io(Job(job, ws, secrets), suite, records, capture)
            except Exception as exc:  # the job was valid: what broke the suite came from the candidate
                shared.kill()  # its server may hold a reply nobody read
                records.fail_rest(f"the candidate broke the run: {_type_name(exc)}")
            out.emit({"suite": sid, "suite_done": True})
    except (HarnessError, ValueError, KeyError, TypeError, IndexError, RecursionError) as exc:
        out.emit({"harness_error": f"bad job: {type(exc).__name__}: {exc}"})
        return 2
    finally:
        shared.kill()
        for server in servers:
            server.kill()
        capture.emit(out)
    out.emit({"done": True})
    return 0


def _entry() -> NoReturn:
    code = 2
    try:
        code = main(sys.argv)
    finally:
        os._exit(code)


if __name__ == "__main__":
    _entry()
