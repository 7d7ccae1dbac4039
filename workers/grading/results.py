"""What a grading run reports: the sandbox's word on the run, the candidate's own output, the compile step
of a program in a compiled language, the suites' outcomes and a generation's grade (signals, no reward).

Why apart from the grader: these are the values the roles, the CLI and the episode worker read; the grader
(``workers.grading.grader``) is what makes them, and re-exports them for its importers.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field
from typing import Any

from guest.framing import frame_prefix
from schemas.status import CompileStatus, RunStatus
from schemas.text import sanitize_text
from workers.grading.static_analysis import Flag
from workers.grading.suites import SuiteOutcome
from workers.languages.source import Build
from workers.sandbox.api import SandboxResult, SandboxStatus

#: How an ``output`` record starts after its frame (the harness writes it with this key first).
OUTPUT_RECORD = b'{"output":'
#: Compiler output a grade's JSON keeps per stream (its end: the errors come last).
COMPILE_OUTPUT_TAIL_CHARS = 4096


@dataclass(frozen=True, slots=True)
class RunInfo:
    """What a grade says about its (last) sandbox run, for SREs, the result events and the result file.

    ``measured`` is the run as the sandbox measured it, without its output (the candidate's is the grade's
    ``CandidateOutput``, the rest was the harness's); what the grade adds is its own: ``status`` (the
    sandbox's, or why nothing ran: a failed build, ``unsupported_language``), the attempts it took, the
    ``error`` it reports, whether the harness ran hardened and how often the host starved the run.
    ``to_json`` is the result file's ``run`` (``rewardstream grade --json``); the result events' is
    ``workers.roles.runs.sandbox_run``.
    """

    measured: SandboxResult
    status: RunStatus
    attempts: int
    error: str | None = None
    hardened: bool | None = None
    #: How many times the run was repeated because the host starved it (never the candidate's doing).
    host_retries: int = 0

    def to_json(self) -> dict[str, object]:
        run = self.measured
        return {
            "status": self.status,
            "exit_code": run.exit_code,
            "signal": run.signal,
            "wall_ms": round(run.wall_ms, 3),
            "cpu_ms": round(run.cpu_ms, 3),
            "max_rss_kb": run.max_rss_kb,
            "backend": run.backend,
            "attempts": self.attempts,
            "error": self.error,
            "hardened": self.hardened,
            "wait_ms": round(run.wait_ms, 3),
            "host_retries": self.host_retries,
        }


def nothing_measured(backend: str) -> SandboxResult:
    """What a grade shows as measured when no sandbox run happened: zeros (its ``RunInfo.status`` says why)."""
    return SandboxResult(
        status=SandboxStatus.OK, exit_code=None, signal=None, stdout=b"", stderr=b"", stdout_truncated=False,
        stderr_truncated=False, wall_ms=0.0, cpu_ms=0.0, max_rss_kb=0, backend=backend,
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class CandidateOutput:
    """What the candidate's processes wrote to stdout and stderr in one run, never the harness protocol.

    ``stdout``/``stderr`` are the last bytes kept (the harness keeps ``harness.OUTPUT_CAP`` of each), as
    written; ``*_bytes`` how many were written in all. ``reported`` is False when the run ended before the
    harness reported the output (killed, infrastructure failure): then nothing is known about it.
    """

    stdout: bytes = b""
    stderr: bytes = b""
    stdout_bytes: int = 0
    stderr_bytes: int = 0
    reported: bool = True

    @property
    def stdout_truncated(self) -> bool:
        """Fewer bytes kept than written (or not reported at all)."""
        return not self.reported or self.stdout_bytes > len(self.stdout)

    @property
    def stderr_truncated(self) -> bool:
        """Fewer bytes kept than written (or not reported at all)."""
        return not self.reported or self.stderr_bytes > len(self.stderr)


def split_output(stdout: bytes, nonce: bytes, *, reported: bool = True) -> tuple[bytes, CandidateOutput]:
    """Take the harness's ``output`` records out of a run's stdout: (the rest, the candidate's output).

    Only lines framed with this run's nonce count (candidate code cannot write them). The harness writes no
    record for a stream nothing was written to, so ``reported`` (the harness got to its ``done`` record, or
    never started: see ``parse_records``) says whether a missing record means "nothing" or "unknown". A
    malformed output record is left in place, for ``parse_records`` to report (or to ignore as the cut last
    line of truncated output).
    """
    prefix = frame_prefix(nonce)
    head = prefix + OUTPUT_RECORD
    if head not in stdout:
        return stdout, CandidateOutput(reported=reported)
    rest: list[bytes] = []
    found: dict[str, tuple[bytes, int]] = {}
    for line in stdout.split(b"\n"):
        if line.startswith(head):
            try:
                rec = json.loads(line[len(prefix) :])
                name, data, total = rec["output"], rec["b64"], rec["bytes"]
                if name in ("stdout", "stderr") and name not in found and type(total) is int:
                    found[name] = (base64.b64decode(data, validate=True), total)
                    continue
            except (ValueError, TypeError, KeyError, RecursionError, binascii.Error):
                pass
        rest.append(line)
    (out, out_n), (err, err_n) = found.get("stdout", (b"", 0)), found.get("stderr", (b"", 0))
    return b"\n".join(rest), CandidateOutput(out, err, out_n, err_n, reported)


@dataclass(frozen=True, slots=True)
class CompileInfo:
    """A compile step as a grade reports it: its outcome, why it failed, and what the compiler printed (the
    feedback a model may read of its own failed build; the compiler never sees a test)."""

    status: CompileStatus
    reason: str | None
    output: CandidateOutput
    wall_ms: float
    cpu_ms: float
    max_rss_kb: int
    #: How long the compile waited for a CPU the host gave to others (its limit never counted it).
    wait_ms: float = 0.0

    @classmethod
    def of(cls, build: Build) -> CompileInfo | None:
        """The compile of ``build`` (None when its language is not compiled)."""
        stage = build.stage
        if stage is None:
            return None
        written = (
            len(stage.stdout) if stage.stdout_bytes is None else stage.stdout_bytes,
            len(stage.stderr) if stage.stderr_bytes is None else stage.stderr_bytes,
        )
        output = CandidateOutput(stage.stdout, stage.stderr, *written)
        return cls(build.status, build.reason, output, stage.wall_ms, stage.cpu_ms, stage.max_rss_kb, stage.wait_ms)

    def to_json(self) -> dict[str, object]:
        return {
            "status": self.status,
            "reason": self.reason,
            "stdout": sanitize_text(self.output.stdout.decode("utf-8", "replace"))[-COMPILE_OUTPUT_TAIL_CHARS:],
            "stderr": sanitize_text(self.output.stderr.decode("utf-8", "replace"))[-COMPILE_OUTPUT_TAIL_CHARS:],
            "wall_ms": round(self.wall_ms, 3),
            "cpu_ms": round(self.cpu_ms, 3),
            "max_rss_kb": self.max_rss_kb,
            "wait_ms": round(self.wait_ms, 3),
        }


@dataclass(frozen=True, slots=True)
class SuitesRun:
    """Outcome of running several suites in one sandbox run. ``infra_error`` set means no verdict.

    ``output`` is what the candidate printed during the run (all its suites): show it to whoever may see
    every suite of the run (a public run's output may reach the policy; a hidden run's must not).
    """

    outcomes: tuple[SuiteOutcome, ...]
    run: RunInfo
    infra_error: str | None
    protocol_error: str | None
    output: CandidateOutput = CandidateOutput()
    compile: CompileInfo | None = None


@dataclass(frozen=True, slots=True)
class GradeResult:
    """One graded generation's signals, no reward: the CLI layer applies the pipeline's policy to them.

    ``infra_error`` is set when the run gave no verdict (``status == "sandbox_error"``); ``notes`` are the
    grader's other remarks (a violated harness protocol, an unhardened harness) for the result's reasons.
    """

    generation_id: str
    task_id: str
    status: str  # "pass" | "fail" | "sandbox_error"
    public: SuiteOutcome | None
    hidden: SuiteOutcome
    static_flags: tuple[Flag, ...]
    run: RunInfo
    infra_error: str | None = None
    notes: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)
    language: str = "python"
    compile: CompileInfo | None = None
