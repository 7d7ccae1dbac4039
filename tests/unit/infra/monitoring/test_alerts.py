"""``active_alerts``: pending and firing alerts from a Prometheus-shaped /api/v1/alerts, in status' shape."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest

from infra.monitoring.alerts import active_alerts
from schemas.errors import PlatformError

BODY: dict[str, Any] = {"status": "success", "data": {"alerts": [
    {"labels": {"alertname": "RewardstreamRoleDown", "role": "judge", "severity": "critical"},
     "state": "pending", "activeAt": "2026-01-01T00:00:01Z", "value": "0e+00"},
    {"labels": {"alertname": "RewardstreamDeadLetters", "role": "executor", "reason": "DecodeError"},
     "state": "firing", "activeAt": "2026-01-01T00:00:02Z", "value": "1e+00"},
    {"labels": {"alertname": "RewardstreamCanaryHit"}, "state": "inactive", "activeAt": None},
]}}  # fmt: skip


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        data = json.dumps(BODY).encode()
        self.send_response(200 if self.path == "/api/v1/alerts" else 404)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture
def prometheus() -> Iterator[str]:
    server = HTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def test_active_alerts_firing_first_without_alertname_in_labels(prometheus: str) -> None:
    assert active_alerts(prometheus, 5.0) == [
        {"name": "RewardstreamDeadLetters", "state": "firing", "labels": {"role": "executor", "reason": "DecodeError"},
         "since": "2026-01-01T00:00:02Z"},
        {"name": "RewardstreamRoleDown", "state": "pending", "labels": {"role": "judge", "severity": "critical"},
         "since": "2026-01-01T00:00:01Z"},
    ]  # fmt: skip


def test_a_silent_prometheus_is_a_platform_error() -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(PlatformError, match="does not answer"):
        active_alerts(f"http://127.0.0.1:{port}", 1.0)
