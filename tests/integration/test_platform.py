"""`rewardstream up/status/down` on an isolated copy of the local platform, and bad configurations.

Figures the issue asks to report (warm `up` time, idle memory) are printed; run with `-s` to see them.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from infra.local.paths import SHARED_CACHE_PARTS
from infra.local.process import group_members
from infra.local.service import Health
from tests.integration.platform_env import IsolatedPlatform, isolated_platform, one_line_error

pytestmark = pytest.mark.integration

JAVA_SERVICES = ("kafka", "opensearch", "s3")
IDLE_MEMORY_LIMIT_MB = 3 * 1024


def _wait_for(predicate: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.2)


def _docker_engine_rss_mb() -> float:
    """RSS of dockerd and containerd (shared with the main platform), for the memory figure."""
    total_kb = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "comm").read_text().strip() in ("dockerd", "containerd"):
                total_kb += _rss_kb(int(entry.name))
        except OSError:
            continue
    return total_kb / 1024


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


@pytest.fixture
def isolated(tmp_path: Path, platform_health: dict[str, Health]) -> Iterator[IsolatedPlatform]:
    if not platform_health["docker"].healthy:
        pytest.skip("docker is not available; start it with `rewardstream up`")
    platform = isolated_platform(tmp_path, base_port=19000)
    try:
        yield platform
    finally:
        platform.purge()


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_up_status_kill_recover_down_and_warm_up(isolated: IsolatedPlatform) -> None:
    up = isolated.cli("up")
    assert up.returncode == 0, up.stderr

    status = isolated.cli("status", "--json")
    assert status.returncode == 0, status.stdout + status.stderr
    services = status.json()["services"]
    prometheus = services.pop("prometheus")  # the pipeline's monitoring: `up --pipeline` starts it
    assert set(services) == {"kafka", "opensearch", "s3", "docker"}
    assert all(svc["healthy"] for svc in services.values()), services
    assert set(prometheus) >= {"healthy", "endpoint"}
    assert services["kafka"]["endpoint"] == "127.0.0.1:19092"

    # Idle memory: our three Java services plus the shared Docker engine.
    java_mb = sum(services[name]["rss_mb"] for name in JAVA_SERVICES)
    total_mb = java_mb + _docker_engine_rss_mb()
    print(f"\nidle resident memory: java services {java_mb:.0f} MB, with docker engine {total_mb:.0f} MB")
    assert total_mb < IDLE_MEMORY_LIMIT_MB

    # Kill Kafka and OpenSearch: status names them, `up` brings them back.
    for name in ("kafka", "opensearch"):
        os.kill(services[name]["managed_pid"], signal.SIGKILL)

    def both_reported_down() -> bool:
        now = isolated.cli("status", "--json").json()["services"]
        return not now["kafka"]["healthy"] and not now["opensearch"]["healthy"]

    _wait_for(both_reported_down, 60, "status to report the killed services")
    after_kill = isolated.cli("status", "--json")
    assert after_kill.returncode == 1
    killed = after_kill.json()["services"]
    assert "Kafka is not running" in killed["kafka"]["reason"]
    assert "OpenSearch is not running" in killed["opensearch"]["reason"]
    assert killed["s3"]["healthy"]

    again = isolated.cli("up")
    assert again.returncode == 0, again.stderr
    restored = isolated.cli("status", "--json").json()["services"]
    restored.pop("prometheus")
    assert all(svc["healthy"] for svc in restored.values()), restored

    # `down` leaves none of their processes behind.
    groups = [restored[name]["managed_pid"] for name in JAVA_SERVICES]
    down = isolated.cli("down")
    assert down.returncode == 0, down.stderr
    assert all(not group_members(pgid) for pgid in groups), [group_members(g) for g in groups]
    assert not list((isolated.cache_dir / "run").glob("*.pid"))

    # A second `up` with a warm cache takes under a minute.
    started = time.monotonic()
    warm = isolated.cli("up")
    warm_s = time.monotonic() - started
    print(f"warm `rewardstream up` (kafka, opensearch, s3 restarted): {warm_s:.1f}s")
    assert warm.returncode == 0, warm.stderr
    assert warm_s < 60


def test_port_taken_is_one_line_and_starts_nothing(tmp_path: Path, platform_health: dict[str, Health]) -> None:
    platform = isolated_platform(tmp_path, base_port=29000)
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 29092))
        squatter.listen()
        error = one_line_error(platform.cli("up"))
    assert "port 29092 on 127.0.0.1 is taken by another program" in error
    assert "RS_KAFKA_BOOTSTRAP" in error
    assert not list((platform.cache_dir / "run").glob("*.pid"))


def test_java_missing_is_one_line(tmp_path: Path, platform_health: dict[str, Health]) -> None:
    platform = isolated_platform(tmp_path, base_port=29000)
    empty_bin = tmp_path / "bin"
    empty_bin.mkdir()
    env = {k: v for k, v in platform.env.items() if k != "JAVA_HOME"}
    env |= {"PATH": str(empty_bin), "RS_JAVA_HOME": str(tmp_path / "no-jdk")}
    error = one_line_error(platform.cli("up", env=env))
    assert "Java 17+ not found" in error
    assert "RS_JAVA_HOME" in error


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs as a full disk needs root")
def test_disk_full_is_one_line(tmp_path: Path, platform_health: dict[str, Health]) -> None:
    tiny = tmp_path / "tiny"
    tiny.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(tiny)], check=True)
    try:
        platform = isolated_platform(tiny, base_port=29000)
        # A fresh cache on the tiny disk: nothing installed, so `up` must download.
        for part in SHARED_CACHE_PARTS:
            (platform.cache_dir / part).unlink()
        error = one_line_error(platform.cli("up"))
        assert f"not enough free disk in {platform.cache_dir}" in error
        assert "RS_CACHE_DIR" in error
    finally:
        subprocess.run(["umount", str(tiny)], check=True)


def test_wrong_s3_credentials_are_named(tmp_path: Path, minio_client: object) -> None:
    platform = isolated_platform(tmp_path, base_port=29000)
    env = {
        **platform.env,
        "RS_CACHE_DIR": os.environ.get("RS_CACHE_DIR", str(Path.home() / ".cache" / "rewardstream")),
        "RS_KAFKA_BOOTSTRAP": os.environ.get("RS_KAFKA_BOOTSTRAP", "127.0.0.1:9092"),
        "RS_OPENSEARCH_URL": os.environ.get("RS_OPENSEARCH_URL", "http://127.0.0.1:9200"),
        "RS_S3_ENDPOINT": os.environ.get("RS_S3_ENDPOINT", "127.0.0.1:9000"),
        "RS_S3_SECRET_KEY": "definitely-wrong",
    }
    status = platform.cli("status", "--json", env=env)
    assert status.returncode == 1
    s3 = status.json()["services"]["s3"]
    assert not s3["healthy"]
    assert "rejected the credentials" in s3["reason"]
    assert "definitely-wrong" not in status.stdout + status.stderr
    error = one_line_error(platform.cli("up", env=env))
    assert "s3: S3 at" in error
    assert "RS_S3_SECRET_KEY" in error


def test_malformed_setting_is_one_line(tmp_path: Path) -> None:
    platform = isolated_platform(tmp_path, base_port=29000)
    error = one_line_error(platform.cli("status", env={**platform.env, "RS_HEALTH_TIMEOUT_S": "soon"}))
    assert "RS_HEALTH_TIMEOUT_S" in error
