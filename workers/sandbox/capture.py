"""The bounded capture of a run's stdout and stderr behind its start marker, and the result it makes (both
backends, every run path)."""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field

from workers.sandbox.api import SandboxResult, SandboxStatus
from workers.sandbox.common import classify, exit_of

#: Bytes of stderr, its end, kept as the reason a sandbox never reached its program.
_ERROR_DETAIL_BYTES = 400


def start_marker() -> bytes:
    """A fresh marker for one run: the start shim prints it before the program exists."""
    return f"<rs-start-{secrets.token_hex(8)}>".encode()


@dataclass(slots=True)
class Capture:
    """Bounded stdout/stderr capture (never more than ``limit`` bytes per stream), behind a start gate.

    stdout must begin with ``marker``, printed by the start shim before the program exists: a program can
    neither suppress it nor forge one for a sandbox that never started.
    """

    limit: int
    marker: bytes = b""
    data: dict[str, bytearray] = field(default_factory=lambda: {"out": bytearray(), "err": bytearray()})
    truncated: dict[str, bool] = field(default_factory=lambda: {"out": False, "err": False})
    prefix: bytearray = field(default_factory=bytearray)
    started_at: float | None = None
    bad_start: bool = False

    def feed(self, which: str, chunk: bytes) -> bool:
        """Append a chunk; return False once the cap is exceeded or stdout did not start with the marker."""
        if which == "out" and self.started_at is None and self.marker:
            self.prefix += chunk
            if len(self.prefix) < len(self.marker):
                return True
            if not self.prefix.startswith(self.marker):
                self.bad_start = True
                return False
            self.started_at = time.monotonic()
            chunk = bytes(self.prefix[len(self.marker) :])
        buf = self.data[which]
        room = self.limit - len(buf)
        if len(chunk) > room:
            buf += chunk[: max(room, 0)]
            self.truncated[which] = True
            return False
        buf += chunk
        return True

    def error_detail(self) -> str:
        """The end of stderr: why a sandbox that never reached the program did not start."""
        return bytes(self.data["err"][-_ERROR_DETAIL_BYTES:]).decode(errors="replace").strip()

    def result(
        self,
        backend: str,
        *,
        stopped_for: SandboxStatus | None,
        returncode: int | None,
        started_at: float,
        ended_at: float | None,
        oom_kills: int = 0,
        cpu_ms: float = 0.0,
        max_rss_kb: int = 0,
        pids_limit_hit: bool = False,
        wait_ms: float = 0.0,
        error: str | None = None,
    ) -> SandboxResult:
        """The result of a run that reached the program. ``returncode`` as bwrap, runc and the in-sandbox
        servers report it (128 + N for a death by signal N); none counts once the parent stopped the run.
        ``error``: why a run the host starved (``stopped_for`` ``SANDBOX_ERROR``) says nothing of the program."""
        exit_code: int | None = None
        sig: int | None = None
        if stopped_for is None and returncode is not None:
            exit_code, sig = exit_of(returncode)
        return SandboxResult(
            status=classify(stopped_for=stopped_for, oom_kills=oom_kills, exit_code=exit_code, sig=sig),
            exit_code=exit_code,
            signal=sig,
            stdout=bytes(self.data["out"]),
            stderr=bytes(self.data["err"]),
            stdout_truncated=self.truncated["out"],
            stderr_truncated=self.truncated["err"],
            wall_ms=round(((ended_at or time.monotonic()) - started_at) * 1e3, 3),
            cpu_ms=round(cpu_ms, 3),
            max_rss_kb=max_rss_kb,
            backend=backend,
            pids_limit_hit=pids_limit_hit,
            wait_ms=wait_ms,
            error=error,
        )
