"""A real Prometheus (and Alertmanager) of a test's own, on free loopback ports, scraping a real role: the indexer
(``rewardstream worker indexer``) on topics and an index prefix of its own. Shared by the tests of the rules
(``test_alerts.py``, ``test_alerts_must_show.py``) and of the dashboard's queries (``test_dashboard.py``); the
fixtures are in ``conftest.py``. The shared services are never started or stopped here; every process started
here is stopped by its pid.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from infra.local.paths import PlatformPaths
from infra.monitoring.services import AlertmanagerService, PrometheusService


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 - our loopback Prometheus
        return json.load(response)


def wait_for(what: str, check: Callable[[], Any], timeout_s: float = 30.0) -> Any:
    """Poll ``check`` until it returns something truthy (returned); fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not (got := check()):
        assert time.monotonic() < deadline, f"no {what} within {timeout_s:.0f}s"
        time.sleep(0.2)
    return got


def query(prometheus: PrometheusService, expr: str) -> Any:
    """The whole answer of ``/api/v1/query`` (``status``, ``data`` or ``error``), an HTTP error's body included."""
    url = f"{prometheus.url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
    try:
        return get_json(url)
    except urllib.error.HTTPError as exc:  # a bad query answers 400 with {"status": "error", ...}
        return json.load(exc)


@contextmanager
def indexer_topics(kafka_config: dict[str, str], unique_name: str, partitions: int = 1) -> Iterator[str]:
    """A topic prefix with the indexer's topics (logs, dlq), deleted afterwards."""
    prefix = f"rs-test.{unique_name}."
    admin = AdminClient({**kafka_config})
    names = [f"{prefix}logs", f"{prefix}dlq"]
    for future in admin.create_topics(
        [NewTopic(n, num_partitions=partitions, replication_factor=1) for n in names]
    ).values():
        future.result(timeout=30)
    try:
        yield prefix
    finally:
        for future in admin.delete_topics(names).values():
            future.result(timeout=30)


@contextmanager
def indexer_process(
    topics: str, opensearch_client: Any, unique_name: str
) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """A real role: ``rewardstream worker indexer`` on its own topics, index prefix and metrics port."""
    port = free_port()
    env = {**os.environ, "RS_TOPIC_PREFIX": topics, "RS_OPENSEARCH_INDEX_PREFIX": unique_name,
           "RS_OPENSEARCH_REPLICAS": "0", "RS_METRICS_PORT": str(port)}  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-m", "rewardstream", "worker", "indexer"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        yield proc, port
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
        for name in opensearch_client.indices.get(index=f"{unique_name}-*", ignore_unavailable=True):
            opensearch_client.indices.delete(index=name, ignore_unavailable=True)
        opensearch_client.indices.delete_index_template(name=f"{unique_name}-template", ignore=[404])


@contextmanager
def own_monitoring(tmp_path: Path) -> Iterator[tuple[PrometheusService, AlertmanagerService]]:
    """Our own Prometheus and Alertmanager, configured by the test (stopped by their pids afterwards); skipped
    (failed in CI) where Debian's packages are missing."""
    if shutil.which("prometheus") is None or shutil.which("prometheus-alertmanager") is None:
        message = "Debian's prometheus and prometheus-alertmanager are missing: apt-get install them"
        if os.environ.get("CI"):
            pytest.fail(f"CI must not skip integration tests: {message}")
        pytest.skip(message)
    paths = PlatformPaths(tmp_path / "cache")
    paths.ensure()
    prometheus = PrometheusService(f"http://127.0.0.1:{free_port()}", paths, 3.0)
    alertmanager = AlertmanagerService(f"http://127.0.0.1:{free_port()}", paths, 3.0)
    try:
        yield prometheus, alertmanager
    finally:
        prometheus.stop()
        alertmanager.stop()
