"""Hostile programs in C, C++, Go, Rust, Java, Node, D, C#, Kotlin, Scala and R against both backends, compiled and
run as any solution is (``run_source``): every attempt of ``hostile_programs`` must fail, the thread bomb must
stop at the pids limit, the fork bomb must end with the run, and nothing may be left behind (the backend's
audit).

Each program runs only inside the sandbox under test.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from schemas.settings import Settings
from workers.languages import REGISTRY, run_source
from workers.sandbox.api import Sandbox, SandboxStatus
from workers.sandbox.seccomp import syscall_numbers

from .conftest import audit
from .hostile_programs import HOSTILE, hostile_source

pytestmark = pytest.mark.sandbox

ENDED = {
    SandboxStatus.TIMEOUT,
    SandboxStatus.MEMORY_LIMIT,
    SandboxStatus.KILLED,
    SandboxStatus.CRASHED,
    SandboxStatus.NONZERO_EXIT,
}


@pytest.fixture(params=("process", "docker"))
def backend(request: pytest.FixtureRequest) -> Iterator[Sandbox]:
    sandbox: Sandbox = request.getfixturevalue(f"{request.param}_sandbox")
    yield sandbox
    leftovers = audit(sandbox)
    assert not leftovers, f"{request.param} left behind: {leftovers}"


def _attempts(stdout: bytes) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in stdout.decode("utf-8", "replace").splitlines():
        name, sep, value = line.partition("=")
        if sep:
            out.setdefault(name, value)
    return out


@pytest.mark.parametrize("language", sorted(HOSTILE))
def test_hostile_program_is_contained(
    backend: Sandbox, language: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sandbox_settings: Settings
) -> None:
    secret = tmp_path / f"host-secret-{language}.txt"
    secret.write_text("host-secret-content")
    monkeypatch.setenv("RS_TEST_SECRET", "worker-secret")
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.0)
    try:
        code = hostile_source(language, port=listener.getsockname()[1], secret=str(secret), numbers=syscall_numbers())
        ran = run_source(backend, language, code, run_timeout_s=4.0, memory_mb=256, compile_timeout_s=60.0)
        assert ran.error is None, ran.error
        assert ran.compile_status in (None, "ok"), ran.compile
        assert ran.run is not None
        assert ran.run.status in ENDED, (ran.run.status, ran.run.stderr[-2000:])
        attempts = _attempts(ran.run.stdout)
        expected = HOSTILE[language][1]
        assert set(expected) <= set(attempts), (sorted(set(expected) - set(attempts)), ran.run.stderr[-2000:])
        worked = {name: attempts[name] for name in expected if attempts[name] == "0"}
        assert not worked, f"{language} on {backend.name}: these attempts worked: {worked}"
        if "threads" in attempts and language != "go":  # go prints goroutines; its runtime dies at the limit
            assert int(attempts["threads"]) < 64, attempts["threads"]
        with pytest.raises(BlockingIOError):
            listener.accept()
    finally:
        listener.close()
    assert b"host-secret-content" not in ran.run.stdout
    rootfs = sandbox_settings.toolchain_rootfs_path(REGISTRY[language].toolchain)
    for planted in ("etc/rs-pwned", "rs-pwned"):
        assert not (Path("/") / planted).exists()
        assert not (rootfs / planted).exists()
