"""``run_source``: run a program once in the sandbox, with stdin and files in, and the files asked for out.

One narrow function the executor's run handler calls, shaped like the languages runner it will use once that
lands (``workers/languages``): swapping it is one import. Until then this one runs ``python`` and ``bash``
through the existing sandbox as one agent step (``workers.episodes.step.run_step``): the request's files, the
program and its stdin are a workspace snapshot, the command is ``python3 main.py < .stdin`` (``bash`` for
bash) under the run timeout, and the fetched files are read from the workspace the step leaves, as a tar in
memory (a link is never followed; only regular files are returned). So files in and out get the episode
runner's hardening for free: the same isolation, caps and re-validation of what comes back.

Limits: paths are relative to the work dir (absolute ones need the languages runner's per-run overlay: the
answer says so); the workspace holds ``WORKSPACE_CAPS``; stdout and stderr are kept up to 1 MiB each.
Outcomes are values: only ``sandbox_error`` is the infrastructure's.
"""

from __future__ import annotations

import io
import posixpath
import tarfile
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from workers.episodes.snapshot import Caps, SnapshotError, pack
from workers.episodes.step import StepAction, StepLimits, StepStatus, run_step
from workers.sandbox.api import Sandbox

#: Languages this runner knows: the interpreter argv and the program's file name.
INTERPRETERS: dict[str, tuple[str, str]] = {"python": ("python3", "main.py"), "bash": ("bash", "main.sh")}
WORKSPACE_CAPS = Caps(max_bytes=16 << 20, max_entries=1024)
OUTPUT_CAP_BYTES = 1 << 20
DEFAULT_MEMORY_MB = 1024
STDIN_FILE = ".stdin"
_INSIDE = "only paths inside the work dir are supported (absolute ones need the languages runner)"
_SCRATCH = "/dev/shm"  # noqa: S108 - a fresh private directory is made in it (tempfile)


@dataclass(frozen=True, slots=True)
class CommandRun:
    """One command of a run (the compile step or the run), measured from outside the program."""

    status: str  # a SandboxStatus value
    exit_code: int | None = None
    signal: int | None = None
    wall_ms: float = 0.0
    stdout: bytes = b""
    stderr: bytes = b""
    stdout_truncated: bool = False
    stderr_truncated: bool = False


@dataclass(frozen=True, slots=True)
class SourceRun:
    """A run's result: ``compile`` (None: interpreted), ``run`` (None: it never started), fetched ``files``.
    ``error_kind``/``error``: why there is no result of the program's own (``unsupported_language``,
    ``invalid``, ``sandbox_error``)."""

    compile: CommandRun | None = None
    run: CommandRun | None = None
    files: dict[str, bytes] = field(default_factory=dict)
    error_kind: str | None = None
    error: str | None = None


def supported_languages() -> tuple[str, ...]:
    """The language names ``run_source`` runs."""
    return tuple(INTERPRETERS)


def _relative(path: str) -> str | None:
    """The normalised relative form of ``path``, or None when it is absolute (or leaves the work dir)."""
    if path.startswith("/"):
        return None
    norm = posixpath.normpath(path)
    return None if norm.startswith("..") or norm in (".", "") else norm


def run_source(
    sandbox: Sandbox,
    language: str,
    code: str,
    *,
    stdin: str | None,
    files: Mapping[str, bytes],
    fetch_files: Sequence[str],
    compile_timeout_s: float,
    run_timeout_s: float,
    memory_mb: int | None,
) -> SourceRun:
    """Run ``code`` once (see the module docstring); never raises for what the program or the request holds."""
    del compile_timeout_s  # interpreted languages only, so far
    if language not in INTERPRETERS:
        known = ", ".join(INTERPRETERS)
        return SourceRun(error_kind="unsupported_language", error=f"language {language!r} is not run here ({known})")
    placed: dict[str, bytes] = {}
    for path, data in files.items():
        rel = _relative(path)
        if rel is None:
            return SourceRun(error_kind="invalid", error=f"file {path!r}: {_INSIDE}")
        placed[rel] = data
    wanted: list[tuple[str, str]] = []
    for path in fetch_files:
        rel = _relative(path)
        if rel is None:
            return SourceRun(
                error_kind="invalid", error=f"fetch {path!r}: only paths inside the work dir are supported"
            )
        wanted.append((path, rel))
    interpreter, name = INTERPRETERS[language]
    while name in placed or any(p.startswith(name + "/") for p in placed):
        name = "_" + name
    placed[name] = code.encode("utf-8", "surrogatepass")
    placed[STDIN_FILE] = (stdin or "").encode("utf-8", "surrogatepass")
    try:
        snapshot = _snapshot(placed)
    except (SnapshotError, OSError, ValueError) as exc:
        return SourceRun(error_kind="invalid", error=f"the files do not make a workspace: {exc}")
    limits = StepLimits(
        memory_mb=(memory_mb or DEFAULT_MEMORY_MB) + 3 * (WORKSPACE_CAPS.max_bytes >> 20),
        output_cap_bytes=OUTPUT_CAP_BYTES,
        read_cap_bytes=1,
    )
    action = StepAction.exec(f"exec {interpreter} {name} < {STDIN_FILE}", timeout_s=run_timeout_s)
    outcome = run_step(sandbox, snapshot, action, WORKSPACE_CAPS, limits)
    if outcome.status == StepStatus.SANDBOX_ERROR:
        return SourceRun(error_kind="sandbox_error", error=outcome.reason or "the sandbox failed")
    run = CommandRun(
        status=outcome.status.value if outcome.status != StepStatus.REJECTED else "crashed",
        exit_code=outcome.exit_code,
        signal=outcome.signal,
        wall_ms=outcome.wall_ms,
        stdout=outcome.stdout,
        stderr=outcome.stderr,
        stdout_truncated=outcome.stdout_truncated,
        stderr_truncated=outcome.stderr_truncated,
    )
    fetched = _fetch(outcome.snapshot, wanted) if wanted and outcome.workspace_kept else {}
    return SourceRun(run=run, files=fetched)


def _snapshot(files: Mapping[str, bytes]) -> bytes:
    """The workspace holding ``files`` (relative paths), as a canonical snapshot."""
    with tempfile.TemporaryDirectory(dir=_SCRATCH, prefix="rs-run-") as tmp:
        root = Path(tmp)
        for rel, data in files.items():
            target = root / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        return pack(root, WORKSPACE_CAPS).data


def _fetch(snapshot: bytes, wanted: Sequence[tuple[str, str]]) -> dict[str, bytes]:
    """The regular files of ``wanted`` found in the snapshot, by the path the caller gave."""
    by_name = {rel: asked for asked, rel in wanted}
    found: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(snapshot), mode="r:") as tar:
        for member in tar:
            asked = by_name.get(posixpath.normpath(member.name))
            if asked is None or not member.isreg():
                continue
            data = tar.extractfile(member)
            if data is not None:
                found[asked] = data.read()
    return found
