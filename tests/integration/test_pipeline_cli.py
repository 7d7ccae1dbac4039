"""`rewardstream up --pipeline` / `status --json` / `down` against the shared services, on isolated topics."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from infra.local.process import group_members
from schemas.settings import Settings

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PIPELINE = ("executor", "verifier", "judge", "indexer", "reward")


def _cli(env: dict[str, str], *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rewardstream", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _delete_topics_with_prefix(prefix: str) -> None:
    from infra.topics import delete_topics

    settings = Settings()
    from confluent_kafka.admin import AdminClient

    names = [
        t for t in AdminClient(settings.kafka_client_config()).list_topics(timeout=10).topics if t.startswith(prefix)
    ]
    if names:
        delete_topics(names, settings.kafka_client_config())


def _free_port_run(count: int) -> int:
    """The first of ``count`` consecutive free loopback ports."""
    for base in range(41000, 60000, 10):
        with contextlib.ExitStack() as stack:
            try:
                for port in range(base, base + count):
                    sock = stack.enter_context(socket.socket())
                    sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return base
    raise AssertionError("no free port range")


@pytest.mark.usefixtures("kafka_config", "opensearch_client", "minio_client", "docker_client")
@pytest.mark.timeout(400)
def test_up_pipeline_starts_five_processes_and_down_stops_them(tmp_path: Path, unique_name: str) -> None:
    import orjson

    cache = tmp_path / "cache"
    cache.mkdir()
    main_cache = Settings().cache_dir
    for shared in ("downloads", "m2", "dist", "sandbox"):  # no second download or rootfs build
        (cache / shared).symlink_to(main_cache / shared)
    metrics = _free_port_run(4)
    env = {
        **os.environ,
        "RS_CACHE_DIR": str(cache),
        "RS_TOPIC_PREFIX": f"{unique_name}.",
        "RS_METRICS_PORT": str(metrics),
    }
    try:
        up = _cli(env, "up", "--pipeline", "--concurrency", "1")
        assert up.returncode == 0, up.stderr
        status = _cli(env, "status", "--json")
        pipeline = orjson.loads(status.stdout)["pipeline"]
        assert set(pipeline) == set(PIPELINE)
        assert all(proc["running"] for proc in pipeline.values()), pipeline
        assert pipeline["executor"]["metrics"] == f"http://127.0.0.1:{metrics}/metrics"
        pids = [proc["pid"] for proc in pipeline.values()]

        again = _cli(env, "up", "--pipeline")
        assert again.returncode == 0, again.stderr
        assert again.stderr.count("already running") == len(PIPELINE)
    finally:
        down = _cli(env, "down")
        _delete_topics_with_prefix(f"{unique_name}.")
    assert down.returncode == 0, down.stderr
    deadline = time.monotonic() + 30
    while any(group_members(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(group_members(pid) for pid in pids)
    after = orjson.loads(_cli(env, "status", "--json").stdout)["pipeline"]
    assert not any(proc["running"] for proc in after.values())
