"""``run_source``: run a program once for ``/run_code``, in the executor's sandbox, as the run handler needs it.

The work is the languages runner's (``workers.languages.run_source``: compile as its own sandbox step when the
language needs it, then one run with stdin and files in and the files asked for fetched back), and so is the
result (``SourceRun``). This module is the narrow seam between it and the run handler: the request's own faults
as values rather than exceptions (a language no runner knows is ``unsupported_language``, a path outside the
work dir ``invalid``), the infrastructure's failure as ``sandbox_error``, and the fetched files keyed by the
path the caller gave (``/work/x`` comes back as ``/work/x``, not ``x``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from schemas.errors import SandboxError, ValidationError
from workers.languages import SourceRun, resolve
from workers.languages import run_source as run_program
from workers.languages.steps import run_path
from workers.sandbox.api import Sandbox

#: The run's memory when the request gives none (SandboxFusion's -1; verl sends 1024).
DEFAULT_MEMORY_MB = 1024


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
    """Compile if needed and run ``code`` once; never raises for what the program or the request holds."""
    try:
        resolve(language)
    except ValidationError as exc:
        return SourceRun(language, error_kind="unsupported_language", error=f"not run here: {exc}")
    try:
        asked = {run_path(path): path for path in fetch_files}
    except SandboxError as exc:
        return SourceRun(language, error_kind="invalid", error=f"fetch_files: {exc}")
    try:
        ran = run_program(
            sandbox, language, code, stdin=(stdin or "").encode("utf-8", "surrogatepass"), files=files,
            fetch_files=list(fetch_files), compile_timeout_s=compile_timeout_s, run_timeout_s=run_timeout_s,
            memory_mb=memory_mb or DEFAULT_MEMORY_MB,
        )  # fmt: skip
    except ValidationError as exc:  # a path outside the work dir, a bad file name
        return SourceRun(language, error_kind="invalid", error=str(exc))
    return replace(ran, files={asked.get(path, path): data for path, data in ran.files.items()})
