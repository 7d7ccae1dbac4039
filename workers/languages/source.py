"""A program in any registered language: compiled once as its own sandbox step, then run.

Why compile as a step of its own (one sandbox run of the step driver), not inside the runs: a compiler is
attacked too (template and include bombs, huge diagnostics, outputs that fill the disk), so it gets its own
time, memory, pids and disk limits, enforced by the sandbox from outside like any run, and its own outcome:
``compile_error`` or ``compile_timeout`` is the program's failure, never ``sandbox_error``. The built files
come back on the driver's framed channel (``steps``), are re-validated and capped on the host and are never
run there: they only go into the sandbox runs of the same program, so a forged artifact is just the
candidate's own (wrong) program. One build serves every run of it (a suite's cases, public and hidden).

``run_source`` is the narrow call behind SandboxFusion's ``/run_code`` (the HTTP gateway's): compile if the
language needs it, then one run with stdin, files in and files fetched.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from schemas.errors import SandboxError, ValidationError
from schemas.runs import RunErrorKind
from schemas.status import CompileFailure, CompileStatus
from workers.languages.registry import LanguageSpec, resolve
from workers.languages.steps import STAGED, Step, StepLimits, StepRun, run_path, run_step, staged_path
from workers.retry import SANDBOX_RETRY, RetryPolicy
from workers.sandbox.api import Sandbox, SandboxResult, SandboxStatus

#: A compile's limits unless the caller gives others: compilers are hungrier than most programs (rustc, javac)
#: and their threads count against the pids limit.
COMPILE_TIMEOUT_S = 20.0
COMPILE_MEMORY_MB = 1024
COMPILE_PIDS = 128
COMPILE_WORKDIR_MB = 256
#: Compiler output kept per stream: feedback, not a log.
COMPILE_OUTPUT_BYTES = 64 << 10
#: What a build may hand to its runs.
ARTIFACT_BYTES = 32 << 20
ARTIFACT_FILES = 512
#: A run's output kept per stream, and what ``fetch_files`` may bring back.
RUN_OUTPUT_BYTES = 1 << 20
FETCH_BYTES = 16 << 20
FETCH_FILES = 256


@dataclass(frozen=True, slots=True)
class CompileLimits:
    """The compile step's own limits."""

    timeout_s: float = COMPILE_TIMEOUT_S
    memory_mb: int = COMPILE_MEMORY_MB
    pids_limit: int = COMPILE_PIDS
    workdir_size_mb: int = COMPILE_WORKDIR_MB


@dataclass(frozen=True, slots=True)
class Build:
    """A program ready to run: its language, the files every run of it gets (the source, the caller's files,
    the compile's artifacts), and the compile's outcome (``stage`` None when the language is not compiled).

    ``status`` other than ``ok`` means there is nothing to run: ``compile_error`` (the compiler failed,
    crashed, ran out of memory or output, or built nothing) or ``compile_timeout``; ``reason`` says which,
    ``stage`` has the compiler's output (the feedback). ``error`` is an infrastructure failure (no verdict).
    """

    language: LanguageSpec
    status: CompileStatus
    files: Mapping[str, bytes] = field(default_factory=dict)
    stage: SandboxResult | None = None
    reason: str | None = None
    error: str | None = None
    attempts: int = 1

    @property
    def ok(self) -> bool:
        """Whether there is a program to run."""
        return self.error is None and self.status is SandboxStatus.OK

    def feedback(self, limit: int = 4096) -> str:
        """What a model may read of a failed compile: why, then the compiler's output (stderr first)."""
        lines = [self.reason or self.status]
        if self.stage is not None:
            for stream in (self.stage.stderr, self.stage.stdout):
                text = stream.decode("utf-8", "replace").strip()
                if text:
                    lines.append(text)
        return "\n".join(lines)[:limit]


def _inputs(spec: LanguageSpec, code: str, files: Mapping[str, bytes] | None) -> dict[str, bytes]:
    """The work dir's files: the toolchain's support files, the caller's (relative paths, ``/work/...``
    accepted; absolute ones under the run's /tmp or /mnt staged, see ``placed``), then the source."""
    out: dict[str, bytes] = {name: text.encode() for name, text in spec.support.items()}
    for name, data in (files or {}).items():
        out[staged_path(run_path(name))] = data
    out[spec.source] = spec.prepare(code).encode("utf-8", "surrogatepass")
    return out


def placed(files: Mapping[str, bytes]) -> tuple[tuple[str, str], ...]:
    """(staged file, absolute path) for each file of ``files`` (the work dir's) that belongs elsewhere."""
    prefix = STAGED + "/"
    return tuple((name, name[len(STAGED) :]) for name in files if name.startswith(prefix))


def compile_program(
    sandbox: Sandbox,
    language: str | LanguageSpec,
    code: str,
    *,
    files: Mapping[str, bytes] | None = None,
    limits: CompileLimits | None = None,
    retry: RetryPolicy = SANDBOX_RETRY,
) -> Build:
    """Build ``code`` (one sandbox step with ``limits``) into what its runs need; an interpreted language
    needs no step and is ready at once. ``ValidationError`` for an unknown language or a bad file name."""
    spec = language if isinstance(language, LanguageSpec) else resolve(language)
    try:
        inputs = _inputs(spec, code, files)
    except SandboxError as exc:
        raise ValidationError(str(exc)) from None
    if not spec.compiled:
        return Build(spec, SandboxStatus.OK, inputs)
    lim = limits or CompileLimits()
    if lim.timeout_s < spec.min_compile_timeout_s or lim.memory_mb < spec.min_compile_memory_mb:
        lim = replace(
            lim,
            timeout_s=max(lim.timeout_s, spec.min_compile_timeout_s),
            memory_mb=max(lim.memory_mb, spec.min_compile_memory_mb),
        )
    step = Step(
        toolchain=spec.toolchain, argv=spec.compile_argv(lim.memory_mb), files=inputs, env=spec.env,
        collect=spec.artifacts, place=placed(inputs),
    )  # fmt: skip
    step_limits = StepLimits(
        timeout_s=lim.timeout_s, memory_mb=lim.memory_mb, pids_limit=lim.pids_limit,
        workdir_size_mb=lim.workdir_size_mb, workdir_inodes=8192, max_output_bytes=COMPILE_OUTPUT_BYTES,
        max_collect_bytes=ARTIFACT_BYTES, max_collect_files=ARTIFACT_FILES,
    )  # fmt: skip
    ran = run_step(sandbox, step, step_limits, retry=retry)
    return _build(spec, inputs, ran, lim)


def _build(spec: LanguageSpec, inputs: dict[str, bytes], ran: StepRun, limits: CompileLimits) -> Build:
    if ran.stage is None:
        return Build(spec, CompileFailure.COMPILE_ERROR, error=ran.error or "no result", attempts=ran.attempts)
    stage = ran.stage
    if stage.status is SandboxStatus.TIMEOUT:
        why = f"compile_timeout: the compiler ran past its {limits.timeout_s:g} s limit (CPU or own time)"
        return Build(spec, CompileFailure.COMPILE_TIMEOUT, stage=stage, reason=why, attempts=ran.attempts)
    reasons = {
        SandboxStatus.NONZERO_EXIT: f"compile_error: the compiler exited {stage.exit_code}",
        SandboxStatus.MEMORY_LIMIT: f"compile_error: the compiler ran out of its {limits.memory_mb} MiB",
        SandboxStatus.OUTPUT_LIMIT: "compile_error: the compiler's output exceeded its cap",
        SandboxStatus.KILLED: f"compile_error: the compiler was killed (signal {stage.signal})",
        SandboxStatus.CRASHED: f"compile_error: the compiler crashed (signal {stage.signal})",
    }
    if stage.status in reasons:
        return Build(
            spec, CompileFailure.COMPILE_ERROR, stage=stage, reason=reasons[stage.status], attempts=ran.attempts
        )
    if ran.missing:
        path, why = next(iter(ran.missing.items()))
        reason = f"compile_error: the build left no usable {path} ({why})"
        return Build(spec, CompileFailure.COMPILE_ERROR, stage=stage, reason=reason, attempts=ran.attempts)
    return Build(spec, SandboxStatus.OK, {**inputs, **ran.files}, stage=stage, attempts=ran.attempts)


@dataclass(frozen=True, slots=True)
class SourceRun:
    """What ``run_source`` did: the compile stage (None when the language is not compiled, or the run never
    got that far), the run stage (None when the compile failed or the infrastructure did), the fetched files
    (relative path -> bytes) and those that could not be fetched (path -> why).

    ``compile_status`` is ``ok``/``compile_error``/``compile_timeout`` (None when not compiled). ``error`` set
    means there is no result of the program's own, ``error_kind`` says why: ``sandbox_error`` (the
    infrastructure failed after retries, SandboxFusion's ``SandboxError``), or what the executor's run handler
    refuses before running (``workers.runs.program``: ``unsupported_language``, ``invalid``, ``expired``).
    """

    language: str
    compile: SandboxResult | None = None
    run: SandboxResult | None = None
    files: dict[str, bytes] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)
    compile_status: CompileStatus | None = None
    error: str | None = None
    error_kind: RunErrorKind | None = None


def run_source(
    sandbox: Sandbox,
    language: str,
    code: str,
    *,
    stdin: bytes = b"",
    files: Mapping[str, bytes] | None = None,
    fetch_files: Sequence[str] = (),
    compile_timeout_s: float = 10.0,
    run_timeout_s: float = 10.0,
    memory_mb: int = 512,
    compile_memory_mb: int | None = None,
) -> SourceRun:
    """Compile (if ``language`` needs it) and run ``code`` once, as SandboxFusion's ``/run_code`` does.

    ``language`` is our id or a SandboxFusion name (``nodejs``, ``cpp``, ``go``, ...). ``files`` are written
    into the work dir first (relative paths, nested ones too; ``/work/...`` is the same path; absolute paths
    under the run's own ``/tmp`` or ``/mnt`` too) and are there for the compile and the run; ``fetch_files``
    (same form; a directory brings its regular files) are read back
    after the run, whatever it did. ``memory_mb`` limits the run (the compile gets ``compile_memory_mb``,
    default ``COMPILE_MEMORY_MB``), each in its own sandbox run; a build SandboxFusion times as part of the run
    (``go_test``) gets the longer of the two timeouts. Output is kept up to ``RUN_OUTPUT_BYTES`` per
    stream (more ends the run as ``output_limit``), fetched files up to ``FETCH_BYTES`` in all.
    Raises ``ValidationError`` only for the request itself (unknown language, bad path); what the program or
    its compiler did is in the result, and an infrastructure failure is ``error``.
    """
    spec = resolve(language)
    try:
        fetch = tuple(dict.fromkeys(run_path(name) for name in fetch_files))
    except SandboxError as exc:
        raise ValidationError(str(exc)) from None
    if spec.build_in_run_time:
        compile_timeout_s = max(compile_timeout_s, run_timeout_s)
    limits = CompileLimits(timeout_s=compile_timeout_s, memory_mb=compile_memory_mb or COMPILE_MEMORY_MB)
    build = compile_program(sandbox, spec, code, files=files, limits=limits)
    compile_status = build.status if spec.compiled else None
    if build.error is not None:
        return SourceRun(
            spec.id, build.stage, None, compile_status=compile_status, error=build.error, error_kind="sandbox_error"
        )
    if not build.ok:
        return SourceRun(spec.id, build.stage, None, compile_status=compile_status)
    step = Step(
        toolchain=spec.toolchain, argv=spec.run_argv(memory_mb), files=build.files, stdin=stdin, env=spec.env,
        executables=spec.executables, collect=fetch, collect_always=True, place=placed(build.files),
    )  # fmt: skip
    step_limits = StepLimits(
        timeout_s=run_timeout_s, memory_mb=memory_mb, max_output_bytes=RUN_OUTPUT_BYTES,
        max_collect_bytes=FETCH_BYTES, max_collect_files=FETCH_FILES,
    )  # fmt: skip
    ran = run_step(sandbox, step, step_limits)
    kind: RunErrorKind | None = None if ran.error is None else "sandbox_error"
    return SourceRun(spec.id, build.stage, ran.stage, ran.files, dict(ran.missing), compile_status, ran.error, kind)
