"""`rewardstream up --pipeline` / `status --json` / `down` against the shared services, on isolated topics."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from infra.local.process import group_members
from schemas.settings import Settings
from tests.integration.platform_env import shared_cache

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PIPELINE = ("executor", "verifier", "judge", "indexer", "reward", "episode", "auditor", "gateway")


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
    from bus.admin import delete_topics

    settings = Settings()
    from confluent_kafka.admin import AdminClient

    names = [
        t
        for t in AdminClient({**settings.kafka_client_config()}).list_topics(timeout=10).topics
        if t.startswith(prefix)
    ]
    if names:
        delete_topics(names, settings.kafka_client_config())


def _free_port_run(count: int) -> int:
    """The first of ``count`` consecutive free loopback ports."""
    for base in range(21000, 32000, 10):  # below the ephemeral port range (32768+)
        with contextlib.ExitStack() as stack:
            try:
                for port in range(base, base + count):
                    sock = stack.enter_context(socket.socket())
                    sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return base
    raise AssertionError("no free port range")


def _pipeline_env(tmp_path: Path, unique_name: str) -> tuple[dict[str, str], int]:
    """Own cache dir (pid files, task registry, reward state), topics and metrics ports; shared services."""
    cache = shared_cache(tmp_path)  # no second download or rootfs build
    metrics = _free_port_run(10)  # seven workers' /metrics, the gateway, Prometheus, Alertmanager
    env = {
        **os.environ,
        "RS_CACHE_DIR": str(cache),
        "RS_TOPIC_PREFIX": f"{unique_name}.",
        "RS_METRICS_PORT": str(metrics),
        "RS_GATEWAY_PORT": str(metrics + 7),
        "RS_PROMETHEUS_URL": f"http://127.0.0.1:{metrics + 8}",
        "RS_ALERTMANAGER_URL": f"http://127.0.0.1:{metrics + 9}",
    }
    return env, metrics


def _every_role_scraped(prometheus: str) -> None:
    """Prometheus scrapes all eight processes, each up, under job rewardstream with its role (within a deadline:
    the first scrape comes within one interval)."""
    import orjson

    roles = {"executor", "verifier", "judge", "indexer", "rewards", "episode", "auditor", "gateway"}
    deadline = time.monotonic() + 60
    while True:
        url = f"{prometheus}/api/v1/query?query=up%7Bjob%3D%22rewardstream%22%7D"
        with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 - our loopback Prometheus
            result = orjson.loads(response.read())["data"]["result"]
        live = {r["metric"]["role"] for r in result if r["value"][1] == "1"}
        if live == roles:
            return
        assert time.monotonic() < deadline, f"scraped and up: {sorted(live)}"
        time.sleep(0.5)


@pytest.mark.usefixtures("kafka_config", "opensearch_client", "minio_client", "docker_client")
@pytest.mark.timeout(400)
def test_up_pipeline_starts_eight_processes_and_down_stops_them(tmp_path: Path, unique_name: str) -> None:
    import orjson

    env, metrics = _pipeline_env(tmp_path, unique_name)
    try:
        up = _cli(env, "up", "--pipeline", "--concurrency", "1")
        assert up.returncode == 0, up.stderr
        status = _cli(env, "status", "--json")
        pipeline = orjson.loads(status.stdout)["pipeline"]
        assert set(pipeline) == set(PIPELINE)
        assert all(proc["running"] for proc in pipeline.values()), pipeline
        assert pipeline["executor"]["metrics"] == f"http://127.0.0.1:{metrics}/metrics"
        assert pipeline["gateway"]["endpoint"] == f"http://127.0.0.1:{metrics + 7}"
        health_url = f"{pipeline['gateway']['endpoint']}/health"
        with urllib.request.urlopen(health_url, timeout=5) as health:  # noqa: S310 - our loopback gateway
            assert orjson.loads(health.read())["status"] == "ok"
        pids = [proc["pid"] for proc in pipeline.values()]
        prometheus = orjson.loads(status.stdout)["services"]["prometheus"]
        assert prometheus["healthy"], prometheus
        assert prometheus["endpoint"] == f"http://127.0.0.1:{metrics + 8}"
        pids.append(prometheus["managed_pid"])
        _every_role_scraped(prometheus["endpoint"])

        again = _cli(env, "up", "--pipeline")
        assert again.returncode == 0, again.stderr
        assert again.stderr.count("already running") == len(PIPELINE) + 2  # and Prometheus, Alertmanager
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


@pytest.mark.sandbox
@pytest.mark.usefixtures("kafka_config", "opensearch_client", "minio_client", "docker_client")
@pytest.mark.timeout(600)
def test_demo_gives_every_generation_the_reward_it_deserves(tmp_path: Path, unique_name: str) -> None:
    """The README's main command, through the real pipeline, on a slice of HumanEval."""
    import re

    env, _ = _pipeline_env(tmp_path, unique_name)
    try:
        result = _cli(env, "demo", "--limit", "16", "--timeout", "300", timeout=500)
    finally:
        _cli(env, "down", "--pipeline-only")
        _delete_topics_with_prefix(f"{unique_name}.")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "34 rewards for 34 generations" in result.stdout, result.stdout
    assert re.search(r"canonical: reward 1\s*│\s*16 ", result.stdout), result.stdout
    wrong = sum(int(n) for n in re.findall(r"wrong: reward 0[^│]*│\s*(\d+) ", result.stdout))
    adversarial = sum(int(n) for n in re.findall(r"adversarial: reward 0[^│]*│\s*(\d+) ", result.stdout))
    assert (wrong, adversarial) == (16, 2), result.stdout
    assert "unexpected" not in result.stdout
