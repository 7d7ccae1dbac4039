"""What both backends share about a run: the environment candidate code sees, a valid ``spec.files`` name, how
what the parent observed becomes one status, and the result of an infrastructure failure."""

from __future__ import annotations

import signal
from pathlib import PurePosixPath

from schemas.errors import SandboxError
from workers.sandbox.api import SandboxResult, SandboxStatus

CRASH_SIGNALS = frozenset(
    {
        signal.SIGSEGV,
        signal.SIGBUS,
        signal.SIGABRT,
        signal.SIGILL,
        signal.SIGFPE,
        signal.SIGSYS,
        signal.SIGTRAP,
    }
)
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
# Paths inside the sandbox's own mount namespace (private tmpfs binds, not the host's /tmp).
SANDBOX_TMP = "/tmp"  # noqa: S108
SANDBOX_SHM = "/dev/shm"  # noqa: S108
SANDBOX_WORK = "/work"


def base_env(uid_home: str = "/work") -> dict[str, str]:
    """The whole environment candidate code sees (plus ``spec.env``): nothing from the worker."""
    return {
        "PATH": SANDBOX_PATH,
        "HOME": uid_home,
        "LANG": "C.UTF-8",
        "TMPDIR": SANDBOX_TMP,
        "PYTHONDONTWRITEBYTECODE": "1",
    }


def exit_of(returncode: int) -> tuple[int | None, int | None]:
    """(exit code, signal) of a ``returncode`` as bwrap, runc, a shell and the in-sandbox servers report it:
    128 + N for a death by signal N."""
    if 128 < returncode < 128 + 65:
        return None, returncode - 128
    return returncode, None


def classify(
    *,
    stopped_for: SandboxStatus | None,
    oom_kills: int,
    exit_code: int | None,
    sig: int | None,
) -> SandboxStatus:
    """Turn what the parent observed into one status (shared by both backends).

    An OOM kill anywhere in the tree wins: it is the root cause even if the run then hung until the timeout.
    """
    if oom_kills > 0:
        return SandboxStatus.MEMORY_LIMIT
    if stopped_for is not None:
        return stopped_for
    if sig is not None:
        return SandboxStatus.CRASHED if sig in CRASH_SIGNALS else SandboxStatus.KILLED
    return SandboxStatus.OK if exit_code == 0 else SandboxStatus.NONZERO_EXIT


def error_result(backend: str, message: str, wall_ms: float = 0.0) -> SandboxResult:
    """A ``sandbox_error`` result: the infrastructure failed, the program is not to blame."""
    return SandboxResult(
        status=SandboxStatus.SANDBOX_ERROR,
        exit_code=None,
        signal=None,
        stdout=b"",
        stderr=b"",
        stdout_truncated=False,
        stderr_truncated=False,
        wall_ms=wall_ms,
        cpu_ms=0.0,
        max_rss_kb=0,
        backend=backend,
        error=message,
    )


def check_relpath(name: str) -> PurePosixPath:
    """Validate a ``spec.files`` key: relative, no ``..``, not empty."""
    path = PurePosixPath(name)
    if path.is_absolute() or not path.parts or ".." in path.parts:
        raise SandboxError(f"spec.files: invalid relative path {name!r}")
    return path
