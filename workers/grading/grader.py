"""The grader: static analysis + one batched sandbox run of a task's suites + strict comparison.

Why no reward here: the reward is the pipeline's versioned policy (``streams.reward.policy``), applied to
these signals by the CLI layer (``rewardstream.cli.graded``); a second rule in workers could drift from it.

Why one run for public and hidden: a sandbox start dominates the cost of a HumanEval-sized task; the
harness keeps check code out of every candidate process (assert suites get their own process, forked before
any check code is parsed; io cases one process each). Consecutive call suites share one candidate process:
expected values never enter the sandbox, so state carried between suites cannot turn a wrong answer right.
Infrastructure failures (``SandboxStatus.SANDBOX_ERROR``, a harness that never started) are retried with
exponential backoff and end as ``sandbox_error``, never as ``fail``.

The candidate's own stdout/stderr (``CandidateOutput``) comes back in the harness's ``output`` records: the
sandbox's stdout is the harness's protocol channel and is never shown as the candidate's output.

A workspace task is never graded here as a program (``refuse_workspace``); the roles run an episode's graded
workspace through ``run_suites(..., workspace=...)``, the same harness run with the workspace as the candidate.

A program in another language than python is built once (``workers.languages``: a compile step of its own)
and its io suites run the built program in the same harness run; a build that fails is the candidate's
failure (``compile_error``/``compile_timeout``), never ``sandbox_error``. What a run reports (``RunInfo``,
``CandidateOutput``, ``CompileInfo``, ``SuitesRun``, ``GradeResult``) is defined in ``workers.grading.results``
and re-exported here.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from schemas.caps import fit
from schemas.errors import SandboxError, ValidationError
from schemas.events import SandboxRun
from schemas.status import UNSUPPORTED_LANGUAGE
from schemas.tasks import CommandSuite, IoSuite, Limits, PublicTask, Task, suite_languages
from schemas.text import sanitize_text
from workers.grading.helpers import prompt_helpers
from workers.grading.results import (
    OUTPUT_RECORD,
    CandidateOutput,
    CompileInfo,
    GradeResult,
    RunInfo,
    SuitesRun,
    nothing_measured,
    split_output,
)
from workers.grading.static_analysis import analyze
from workers.grading.suites import (
    AnySuite,
    CallInput,
    CaseValue,
    JobSuite,
    ProgramJob,
    Records,
    SuiteOutcome,
    WorkspaceJob,
    build_spec,
    call_job_suite,
    failed_suite,
    harness_program,
    infra_problem,
    is_contention,
    job_suite,
    new_nonce,
    order_for_harness,
    parse_records,
    score_suite,
)
from workers.languages.registry import LanguageSpec, resolve
from workers.languages.source import Build, CompileLimits, compile_program
from workers.retry import SANDBOX_RETRY, RetryPolicy
from workers.sandbox.api import Sandbox, SandboxResult, SandboxStatus
from workers.sandbox.common import error_result
from workers.sandbox.guest_program import DEFAULT_PYTHON

#: What a grading run reports is defined in ``workers.grading.results``; importers take it from here too.
__all__ = [
    "GRADER_VERSION",
    "OUTPUT_RECORD",
    "CandidateOutput",
    "CompileInfo",
    "GradeResult",
    "Grader",
    "GraderConfig",
    "RunInfo",
    "SuitesRun",
    "WorkspaceTaskError",
    "grade",
    "language_refusal",
    "public_suite",
    "refuse_workspace",
    "run_call_cases",
    "split_output",
]

GRADER_VERSION = "grading/1"


class WorkspaceTaskError(ValidationError):
    """A workspace task reached the one-shot grader, which would grade it wrong: it runs one program text,
    while a workspace task's entry point is ``module:function`` in a workspace and its io suites run a command.
    The episode worker grades those."""


def language_refusal(suites: Sequence[tuple[str, AnySuite]], language: str) -> str | None:
    """Why these suites cannot run a solution in ``language`` (call and assert suites call a Python function;
    an io suite may list the languages it takes), or None."""
    for label, suite in suites:
        accepted = suite_languages(suite)
        if accepted is not None and language not in accepted:
            return f"{UNSUPPORTED_LANGUAGE}: the {label} suite takes {', '.join(sorted(accepted))}, not {language}"
    return None


def refuse_workspace(task: PublicTask | Task) -> None:
    """Raise WorkspaceTaskError if ``task`` is a workspace task."""
    if task.workspace is not None:
        raise WorkspaceTaskError(
            f"task {task.task_id} is a workspace task: workspace tasks are graded by the episode worker, "
            "not the one-shot grader"
        )


def public_suite(task: PublicTask | Task) -> AnySuite | None:
    """``task``'s public suite, for the one-shot grader (WorkspaceTaskError for a workspace task)."""
    refuse_workspace(task)
    suite = task.public_tests
    if isinstance(suite, CommandSuite):  # only a workspace task has one: refused above
        raise WorkspaceTaskError(f"task {task.task_id}: a command suite runs in a workspace")
    return suite


@dataclass(frozen=True, slots=True)
class GraderConfig:
    """How the grader drives the sandbox. ``python_argv`` is the interpreter inside the sandbox image."""

    python_argv: tuple[str, ...] = DEFAULT_PYTHON
    attempts: int = SANDBOX_RETRY.attempts
    backoff_s: float = SANDBOX_RETRY.backoff_s
    backoff_max_s: float = SANDBOX_RETRY.backoff_max_s
    #: The first backoff after a run the host starved (``host contention``): the host is busy.
    contention_backoff_s: float = 2.0
    startup_grace_s: float = 5.0
    pids_limit: int = 64
    max_stdout_bytes: int = 1 << 20
    #: The compile step's own limits (a language that compiles: one build per run of a suite).
    compile_limits: CompileLimits = field(default_factory=CompileLimits)

    @property
    def retry(self) -> RetryPolicy:
        """The retry policy of a run's infrastructure failures, with these numbers."""
        return RetryPolicy(self.attempts, self.backoff_s, self.backoff_max_s)


def _error_result(exc: Exception, backend: str) -> SandboxResult:
    """A backend that raised instead of returning is an infrastructure failure like any other."""
    return error_result(backend, fit(SandboxRun, "error", f"{type(exc).__name__}: {exc}"))


@dataclass(frozen=True, slots=True)
class Executed:
    """One suite run after its retries: the last attempt's result and records, how many attempts it took, the
    infrastructure problem left (None: the run is evidence), the candidate's output, and how many attempts
    were repeated because the host starved them."""

    result: SandboxResult
    records: Records
    attempts: int
    problem: str | None
    output: CandidateOutput
    host_retries: int


class Grader:
    """Grades code against tasks with one sandbox backend. Thread-safe: holds no per-call state."""

    def __init__(
        self,
        sandbox: Sandbox,
        config: GraderConfig | None = None,
        *,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.sandbox = sandbox
        self.config = config or GraderConfig()
        self._sleep = sleep
        self._harness = harness_program()

    # ---- running ---------------------------------------------------------------------------------------
    def _execute(
        self,
        code: str,
        entry_point: str | None,
        suites: Sequence[JobSuite],
        limits: Limits,
        workspace: WorkspaceJob | None = None,
        *,
        program: ProgramJob | None = None,
    ) -> Executed:
        """Run once, retrying infrastructure failures with backoff (longer when the host starved the run: it is
        busy, give it time)."""
        cfg = self.config
        retry = cfg.retry
        problem: str | None = None
        result: SandboxResult | None = None
        records: Records | None = None
        output: CandidateOutput | None = None
        attempt = starved = 0
        for attempt in retry.numbers():
            nonce = new_nonce()
            spec = build_spec(
                code=code,
                entry_point=entry_point,
                suites=suites,
                memory_mb=limits.memory_mb,
                startup_grace_s=cfg.startup_grace_s,
                harness=self._harness,
                nonce=nonce,
                python_argv=cfg.python_argv,
                pids_limit=cfg.pids_limit,
                workspace=workspace,
                program=program,
            )
            try:
                result = self.sandbox.run(spec)
            except Exception as exc:
                result = _error_result(exc, getattr(self.sandbox, "name", "?"))
            protocol, output = split_output(result.stdout, nonce)
            records = parse_records(protocol, nonce, truncated=result.stdout_truncated)
            # A harness that never started ran no candidate code; one that did not finish may not have said
            # all the candidate wrote.
            output = replace(output, reported=records.done or records.hello is None)
            problem = infra_problem(result, records)
            if problem is None:
                break
            contention = is_contention(result, records)
            starved += contention
            if attempt == cfg.attempts:
                starved -= contention  # the last attempt was not repeated
            if retry.again(attempt):
                self._sleep(retry.delay(attempt, base_s=cfg.contention_backoff_s if contention else None))
        if result is None or records is None or output is None:  # the loop always runs at least once
            raise SandboxError("grader: no sandbox attempt was made")
        return Executed(result, records, attempt, problem, output, starved)

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
        """Run labelled suites in ONE sandbox run and score every case outside the sandbox.

        ``prompt`` is the task's: assert suites run with the helpers it defines (never the candidate's).
        With ``workspace`` the candidate is an episode's graded workspace (``code`` is empty): call suites
        import ``entry_point``'s ``module:function`` from it, io and command suites run their command in it.
        A ``language`` other than python is built first (one compile step, ``config.compile_limits``) and its
        io suites run the built program; a failed build fails every case with its reason (``compile_error``,
        ``compile_timeout``: the candidate's failure) and the compiler's output as the run's output. Suites
        that do not take ``language`` (call and assert suites are python only) fail every case with
        ``unsupported_language``, and nothing runs.
        """
        if workspace is None and any(_in_workspace(s) for _, s in suites):
            raise WorkspaceTaskError("command suites and io suites with a command run in a workspace")
        spec = resolve(language)
        refused = None if workspace is not None else language_refusal(suites, spec.id)
        if refused is not None:
            return self._refused(refused, suites)
        if spec.id != "python":
            return self._run_program(spec, code, suites, limits)
        helpers = prompt_helpers(prompt, entry_point) if any(s.kind == "assert" for _, s in suites) else ""
        max_stdout = self.config.max_stdout_bytes
        jobs = [job_suite(s, limits.timeout_s, max_stdout_bytes=max_stdout, helpers=helpers) for _, s in suites]
        return self._run_jobs(code, entry_point, suites, jobs, limits, workspace=workspace)

    def _run_jobs(
        self,
        code: str,
        entry_point: str | None,
        suites: Sequence[tuple[str, AnySuite]],
        jobs: list[JobSuite],
        limits: Limits,
        *,
        workspace: WorkspaceJob | None = None,
        program: ProgramJob | None = None,
    ) -> SuitesRun:
        order = order_for_harness(jobs)
        ordered = [jobs[i] for i in order]
        ran = self._execute(code, entry_point, ordered, limits, workspace, program=program)
        result, records, problem, output = ran.result, ran.records, ran.problem, ran.output
        hardened = records.hello.get("hardened") if records.hello else None
        run = RunInfo(
            measured=replace(result, stdout=b"", stderr=b""),  # the candidate's output is ``output``
            status=result.status,
            attempts=ran.attempts,
            error=sanitize_text(problem or result.error or "") or None,  # what the sandbox said, safe to store
            hardened=hardened if isinstance(hardened, bool) else None,
            host_retries=ran.host_retries,
        )
        outcomes: list[SuiteOutcome] = []
        position = {original: ran for ran, original in enumerate(order)}
        for i, (label, suite) in enumerate(suites):
            if problem is not None:
                outcomes.append(failed_suite(suite, label, "error", "sandbox_error"))
            elif records.protocol_error is not None:
                outcomes.append(failed_suite(suite, label, "error", f"protocol: {records.protocol_error}"))
            else:
                outcomes.append(score_suite(suite, label, records.cases.get(position[i], {})))
        return SuitesRun(tuple(outcomes), run, problem, records.protocol_error, output)

    def _run_program(
        self, spec: LanguageSpec, code: str, suites: Sequence[tuple[str, AnySuite]], limits: Limits
    ) -> SuitesRun:
        """Build ``code`` once, then run every io suite against the built program in one harness run."""
        build = compile_program(self.sandbox, spec, code, limits=self.config.compile_limits)
        info = CompileInfo.of(build)
        if not build.ok:
            return self._unbuilt(build, info, suites)
        program = ProgramJob(
            files=build.files, executables=spec.executables, argv=spec.run_argv(limits.memory_mb),
            toolchain=spec.toolchain, env=spec.env,
        )  # fmt: skip
        max_stdout = self.config.max_stdout_bytes
        jobs = [
            JobSuite("io", {**job_suite(s, limits.timeout_s, max_stdout_bytes=max_stdout).payload,
                            "command": list(program.argv)})
            for _, s in suites
        ]  # fmt: skip
        ran = self._run_jobs("", None, suites, jobs, limits, program=program)
        return replace(ran, compile=info)

    def _refused(self, reason: str, suites: Sequence[tuple[str, AnySuite]]) -> SuitesRun:
        """Suites that do not take the solution's language: every case fails with why; nothing ran."""
        backend = getattr(self.sandbox, "name", "?")
        run = RunInfo(nothing_measured(backend), UNSUPPORTED_LANGUAGE, 1, reason)
        outcomes = tuple(failed_suite(s, label, "error", reason) for label, s in suites)
        return SuitesRun(outcomes, run, None, None)

    def _unbuilt(self, build: Build, info: CompileInfo | None, suites: Sequence[tuple[str, AnySuite]]) -> SuitesRun:
        """The suites of a program that did not build: every case fails with why (no run happened)."""
        stage = build.stage
        backend = getattr(self.sandbox, "name", "?")
        if build.error is not None:  # the infrastructure failed, after retries: no verdict
            error = sanitize_text(build.error)
            run = RunInfo(nothing_measured(backend), SandboxStatus.SANDBOX_ERROR, build.attempts, error)
            outcomes = tuple(failed_suite(s, label, "error", "sandbox_error") for label, s in suites)
            return SuitesRun(outcomes, run, error, None, CandidateOutput(reported=False), info)
        reason = build.reason or build.status
        # The compile as the run measured, on this backend; its wait for a CPU is the compile's own (``info``).
        measured = nothing_measured(backend) if stage is None else replace(
            stage, stdout=b"", stderr=b"", backend=backend, wait_ms=0.0
        )  # fmt: skip
        run = RunInfo(measured, build.status, build.attempts, sanitize_text(reason))
        outcomes = tuple(failed_suite(s, label, "error", reason) for label, s in suites)
        output = info.output if info is not None else CandidateOutput()
        return SuitesRun(outcomes, run, None, None, output, info)

    def run_call_cases(
        self, code: str, entry_point: str, cases: Sequence[CallInput], limits: Limits
    ) -> dict[str, CaseValue]:
        """See the module-level ``run_call_cases``."""
        job = call_job_suite(cases, limits.timeout_s)
        ran = self._execute(code, entry_point, [job], limits)
        records, problem = ran.records, ran.problem
        if problem is not None:
            raise SandboxError(f"run_call_cases: {problem}")
        if records.protocol_error is not None:
            raise SandboxError(f"run_call_cases: protocol error: {records.protocol_error}")
        got = records.cases.get(0, {})
        out: dict[str, CaseValue] = {}
        for case in job.payload["cases"]:
            cid = case["id"]
            recs = got.get(cid, [])
            if len(recs) != 1:
                out[cid] = CaseValue(False, None, "missing result" if not recs else "duplicate results")
            elif recs[0]["ok"] and "value" in recs[0]:
                out[cid] = CaseValue(True, recs[0]["value"], None)
            else:
                out[cid] = CaseValue(False, None, str(recs[0].get("error", "error")))
        return out

    # ---- grading ---------------------------------------------------------------------------------------
    def grade(self, task: Task, code: str, *, generation_id: str = "", language: str = "python") -> GradeResult:
        """Static analysis + public and hidden suites in one run: the signals a reward policy needs.

        A workspace task raises WorkspaceTaskError: the episode worker grades those. A ``language`` a suite
        does not take fails it (``unsupported_language``, nothing runs). Static analysis reads Python only: a
        solution in another language has no static flags (its io suites are compared outside all the same).
        """
        public_tests = public_suite(task)
        spec = resolve(language)
        flags = tuple(analyze(code)) if spec.id == "python" else ()
        labelled: list[tuple[str, AnySuite]] = []
        if public_tests is not None:
            labelled.append(("public", public_tests))
        labelled.append(("hidden", task.graded_suite))
        ran = self.run_suites(code, task.entry_point, labelled, task.limits, prompt=task.prompt, language=spec.id)
        by_label = {o.label: o for o in ran.outcomes}
        public = by_label.get("public")
        hidden = by_label["hidden"]
        if ran.infra_error is not None:
            status = "sandbox_error"
        elif hidden.all_passed and (public is None or public.all_passed):
            status = "pass"
        else:
            status = "fail"
        notes: list[str] = []
        if ran.protocol_error:
            notes.append(f"harness protocol violated: {ran.protocol_error}")
        if ran.run.hardened is False:
            notes.append("warning: the harness could not make itself non-dumpable")
        if ran.compile is not None and ran.compile.status is not SandboxStatus.OK:
            notes.append(ran.compile.reason or ran.compile.status)
        if ran.run.status == UNSUPPORTED_LANGUAGE and ran.run.error:
            notes.append(ran.run.error)
        return GradeResult(
            generation_id=generation_id,
            task_id=task.task_id,
            status=status,
            public=public,
            hidden=hidden,
            static_flags=flags,
            run=ran.run,
            infra_error=ran.infra_error,
            notes=tuple(notes),
            language=spec.id,
            compile=ran.compile,
        )


def _in_workspace(suite: AnySuite) -> bool:
    """Whether ``suite`` runs a command (only a workspace has one to run)."""
    return isinstance(suite, CommandSuite) or (isinstance(suite, IoSuite) and suite.command is not None)


def grade(
    task: Task,
    code: str,
    sandbox: Sandbox,
    *,
    generation_id: str = "",
    config: GraderConfig | None = None,
    language: str = "python",
) -> GradeResult:
    """Grade ``code`` for ``task`` on ``sandbox`` (convenience wrapper around ``Grader``)."""
    return Grader(sandbox, config).grade(task, code, generation_id=generation_id, language=language)


def run_call_cases(
    sandbox: Sandbox,
    code: str,
    entry_point: str,
    cases: Sequence[CallInput],
    limits: Limits,
    *,
    config: GraderConfig | None = None,
) -> dict[str, CaseValue]:
    """Run ``entry_point(*args, **kwargs)`` for every case in ONE sandbox run; ``{case_id: CaseValue}``.

    Stable public API (used by task converters to compute expected values from a reference solution).
    Each ``CaseValue`` holds the return value as typed JSON, exactly as the grader will see a candidate's
    (``workers.grading.compare``: tuples, sets and non-string-keyed dicts are tagged, so an expected value
    keeps the reference's types; NaN/inf, custom classes, lone surrogates, oversized or cyclic values give
    ``ok=False`` with an ``error``). Cases need ``id`` (None -> index), ``args`` and ``kwargs``:
    ``schemas.tasks.CallCase`` or ``workers.grading.CallArgs``. Raises ``SandboxError`` only when the
    infrastructure failed after retries.
    """
    return Grader(sandbox, config).run_call_cases(code, entry_point, cases, limits)
