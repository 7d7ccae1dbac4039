"""The alerts a Prometheus holds, pending or firing, in the shape ``rewardstream status --json`` reports."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from schemas.errors import PlatformError

#: The states reported; an inactive alert is not one.
ACTIVE = ("pending", "firing")


def active_alerts(prometheus_url: str, timeout_s: float) -> list[dict[str, Any]]:
    """``[{"name", "state", "labels", "since"}]`` from ``/api/v1/alerts``, firing first, then by name and labels;
    ``labels`` without ``alertname`` (it is ``name``). Raises ``PlatformError`` when Prometheus does not answer."""
    url = prometheus_url.rstrip("/") + "/api/v1/alerts"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310 - the configured Prometheus
            body = json.load(response)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise PlatformError(f"Prometheus at {prometheus_url} does not answer /api/v1/alerts: {exc}") from exc
    alerts = []
    for alert in (body.get("data") or {}).get("alerts") or []:
        state = alert.get("state")
        if state not in ACTIVE:
            continue
        labels = {k: v for k, v in (alert.get("labels") or {}).items() if k != "alertname"}
        alerts.append({"name": (alert.get("labels") or {}).get("alertname", ""), "state": state, "labels": labels,
                       "since": alert.get("activeAt")})  # fmt: skip
    alerts.sort(key=lambda a: (a["state"] != "firing", a["name"], sorted(a["labels"].items())))
    return alerts
