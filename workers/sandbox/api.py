"""The sandbox contract shared by every backend and by the grader.

Outcomes of untrusted code are values (``SandboxResult``), never exceptions: only a failure of the sandbox
infrastructure itself becomes ``SandboxStatus.SANDBOX_ERROR``. ``SandboxResult`` is the host's one shape of a
measured run: a backend's run, and a program run as a step inside one (a compile, a ``/run_code`` run), alike.
What goes on the wire is made from it (``schemas.events.SandboxRun``, ``schemas.runs.RunStep``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from schemas.settings import PYTHON_TOOLCHAIN
from schemas.status import SandboxStatus

__all__ = ["Sandbox", "SandboxResult", "SandboxSpec", "SandboxStatus"]  # SandboxStatus: the schemas' own


@dataclass(frozen=True, slots=True)
class SandboxSpec:
    """What to run and within which limits.

    ``files`` are written into the private work dir (relative paths) before ``argv`` starts there.
    ``toolchain`` names the root filesystem (process) or image (docker) the run gets: ``python`` (python,
    pytest, git) or another family of ``infra.local.sandbox_image.TOOLCHAINS`` (``workers.languages`` picks
    it per language); every family has python3 and bash.
    """

    argv: tuple[str, ...]
    files: Mapping[str, bytes] = field(default_factory=dict)
    stdin: bytes = b""
    timeout_s: float = 10.0
    memory_mb: int = 512
    pids_limit: int = 64
    cpus: float = 1.0
    output_limit_bytes: int = 1 << 20
    workdir_size_mb: int = 64
    workdir_inodes: int = 4096
    env: Mapping[str, str] = field(default_factory=dict)
    toolchain: str = PYTHON_TOOLCHAIN


@dataclass(frozen=True, slots=True)
class SandboxResult:
    """Everything measured about one run. stdout/stderr are capped; ``*_truncated`` says so.

    A step's program (``workers.languages.steps``) is measured by the step driver inside the run: its result
    never says ``sandbox_error`` (an infrastructure failure is the step's ``error``), and it counts the bytes
    each stream got (``*_bytes``), which a backend does not.
    """

    status: SandboxStatus
    exit_code: int | None
    signal: int | None
    stdout: bytes
    stderr: bytes
    stdout_truncated: bool
    stderr_truncated: bool
    wall_ms: float
    cpu_ms: float
    max_rss_kb: int
    backend: str
    error: str | None = None
    pids_limit_hit: bool = False
    #: How long the host kept the run waiting for a CPU (its time limit does not count it).
    wait_ms: float = 0.0
    #: How many bytes the program wrote to each stream, when what measured it counted them (a step's driver
    #: does); None: only ``*_truncated`` is known.
    stdout_bytes: int | None = None
    stderr_bytes: int | None = None

    def to_json(self) -> dict[str, object]:
        """The CLI/JSON shape: bytes decoded as UTF-8 (invalid bytes replaced), status as its string."""
        return {
            **measured_json(self),
            "pids_limit_hit": self.pids_limit_hit,
            "backend": self.backend,
            "error": self.error,
        }


def measured_json(run: SandboxResult) -> dict[str, object]:
    """The JSON shape of a measured run (``sandbox run``'s, and alone a step's): bytes decoded as UTF-8 with
    invalid bytes replaced, the status as its string."""
    return {
        "status": run.status.value,
        "exit_code": run.exit_code,
        "signal": run.signal,
        "stdout": run.stdout.decode("utf-8", errors="replace"),
        "stderr": run.stderr.decode("utf-8", errors="replace"),
        "stdout_truncated": run.stdout_truncated,
        "stderr_truncated": run.stderr_truncated,
        "wall_ms": run.wall_ms,
        "cpu_ms": run.cpu_ms,
        "max_rss_kb": run.max_rss_kb,
        "wait_ms": run.wait_ms,
    }


class Sandbox(Protocol):
    """A backend. ``run`` must be safe to call from several threads at once."""

    name: str

    def run(self, spec: SandboxSpec) -> SandboxResult:
        """Run ``spec`` in a pristine sandbox and report what happened."""
        ...

    def close(self) -> None:
        """Release pooled resources (warm containers, fork servers)."""
        ...
