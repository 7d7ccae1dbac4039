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

Usage: run by the one loader (``workers.sandbox.guest_program``) with ``NBYTES N_ASSERT``, and NBYTES of stdin
after the program: a 32-byte nonce, then newline-separated
JSON segments (a header ``{"code", "entry_point"}``, then one per suite); N_ASSERT = number of assert suites.
A ``harness_error`` record (infrastructure: the job was malformed) is only ever written for the job's own
shape, checked before the suite it concerns runs.
Standard library only: it runs on the sandbox image's interpreter.
"""

from __future__ import annotations

import os
import sys

from workers.sandbox.guest.call_suites import CallServer, Job, run_assert_suite, run_call_suite
from workers.sandbox.guest.candidate_server import Server
from workers.sandbox.guest.child_pipes import MAX_MESSAGE_BYTES, Capture
from workers.sandbox.guest.framing import NONCE_LEN
from workers.sandbox.guest.harness_records import Emitter, SuiteRecords
from workers.sandbox.guest.harness_workspace import Workspace
from workers.sandbox.guest.io_suite import run_io_suite
from workers.sandbox.guest.plumbing import PR_SET_DUMPABLE, become_subreaper, prctl_ok, read_exact_into, run_and_exit
from workers.sandbox.guest.typed_values import HarnessError, strict_loads, type_name

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs start-up time
if TYPE_CHECKING:  # the harness imports nothing it does not need at run time (start-up cost)
    from typing import Any

#: Bytes of the candidate's stdout, and of its stderr, kept (the tail) and reported in ``output`` records.
OUTPUT_CAP = 1 << 20


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
                    run_assert_suite(job, suite, servers.pop(0), records)
                elif suite["kind"] == "call":
                    run_call_suite(Job(job, ws, secrets), suite, records, shared)
                else:
                    run_io_suite(Job(job, ws, secrets), suite, records, capture)
            except Exception as exc:  # the job was valid: what broke the suite came from the candidate
                shared.kill()  # its server may hold a reply nobody read
                records.fail_rest(f"the candidate broke the run: {type_name(exc)}")
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


if __name__ == "__main__":
    run_and_exit(main)
