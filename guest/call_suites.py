"""The call and assert suites of the grading harness: the candidate's entry point called in a server child.

Why: ``call`` suites share one server child (one fork, one module load per run) and report each reply's value
as typed JSON; ``assert`` suites run the task's helpers and check code HERE, in the parent, with the real
builtins, and the only thing of the candidate's they reach is ``EntryPoint``: plain values in, checked plain
values out. Expected values never enter the sandbox, so a forged value is just a wrong answer.

Guest code (standard library only), spliced into the grading harness (``harness``).
"""

from __future__ import annotations

import builtins
import time

from guest.candidate_server import Server
from guest.child_pipes import describe_exc, short_text
from guest.clock import ProcLimit
from guest.harness_records import SuiteRecords, stopped_record
from guest.typed_values import (
    HarnessError,
    NonPlainError,
    encode_value,
    is_clean_text,
    reply_value,
    tag_plain,
)

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs start-up time
if TYPE_CHECKING:
    from typing import Any

    from guest.child_pipes import Capture
    from guest.harness_workspace import Workspace


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


def run_call_suite(job: Job, suite: dict[str, Any], out: SuiteRecords, shared: CallServer) -> None:
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
    return short_text(error) if is_clean_text(error) else short_text(error.encode("utf-8", "replace").decode("utf-8"))


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


def run_assert_suite(job: dict[str, Any], suite: dict[str, Any], server: Server, out: SuiteRecords) -> None:
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
                out.case({"id": "check", "ok": False, "error": describe_exc(exc), "calls": candidate.answered})
            return
        if candidate.answered == 0:
            out.case({"id": "check", "ok": False, "error": "check never called the candidate"})
        elif not server.alive:
            out.case({"id": "check", "ok": False, "error": "candidate process died"})
        else:
            out.case({"id": "check", "ok": True, "calls": candidate.answered, **limit.limit.figures()})
    finally:
        server.kill()
