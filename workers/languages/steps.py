"""One step of a program (a compile or a run) as one sandbox run of the step driver, and what it reported.

The driver (``driver.py``, inside the sandbox) measures the step; the sandbox measures the whole run from
outside. This module turns both into a ``SandboxResult`` (what the compiler or program did) and the files the step
sent back. What the run sends back is hostile input: records count only on lines framed with this run's
nonce, file names are re-validated (relative, no ``..``, under what was asked for, each once) and sizes are
capped here; the bytes are never run or parsed on the host, only handed to another sandbox run or returned to
the caller. Infrastructure failures (the backend's ``sandbox_error``, a driver that never said hello) are
retried with backoff and end as ``error``; nothing the program does can cause one.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from schemas.caps import STDERR_TAIL_BYTES
from schemas.errors import SandboxError
from workers.retry import SANDBOX_RETRY, RetryPolicy
from workers.sandbox.api import Sandbox, SandboxResult, SandboxSpec, SandboxStatus
from workers.sandbox.common import CRASH_SIGNALS, error_result
from workers.sandbox.guest.clock import CONTENTION
from workers.sandbox.guest.framing import NONCE_LEN, frame_prefix
from workers.sandbox.guest_program import DEFAULT_PYTHON, GuestProgram, guest_program

#: Characters of a sandbox failure's text a step keeps as its error.
_ERROR_CHARS = 4096
#: Characters of a path the driver reports missing, and of why, that a step keeps (the driver is untrusted).
_MISSING_PATH_CHARS = 1024
_MISSING_WHY_CHARS = 256

DRIVER_FILE = "driver.py"
#: Setup and collection time a run gets beyond the step's own deadline (the driver's start, the files back).
GRACE_S = 5.0


def driver_program() -> GuestProgram:
    """The step driver as shipped (``guest_program``: spliced and compiled once)."""
    return guest_program(DRIVER_FILE)


@dataclass(frozen=True, slots=True)
class StepLimits:
    """The limits of one step and of what it may send back."""

    timeout_s: float
    memory_mb: int
    pids_limit: int = 64
    workdir_size_mb: int = 64
    workdir_inodes: int = 4096
    max_output_bytes: int = 1 << 20
    max_collect_bytes: int = 16 << 20
    max_collect_files: int = 256


@dataclass(frozen=True, slots=True)
class StepRun:
    """A step's outcome: the stage (what the step's program did; None when the infrastructure failed: ``error``
    says why), the files sent back (relative path -> bytes) and those asked for that did not come (path -> why).

    The stage's ``status`` is never ``sandbox_error``: ``ok``, ``nonzero_exit``, ``timeout`` (the step's time
    limit), ``memory_limit``, ``output_limit`` (a stream over its cap: the step was killed), ``killed`` or
    ``crashed`` (a signal). Its ``wall_ms`` is the program's own time, from its fork to its end; its
    ``stdout``/``stderr`` the first bytes kept, ``*_bytes`` how many it wrote.
    """

    stage: SandboxResult | None
    files: dict[str, bytes] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)
    error: str | None = None
    attempts: int = 1
    backend: str = ""


@dataclass(frozen=True, slots=True)
class Step:
    """What to run as one step (``argv`` in the work dir, after ``executables`` are made executable)."""

    toolchain: str
    argv: tuple[str, ...]
    files: Mapping[str, bytes]
    stdin: bytes = b""
    env: Mapping[str, str] = field(default_factory=dict)
    executables: tuple[str, ...] = ()
    collect: tuple[str, ...] = ()
    collect_always: bool = False
    #: (staged file of the work dir, absolute path): the driver moves each into place before the program runs.
    place: tuple[tuple[str, str], ...] = ()


#: Where a run's files may be outside the work dir: the run's own writable mounts (its private tmpfs on both
#: backends, capped with the work dir), as SandboxFusion's clients name them (``/mnt/data/x``).
ABSOLUTE_ROOTS = ("/tmp", "/mnt")  # noqa: S108
#: The work dir's folder where files for absolute paths travel until the driver moves them into place.
STAGED = ".rs-abs"


def run_path(name: str) -> str:
    """``name`` as a path of the run: relative under the work dir (``/work/x`` is ``x``), or absolute under one
    of ``ABSOLUTE_ROOTS`` (``/mnt/b``); SandboxError otherwise."""
    for root in ABSOLUTE_ROOTS:
        if name.startswith(root + "/"):
            return root + "/" + relative_path(name[len(root) + 1 :])
    if name.startswith("/") and not name.startswith("/work/"):
        roots = ", ".join(("/work", *ABSOLUTE_ROOTS))
        raise SandboxError(f"invalid path {name!r}: an absolute path must be under {roots}")
    return relative_path(name)


def staged_path(path: str) -> str:
    """Where the work dir holds the file for ``path`` (a ``run_path``) until the driver places it."""
    return STAGED + path if path.startswith("/") else path


def relative_path(name: str) -> str:
    """``name`` as a relative POSIX path under the work dir (``/work/x`` is ``x``); SandboxError if it is not
    one (absolute elsewhere, empty, ``..``, ``.`` segments, NUL)."""
    text = name[len("/work/") :] if name.startswith("/work/") else name
    path = PurePosixPath(text)
    if (
        "\0" in text
        or not text
        or text.startswith("/")
        or not path.parts
        or any(part in ("..", ".") for part in text.split("/"))
        or "" in text.split("/")
    ):
        raise SandboxError(f"invalid path {name!r}: it must be a relative path under the work dir")
    return str(path)


def run_step(
    sandbox: Sandbox,
    step: Step,
    limits: StepLimits,
    *,
    retry: RetryPolicy = SANDBOX_RETRY,
    sleep: Callable[[float], None] = time.sleep,
) -> StepRun:
    """Run ``step`` in a fresh sandbox run of the driver, retrying infrastructure failures as ``retry`` says;
    never raises for what the program does."""
    program = driver_program()
    outcome = StepRun(None, error="no attempt was made")
    for attempt in retry.numbers():
        nonce = secrets.token_hex(NONCE_LEN // 2).encode()
        try:
            result = sandbox.run(_spec(step, limits, program, nonce))
        except Exception as exc:  # a backend that raised failed like any infrastructure failure
            result = _error(exc, getattr(sandbox, "name", "?"))
        outcome = read_step(result, nonce, step, limits, attempt)
        if outcome.error is None:
            return outcome
        if retry.again(attempt):
            sleep(retry.delay(attempt))
    return outcome


def _spec(step: Step, limits: StepLimits, program: GuestProgram, nonce: bytes) -> SandboxSpec:
    header = {
        "argv": list(step.argv),
        "timeout_s": limits.timeout_s,
        "max_output_bytes": limits.max_output_bytes,
        "executables": list(step.executables),
        "collect": list(step.collect),
        "collect_always": step.collect_always,
        "max_collect_bytes": limits.max_collect_bytes,
        "max_collect_files": limits.max_collect_files,
        "place": [list(pair) for pair in step.place],
    }
    stdin = nonce + b"\n" + json.dumps(header).encode() + b"\n" + step.stdin
    # What the driver may print: both streams base64 at their caps, the files base64 at theirs, framing.
    room = (2 * limits.max_output_bytes + limits.max_collect_bytes) * 4 // 3 + 256 * limits.max_collect_files
    return SandboxSpec(
        argv=program.argv(DEFAULT_PYTHON),
        files=dict(step.files),
        stdin=program.stdin(stdin),
        timeout_s=limits.timeout_s + GRACE_S,
        memory_mb=limits.memory_mb,
        pids_limit=limits.pids_limit,
        output_limit_bytes=room + (64 << 10),
        workdir_size_mb=limits.workdir_size_mb,
        workdir_inodes=limits.workdir_inodes,
        env=dict(step.env),
        toolchain=step.toolchain,
    )


def _error(exc: Exception, backend: str) -> SandboxResult:
    return error_result(backend, f"{type(exc).__name__}: {exc}"[:_ERROR_CHARS])


def _records(stdout: bytes, nonce: bytes) -> list[dict[str, Any]]:
    """The framed records of this run (lines without the exact frame are not ours; a cut or unparsable one is
    dropped: what it would have said is then missing, which fails safe)."""
    prefix = frame_prefix(nonce)
    out: list[dict[str, Any]] = []
    for line in stdout.split(b"\n"):
        if line.startswith(prefix):
            try:
                rec = json.loads(line[len(prefix) :])
            except (ValueError, RecursionError):
                continue
            if isinstance(rec, dict):
                out.append(rec)
    return out


def _b64(value: object) -> bytes | None:
    if not isinstance(value, str):
        return None
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None


def _int(value: object) -> int | None:
    return value if type(value) is int else None


def _num(value: object) -> float:
    return float(value) if type(value) in (int, float) and math.isfinite(value) else 0.0  # type: ignore[arg-type]


def _stage(rec: dict[str, Any], result: SandboxResult) -> SandboxResult:
    """A stage from the driver's ``step`` record; the sandbox's own view wins where it saw more (an OOM
    kill anywhere in the run is the program's memory limit)."""
    code, sig = _int(rec.get("exit")), _int(rec.get("signal"))
    if result.status is SandboxStatus.MEMORY_LIMIT:
        status = SandboxStatus.MEMORY_LIMIT
    elif rec.get("timeout") is True:
        status = SandboxStatus.TIMEOUT
    elif rec.get("output_limit") is True:
        status = SandboxStatus.OUTPUT_LIMIT
    elif sig is not None:
        status = SandboxStatus.CRASHED if sig in CRASH_SIGNALS else SandboxStatus.KILLED
    else:
        status = SandboxStatus.OK if code == 0 else SandboxStatus.NONZERO_EXIT
    stdout, stderr = _b64(rec.get("stdout")) or b"", _b64(rec.get("stderr")) or b""
    stdout_bytes = max(_int(rec.get("stdout_bytes")) or 0, len(stdout))
    stderr_bytes = max(_int(rec.get("stderr_bytes")) or 0, len(stderr))
    return SandboxResult(
        status=status,
        exit_code=code if status in (SandboxStatus.OK, SandboxStatus.NONZERO_EXIT) else None,
        signal=sig if status in (SandboxStatus.CRASHED, SandboxStatus.KILLED, SandboxStatus.MEMORY_LIMIT) else None,
        stdout=stdout,
        stderr=stderr,
        stdout_truncated=stdout_bytes > len(stdout),
        stderr_truncated=stderr_bytes > len(stderr),
        wall_ms=_num(rec.get("ms")),
        cpu_ms=_num(rec.get("cpu_ms")),
        max_rss_kb=max(_int(rec.get("max_rss_kb")) or 0, 0),
        backend=result.backend,
        wait_ms=_num(rec.get("wait_ms")),
        stdout_bytes=stdout_bytes,
        stderr_bytes=stderr_bytes,
    )


def _unreported(result: SandboxResult) -> SandboxResult:
    """The driver said hello but never reported the step: the run was stopped from outside (its time,
    memory or output), or the program ended the driver itself. Either way the program's doing."""
    status = result.status
    if status in (SandboxStatus.OK, SandboxStatus.NONZERO_EXIT):
        status = SandboxStatus.KILLED
    return SandboxResult(
        status=status, exit_code=None, signal=result.signal, stdout=b"", stderr=b"", stdout_truncated=False,
        stderr_truncated=False, wall_ms=result.wall_ms, cpu_ms=result.cpu_ms, max_rss_kb=result.max_rss_kb,
        backend=result.backend, wait_ms=result.wait_ms, stdout_bytes=0, stderr_bytes=0,
    )  # fmt: skip


def read_step(result: SandboxResult, nonce: bytes, step: Step, limits: StepLimits, attempt: int = 1) -> StepRun:
    """The outcome of one driver run: its stage and files, or (``error``) why the run says nothing."""
    backend = result.backend
    if result.status is SandboxStatus.SANDBOX_ERROR:
        return StepRun(None, error=f"sandbox error: {result.error or 'unknown'}", attempts=attempt, backend=backend)
    records = _records(result.stdout, nonce)
    if not any(r.get("hello") is True for r in records):
        tail = result.stderr[-STDERR_TAIL_BYTES:].decode("utf-8", "replace").strip()
        why = f"the step driver did not start (status {result.status.value}, exit {result.exit_code}): {tail}"
        return StepRun(None, error=why, attempts=attempt, backend=backend)
    step_rec = next((r["step"] for r in records if isinstance(r.get("step"), dict)), None)
    if step_rec is not None and step_rec.get("contention") is True:
        why = f"{CONTENTION}: the step waited {_num(step_rec.get('wait_ms')) / 1000:.1f} s for a CPU"
        return StepRun(None, error=why, attempts=attempt, backend=backend)
    stage = _unreported(result) if step_rec is None else _stage(step_rec, result)
    files, missing = _files(records, step.collect, limits)
    return StepRun(stage, files, missing, None, attempt, backend)


def _under(path: str, roots: Sequence[str]) -> bool:
    return any(path == root or path.startswith(root + "/") for root in roots)


def _files(
    records: list[dict[str, Any]], roots: Sequence[str], limits: StepLimits
) -> tuple[dict[str, bytes], dict[str, str]]:
    files: dict[str, bytes] = {}
    missing: dict[str, str] = {}
    total = 0
    for rec in records:
        if "missing" in rec and isinstance(rec["missing"], str):
            missing.setdefault(
                rec["missing"][:_MISSING_PATH_CHARS], str(rec.get("why", "missing"))[:_MISSING_WHY_CHARS]
            )
            continue
        name, data = rec.get("file"), _b64(rec.get("b64"))
        if not isinstance(name, str) or data is None:
            continue
        try:
            path = run_path(name)
        except SandboxError:
            continue
        if not _under(path, roots) or path in files or len(files) >= limits.max_collect_files:
            continue
        if total + len(data) > limits.max_collect_bytes:
            missing[path] = f"over the {limits.max_collect_bytes}-byte cap of returned files"
            continue
        total += len(data)
        files[path] = data
    for root in roots:
        if not _under_any(root, files) and root not in missing:
            missing[root] = "not found"
    return files, missing


def _under_any(root: str, files: Mapping[str, bytes]) -> bool:
    return any(_under(path, [root]) for path in files)
