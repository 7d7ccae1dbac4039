"""The local platform's building blocks: verified downloads, pid tracking, endpoint parsing."""

from __future__ import annotations

import functools
import hashlib
import http.server
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from infra.local.download import fetch_verified, maven_url, require_free_space
from infra.local.process import ManagedProcess, group_members
from infra.local.service import is_loopback, split_host_port
from schemas.errors import PlatformError


@pytest.fixture
def file_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A loopback HTTP server over a temp dir, standing in for a Maven repository."""
    root = tmp_path / "repo"
    root.mkdir()

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            return

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", root
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_fetch_verified_accepts_matching_sha512(file_server: tuple[str, Path], tmp_path: Path) -> None:
    base, root = file_server
    payload = b"jar bytes" * 1000
    (root / "a.jar").write_bytes(payload)
    (root / "a.jar.sha512").write_text(hashlib.sha512(payload).hexdigest() + "  a.jar\n")
    dest = fetch_verified(f"{base}/a.jar", tmp_path / "out" / "a.jar", needed_mb=1)
    assert dest.read_bytes() == payload


def test_fetch_verified_rejects_tampered_file_and_keeps_nothing(file_server: tuple[str, Path], tmp_path: Path) -> None:
    base, root = file_server
    (root / "a.jar").write_bytes(b"tampered")
    (root / "a.jar.sha1").write_text(hashlib.sha1(b"original").hexdigest())  # noqa: S324 (Maven's published sha1)
    dest = tmp_path / "out" / "a.jar"
    with pytest.raises(PlatformError, match=r"checksum mismatch for .*a\.jar: sha1"):
        fetch_verified(f"{base}/a.jar", dest, needed_mb=1)
    assert not dest.exists()
    assert not list(dest.parent.iterdir())


def test_fetch_verified_without_published_checksum_fails(file_server: tuple[str, Path], tmp_path: Path) -> None:
    base, root = file_server
    (root / "a.jar").write_bytes(b"x")
    with pytest.raises(PlatformError, match="no published checksum"):
        fetch_verified(f"{base}/a.jar", tmp_path / "a.jar", needed_mb=1)


def test_require_free_space_names_dir_and_setting(tmp_path: Path) -> None:
    with pytest.raises(PlatformError, match=r"not enough free disk in .*RS_CACHE_DIR"):
        require_free_space(tmp_path, needed_mb=1 << 40)


def test_maven_url_layout() -> None:
    url = maven_url("https://repo/maven2/", "org.gaul", "s3proxy", "2.9.0", "s3proxy-2.9.0.jar")
    assert url == "https://repo/maven2/org/gaul/s3proxy/2.9.0/s3proxy-2.9.0.jar"


@pytest.mark.parametrize(
    ("endpoint", "expected"),
    [
        ("127.0.0.1:9092", ("127.0.0.1", 9092)),
        ("http://localhost:9200", ("localhost", 9200)),
        ("https://search.prod", ("search.prod", 443)),
        ("minio.prod", ("minio.prod", 443)),
    ],
)
def test_split_host_port(endpoint: str, expected: tuple[str, int]) -> None:
    assert split_host_port(endpoint, 443) == expected


def test_loopback_detection() -> None:
    assert is_loopback("127.0.0.2")
    assert is_loopback("::1")
    assert not is_loopback("10.0.0.1")
    assert not is_loopback("kafka.prod")


def _managed(tmp_path: Path) -> ManagedProcess:
    return ManagedProcess("sleeper", tmp_path / "run" / "s.pid", tmp_path / "logs" / "s.log")


def test_managed_process_stop_kills_the_whole_group(tmp_path: Path) -> None:
    proc = _managed(tmp_path)
    # A parent that forks a child which ignores SIGTERM: `stop` must still leave nothing.
    script = "trap '' TERM; sleep 300 & sleep 300; wait"
    pid = proc.start(["/bin/sh", "-c", script], env={"PATH": "/usr/bin:/bin"}, cwd=tmp_path)
    deadline = time.monotonic() + 10
    while len(group_members(pid)) < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert proc.pid() == pid
    assert len(group_members(pid)) >= 2
    assert proc.stop(timeout_s=1.0)
    assert group_members(pid) == []
    assert proc.pid() is None
    assert not proc.pidfile.exists()


def test_recycled_pid_is_never_ours(tmp_path: Path) -> None:
    proc = _managed(tmp_path)
    pid = proc.start(["/bin/sleep", "300"], env={}, cwd=tmp_path)
    try:
        recorded_pid, started = proc.pidfile.read_text().split()
        proc.pidfile.write_text(f"{recorded_pid} {int(started) + 1}\n")  # same pid, other start time
        assert proc.pid() is None
        assert not proc.pidfile.exists()
    finally:
        proc.pidfile.write_text(f"{pid} {started}\n")
        proc.stop(timeout_s=5)


def test_exited_early_returns_log_tail(tmp_path: Path) -> None:
    proc = _managed(tmp_path)
    pid = proc.start(["/bin/sh", "-c", "echo 'bind failed: address in use'; exit 3"], env={}, cwd=tmp_path)
    deadline = time.monotonic() + 10
    while group_members(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert proc.exited_early() == "bind failed: address in use"
