"""Turn test suites into ONE sandbox run of the harness, and the run's framed records back into verdicts.

Why here and not in the harness: expected values never enter the sandbox. The job sent in carries only
inputs (call args, io stdin) or assert check code (with the task's own helpers); the records that come back
carry typed JSON values (``compare``'s format: tuples and sets keep their type) or stdout, which are compared
here, outside, by ``compare``.

A pass needs positive proof: every case id must have exactly one well-formed record; a missing, duplicate
or unparsable record is a failure. Records are only accepted on lines framed with this run's random nonce.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NoReturn, Protocol

from schemas.caps import STDERR_TAIL_BYTES, fit
from schemas.events import CaseResult, CaseStatus, SandboxRun, SuiteKind
from schemas.tasks import AssertSuite, CallSuite, Command, CommandSuite, IoSuite
from schemas.text import sanitize_json
from workers.grading.compare import compare_stdout, compare_values
from workers.sandbox.api import SandboxResult, SandboxSpec
from workers.sandbox.guest.clock import CONTENTION
from workers.sandbox.guest.framing import NONCE_LEN, frame_prefix
from workers.sandbox.guest_program import DEFAULT_PYTHON, GuestProgram, guest_program

HARNESS_FILE = "harness.py"
HARNESS_OUTPUT_BYTES = 8 * 1024 * 1024
AnySuite = CallSuite | IoSuite | AssertSuite | CommandSuite
#: The one case a command suite (a workspace task's public command) reports: the command's run.
COMMAND_CASE_ID = "command"
#: Names in the work dir of a workspace job (the workspace itself is restored under ``ws/``).
WORKSPACE_FILES = {"tar": "ws.tar", "dir": "ws", "pycache": ".rs-pycache", "site": ".rs-site"}
#: The environment of a workspace task's commands (besides PYTHONPATH and PYTHONPYCACHEPREFIX, which the
#: harness points at its own dirs outside the workspace): ``-P`` for every python, no user site, no home in
#: the workspace, no bytecode written, no pytest plugin the workspace could register, no pytest cache.
WORKSPACE_ENV = {
    "HOME": "/tmp",  # noqa: S108 - the sandbox's private /tmp
    "PYTHONSAFEPATH": "1",
    "PYTHONNOUSERSITE": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
    "PYTEST_ADDOPTS": "-p no:cacheprovider",
}


class CallInput(Protocol):
    """What ``run_call_cases`` needs of a case: an id and the arguments (``CallCase`` fits)."""

    @property
    def id(self) -> str | None: ...

    @property
    def args(self) -> list[Any]: ...

    @property
    def kwargs(self) -> dict[str, Any]: ...


@dataclass(frozen=True, slots=True)
class CallArgs:
    """A call case without an expected value (for computing expected values from a reference solution)."""

    id: str | None
    args: list[Any] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CaseValue:
    """The plain-JSON return value of one call, or why there is none."""

    ok: bool
    value: Any = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class CaseOutcome:
    """Verdict of one case. ``message`` is feedback (never includes expected values)."""

    id: str
    status: CaseStatus
    message: str | None = None

    def to_json(self, *, with_message: bool = True) -> dict[str, object]:
        """Plain JSON; hidden cases are written without messages (they might echo hidden inputs)."""
        out: dict[str, object] = {"case_id": self.id, "status": self.status}
        if with_message and self.message:
            out["message"] = fit(CaseResult, "message", self.message)
        return out


@dataclass(frozen=True, slots=True)
class SuiteOutcome:
    """Verdicts of every case of one suite."""

    label: str
    kind: str
    cases: tuple[CaseOutcome, ...]

    @property
    def passed(self) -> int:
        return sum(1 for c in self.cases if c.status == "passed")

    @property
    def total(self) -> int:
        return len(self.cases)

    @property
    def all_passed(self) -> bool:
        """Positive proof for every case; an empty suite proves nothing."""
        return self.total > 0 and self.passed == self.total


@dataclass(frozen=True, slots=True)
class WorkspaceJob:
    """A graded workspace as a grading run takes it: the canonical tar (restored inside the sandbox by the
    step runner's ``restore``, spliced into the harness: one restore for steps and grading), and what it holds."""

    tar: bytes
    bytes: int
    entries: int

    def workdir(self) -> tuple[int, int]:
        """(``workdir_size_mb``, ``workdir_inodes``) for the tar, the restored files and the harness."""
        need = 2 * len(self.tar) + self.entries * 4096 + (8 << 20)
        return -(-need // (1 << 20)), self.entries + 64


@dataclass(frozen=True, slots=True)
class ProgramJob:
    """A program in another language as a grading run takes it, built once (``workers.languages``) for every
    run of it: the work dir's files (its source, its compile's artifacts), the files to make executable, the
    argv each io case runs, its toolchain family and the language's environment."""

    files: Mapping[str, bytes]
    executables: tuple[str, ...]
    argv: tuple[str, ...]
    toolchain: str
    env: Mapping[str, str] = field(default_factory=dict)

    def workdir_mb(self) -> int:
        """A work dir with room for the files twice over (a program may copy its binary) and 16 MiB more."""
        need = 2 * sum(len(data) for data in self.files.values()) + (16 << 20)
        return -(-need // (1 << 20))


def argv_of(command: Command) -> list[str]:
    """A task's command as argv: a string runs under ``/bin/sh -c``."""
    return ["/bin/sh", "-c", command] if isinstance(command, str) else list(command)


@dataclass(frozen=True, slots=True)
class JobSuite:
    """One suite as sent into the sandbox: inputs only."""

    kind: SuiteKind
    payload: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Records:
    """What the harness reported, parsed from stdout. ``cases[suite_index][case_id]`` lists records."""

    hello: dict[str, Any] | None
    done: bool
    harness_error: str | None
    protocol_error: str | None
    cases: dict[int, dict[str, list[dict[str, Any]]]]
    suites_done: frozenset[int]

    def starved(self) -> str | None:
        """The harness's own word that the host starved a case past its ceiling (``"contention": true``), or
        None. Only the harness writes framed records: a candidate cannot claim it."""
        for by_id in self.cases.values():
            for found in by_id.values():
                for rec in found:
                    if rec.get("contention") is True and rec["ok"] is False:
                        return f"case {rec['id']}: {rec.get('error')}"
        return None


def harness_program() -> GuestProgram:
    """The grading harness as shipped (``guest_program``: spliced and compiled once)."""
    return guest_program(HARNESS_FILE)


def job_suite(suite: AnySuite, timeout_s: float, *, max_stdout_bytes: int = 1 << 20, helpers: str = "") -> JobSuite:
    """The sandbox-side form of ``suite``: built field by field so expected values cannot slip in.

    ``helpers`` is the task's own helper code (``helpers.prompt_helpers``), run before an assert suite's
    check code so the check never needs a name from the candidate.
    """
    if isinstance(suite, CallSuite):
        cases = [
            {"id": cid, "args": c.args, "kwargs": c.kwargs}
            for cid, c in zip(suite.case_ids(), suite.cases, strict=True)
        ]
        return JobSuite("call", {"kind": "call", "timeout_s": timeout_s, "cases": cases})
    if isinstance(suite, IoSuite):
        cases = [{"id": cid, "stdin": c.stdin} for cid, c in zip(suite.case_ids(), suite.cases, strict=True)]
        payload = {"kind": "io", "timeout_s": timeout_s, "max_stdout_bytes": max_stdout_bytes, "cases": cases}
        if suite.command is not None:
            payload["command"] = argv_of(suite.command)
        return JobSuite("io", payload)
    if isinstance(suite, CommandSuite):  # one io case without stdin: its exit status and output are the feedback
        cases = [{"id": COMMAND_CASE_ID, "stdin": ""}]
        payload = {"kind": "io", "timeout_s": timeout_s, "max_stdout_bytes": max_stdout_bytes, "cases": cases,
                   "command": argv_of(suite.command)}  # fmt: skip
        return JobSuite("io", payload)
    return JobSuite("assert", {"kind": "assert", "timeout_s": timeout_s, "check": suite.code, "helpers": helpers})


def call_job_suite(cases: Sequence[CallInput], timeout_s: float) -> JobSuite:
    """A call suite from bare inputs (no expected values at all)."""
    payload = [
        {"id": c.id if c.id is not None else str(i), "args": list(c.args), "kwargs": dict(c.kwargs)}
        for i, c in enumerate(cases)
    ]
    return JobSuite("call", {"kind": "call", "timeout_s": timeout_s, "cases": payload})


def order_for_harness(suites: Sequence[JobSuite]) -> list[int]:
    """Indices of ``suites`` in run order: call/io first, assert last (the harness forks no candidate
    process after it has parsed any check code)."""
    return sorted(range(len(suites)), key=lambda i: suites[i].kind == "assert")


def build_spec(
    *,
    code: str,
    entry_point: str | None,
    suites: Sequence[JobSuite],
    memory_mb: int,
    startup_grace_s: float,
    harness: GuestProgram,
    nonce: bytes,
    python_argv: Sequence[str] = DEFAULT_PYTHON,
    pids_limit: int = 64,
    workspace: WorkspaceJob | None = None,
    program: ProgramJob | None = None,
) -> SandboxSpec:
    """One sandbox run for all ``suites`` (in the given order). The nonce is the first 32 bytes of the harness's
    input (its stdin after the program: ``guest_program``).

    With ``workspace`` the candidate is that workspace (``code`` is empty): its tar and restorer go into the
    work dir as files and the header tells the harness where (``WORKSPACE_FILES``), with the environment of
    its commands; the work dir is sized for it, and the timeout has the start-up grace once more for the
    restore.

    With ``program`` the candidate is a built program in another language (``code`` is empty): its files go
    into the work dir, the header tells the harness which to make executable, and the run gets the program's
    toolchain family and environment (the io suites carry its argv as their ``command``).
    """
    header: dict[str, object] = {"code": code, "entry_point": entry_point or ""}
    files: dict[str, bytes] = {}
    if program is not None:
        header["program"] = {"executables": list(program.executables)}
        files = dict(program.files)
    timeout = sum(suite_budget_s(s) for s in suites) + startup_grace_s
    if workspace is not None:
        header["workspace"] = {**WORKSPACE_FILES, "env": WORKSPACE_ENV}
        files[WORKSPACE_FILES["tar"]] = workspace.tar
        timeout += startup_grace_s
    segments = [json.dumps(header, allow_nan=False)] + [json.dumps(s.payload, allow_nan=False) for s in suites]
    stdin = nonce + b"\n" + "\n".join(segments).encode()
    n_assert = sum(1 for s in suites if s.kind == "assert")
    spec = SandboxSpec(
        argv=harness.argv(python_argv, str(len(stdin)), str(n_assert)),
        files=files,
        stdin=harness.stdin(stdin),
        timeout_s=timeout,
        memory_mb=memory_mb,
        pids_limit=pids_limit,
        output_limit_bytes=HARNESS_OUTPUT_BYTES + (256 << 10),
    )
    if program is not None:
        workdir = max(spec.workdir_size_mb, program.workdir_mb())
        return replace(spec, toolchain=program.toolchain, env=dict(program.env), workdir_size_mb=workdir)
    if workspace is None:
        return spec
    size_mb, inodes = workspace.workdir()
    return replace(
        spec, workdir_size_mb=max(size_mb, spec.workdir_size_mb), workdir_inodes=max(inodes, spec.workdir_inodes)
    )


def suite_budget_s(suite: JobSuite) -> float:
    """The most time a suite can take in the harness: its limit per case (``timeout_s``), and as much again for
    each load of the candidate's module a call or assert case may need (a server that timed out is replaced)."""
    limit = float(suite.payload["timeout_s"])
    if suite.kind == "assert":
        return 2 * limit  # the load, then the check
    cases = len(suite.payload["cases"])
    return (2 if suite.kind == "call" else 1) * cases * limit


def new_nonce() -> bytes:
    """32 random hex bytes, fresh for every run."""
    return secrets.token_hex(NONCE_LEN // 2).encode()


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"non-finite number {name}")


def parse_records(stdout: bytes, nonce: bytes, *, truncated: bool = False) -> Records:
    """Records framed with ``nonce``; lines without the exact frame are ignored (they are not ours).

    A framed line that does not parse is a protocol error, except a cut-off last line of truncated output.
    This is where the candidate's text (its error messages, its stdout) enters our data: ``_clean_record``
    makes each record safe to store, once, for every path that writes it later.
    """
    prefix = frame_prefix(nonce)
    hello: dict[str, Any] | None = None
    done = False
    harness_error: str | None = None
    protocol_error: str | None = None
    cases: dict[int, dict[str, list[dict[str, Any]]]] = {}
    suites_done: set[int] = set()
    lines = stdout.split(b"\n")
    for n, line in enumerate(lines):
        if not line.startswith(prefix):
            continue
        try:
            rec = json.loads(line[len(prefix) :], parse_constant=_reject_constant)
        except (ValueError, RecursionError):
            if not (truncated and n == len(lines) - 1):
                protocol_error = protocol_error or f"unparsable record on line {n + 1}"
            continue
        if not isinstance(rec, dict):
            protocol_error = protocol_error or f"record on line {n + 1} is not an object"
            continue
        rec = _clean_record(rec, line)
        if rec.get("hello") is True:
            if hello is not None:
                protocol_error = protocol_error or "two hello records"
            hello = rec
        elif rec.get("done") is True:
            done = True
        elif "harness_error" in rec:
            harness_error = harness_error or fit(SandboxRun, "error", str(rec["harness_error"]))
        elif rec.get("suite_done") is True and type(rec.get("suite")) is int:
            suites_done.add(rec["suite"])
        elif type(rec.get("suite")) is int and type(rec.get("id")) is str and type(rec.get("ok")) is bool:
            cases.setdefault(rec["suite"], {}).setdefault(rec["id"], []).append(rec)
        else:
            protocol_error = protocol_error or f"unknown record on line {n + 1}"
    return Records(hello, done, harness_error, protocol_error, cases, frozenset(suites_done))


#: JSON escapes that can stand for a lone surrogate (raw UTF-8 cannot encode one, so only these can).
_SURROGATE_ESCAPES = (b"\\ud", b"\\uD")


def _clean_record(rec: dict[str, Any], line: bytes) -> dict[str, Any]:
    """``rec`` safe to store: no lone surrogate in any text (repaired with U+FFFD, except in a case's value:
    that case fails, since its value is not valid Unicode), and an ``error`` that is text."""
    if any(escape in line for escape in _SURROGATE_ESCAPES):
        clean: dict[str, Any] = sanitize_json(rec)  # type: ignore[assignment]  # a dict stays a dict
        if "value" in rec and clean["value"] != rec["value"]:
            del clean["value"]
            clean.update(ok=False, error="the value is not valid Unicode (it holds a lone surrogate)")
        rec = clean
    if "error" in rec and type(rec["error"]) is not str:
        rec["error"] = "malformed error"
    return rec


def _single(records: Mapping[str, list[dict[str, Any]]], cid: str) -> dict[str, Any] | CaseOutcome:
    """The one record for ``cid``, or the failing outcome when there is none or more than one."""
    found = records.get(cid, [])
    if not found:
        return CaseOutcome(cid, "missing", "no result for this case")
    if len(found) > 1:
        return CaseOutcome(cid, "error", "more than one result for this case")
    rec = found[0]
    if not rec["ok"]:
        error = str(rec.get("error", "error"))
        return CaseOutcome(cid, "timeout" if error.startswith("timeout") else "error", error)
    return rec


def score_suite(suite: AnySuite, label: str, records: Mapping[str, list[dict[str, Any]]]) -> SuiteOutcome:
    """Compare each case's record with its expected value, here, outside the sandbox."""
    outcomes: list[CaseOutcome] = []
    known = graded_ids(suite)
    if set(records) - set(known):
        reason = "results for unknown case ids (protocol violation)"
        return SuiteOutcome(label, suite.kind, tuple(CaseOutcome(cid, "error", reason) for cid in known))
    if isinstance(suite, CallSuite):
        for cid, case in zip(suite.case_ids(), suite.cases, strict=True):
            rec = _single(records, cid)
            if isinstance(rec, CaseOutcome):
                outcomes.append(rec)
                continue
            if "value" not in rec:
                outcomes.append(CaseOutcome(cid, "error", "result without a value"))
                continue
            why = compare_values(rec["value"], case.expected, suite.atol)
            outcomes.append(CaseOutcome(cid, "passed") if why is None else CaseOutcome(cid, "failed", why))
    elif isinstance(suite, IoSuite):
        for cid, io_case in zip(suite.case_ids(), suite.cases, strict=True):
            rec = _single(records, cid)
            if isinstance(rec, CaseOutcome):
                outcomes.append(rec)
                continue
            stdout = rec.get("stdout")
            if type(stdout) is not str:
                outcomes.append(CaseOutcome(cid, "error", "result without stdout"))
                continue
            why = compare_stdout(stdout, io_case.expected_stdout)
            outcomes.append(CaseOutcome(cid, "passed") if why is None else CaseOutcome(cid, "failed", why))
    elif isinstance(suite, CommandSuite):  # passed = the command exited 0 (feedback: it proves nothing)
        rec = _single(records, COMMAND_CASE_ID)
        outcomes.append(rec if isinstance(rec, CaseOutcome) else CaseOutcome(COMMAND_CASE_ID, "passed"))
    else:
        rec = _single(records, AssertSuite.CASE_ID)
        outcomes.append(rec if isinstance(rec, CaseOutcome) else CaseOutcome(AssertSuite.CASE_ID, "passed"))
    return SuiteOutcome(label, suite.kind, tuple(outcomes))


def failed_suite(suite: AnySuite, label: str, status: CaseStatus, message: str) -> SuiteOutcome:
    """Every case of ``suite`` with the same failing status (the run gave no usable evidence)."""
    return SuiteOutcome(label, suite.kind, tuple(CaseOutcome(cid, status, message) for cid in graded_ids(suite)))


def graded_ids(suite: AnySuite) -> list[str]:
    """The case ids a run of ``suite`` reports: a command suite (no cases of its own) reports its one run."""
    return [COMMAND_CASE_ID] if isinstance(suite, CommandSuite) else suite.case_ids()


def is_contention(result: SandboxResult, records: Records) -> bool:
    """Whether the host starved this run (the backend stopped it, or the harness stopped one of its cases)."""
    starved_run = result.status == "sandbox_error" and (result.error or "").startswith(CONTENTION)
    return starved_run or records.starved() is not None


def infra_problem(result: SandboxResult, records: Records) -> str | None:
    """Why this run says nothing about the candidate (the infrastructure's fault), or None.

    The harness writes its hello record before any candidate code exists, so a run without it never
    reached the candidate; a harness error means the job itself was unusable.
    """
    if result.status == "sandbox_error":
        return f"sandbox error: {result.error or 'unknown'}"
    if records.hello is None:
        tail = result.stderr[-STDERR_TAIL_BYTES:].decode("utf-8", "replace").strip()
        return f"harness did not start (status {result.status.value}, exit {result.exit_code}): {tail}"
    if records.hello.get("stdin_ok") is not True:
        return "harness received a short job"
    if records.harness_error is not None:
        return f"harness error: {records.harness_error}"
    return records.starved()
