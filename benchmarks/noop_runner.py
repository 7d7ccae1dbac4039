"""BENCHMARK ONLY: no-op runners that grade nothing and run nothing, to measure the control plane's ceilings.

Why: issue 27 asks how far one worker loop, one episode worker and one reward processor go with grading
taken out, so that what is measured is Kafka, the loop, the handlers and the codec, never a sandbox. These
stand in for the grader and the sandbox inside a benchmark's own process only: they live in ``benchmarks/``
(no installed package imports it, and no setting names them: ``tests/unit/benchmarks/test_noop_runner.py``
checks both), so a production worker cannot be configured to use them.

* ``NoopGrader``: every case of every suite passed, no sandbox run (the executor's and the verifier's results
  are built, encoded and committed as usual).
* ``NoopStepSandbox``: answers a step's run as the in-sandbox step runner does for a command that exited 0
  and left the workspace unchanged (the episode worker reads its frames as usual), without running anything.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace

from schemas.tasks import Limits
from workers.grading import Grader
from workers.grading.grader import CandidateOutput, RunInfo, SuitesRun
from workers.grading.suites import AnySuite, CaseOutcome, SuiteOutcome, WorkspaceJob, graded_ids
from workers.sandbox.api import SandboxResult, SandboxSpec, SandboxStatus
from workers.sandbox.guest.framing import NONCE_LEN, STEP_MAGIC, frame_prefix

#: The backend name the no-op runners report: a result made by them says so wherever it is read.
NOOP_BACKEND = "noop-benchmark-only"


def _nothing_run() -> SandboxResult:
    return SandboxResult(
        status=SandboxStatus.OK, exit_code=0, signal=None, stdout=b"", stderr=b"", stdout_truncated=False,
        stderr_truncated=False, wall_ms=0.0, cpu_ms=0.0, max_rss_kb=0, backend=NOOP_BACKEND,
    )  # fmt: skip


class NoopStepSandbox:
    """BENCHMARK ONLY. A sandbox that runs nothing: each run is answered with the step runner's frames of an
    ``exec`` that exited 0, printed nothing and left the workspace unchanged. Any other spec is an error."""

    name = NOOP_BACKEND

    def __init__(self) -> None:
        self.runs = 0

    def run(self, spec: SandboxSpec) -> SandboxResult:
        """The frames ``workers.episodes.step.parse_frames`` reads, framed with the nonce the job carries."""
        self.runs += 1
        try:
            pyc_len, source_len, _job_len = (int(n) for n in spec.argv[-3:])
        except ValueError as exc:
            raise ValueError(f"the no-op step sandbox runs only a step's spec, not {spec.argv[:3]}") from exc
        start = pyc_len + source_len
        nonce = spec.stdin[start : start + NONCE_LEN]
        prefix = frame_prefix(nonce, STEP_MAGIC)
        result = {"exit_code": 0, "signal": None, "stdout": "", "stderr": "", "stdout_bytes": 0,
                  "stderr_bytes": 0, "timed_out": False}  # fmt: skip
        records = ({"hello": True}, {"result": result, "workspace": {"packed": True, "unchanged": True},
                                     "tar_bytes": 0}, {"done": True})  # fmt: skip
        stdout = b"".join(prefix + json.dumps(r).encode() + b"\n" for r in records)
        return replace(_nothing_run(), stdout=stdout)

    def close(self) -> None:
        pass


class NoopGrader(Grader):
    """BENCHMARK ONLY. A grader that runs nothing: every case of every suite passed, no output, no sandbox."""

    def __init__(self) -> None:
        super().__init__(NoopStepSandbox())

    def run_suites(
        self,
        code: str,
        entry_point: str | None,
        suites: Sequence[tuple[str, AnySuite]],
        limits: Limits,
        *,
        prompt: str = "",
        workspace: WorkspaceJob | None = None,
        language: str = "python",
    ) -> SuitesRun:
        outcomes = tuple(
            SuiteOutcome(label, suite.kind, tuple(CaseOutcome(cid, "passed") for cid in graded_ids(suite)))
            for label, suite in suites
        )
        return SuitesRun(outcomes, RunInfo(_nothing_run(), SandboxStatus.OK, 1), None, None, CandidateOutput())
