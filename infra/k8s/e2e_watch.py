"""Watching the executor while the burst runs: its ready replicas over time (the most KEDA reached), and the
pod to kill with work in flight.

``ready_pods`` and ``pod_to_kill`` are pure (kubectl's JSON in), so the choice is unit-tested.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from infra.k8s.kubectl import Kubectl
from schemas.errors import PlatformError

SELECTOR = "app.kubernetes.io/instance=rs,app.kubernetes.io/component=executor"
DEPLOYMENT = "rs-rewardstream-executor"


def ready_pods(pods: dict[str, Any]) -> list[dict[str, Any]]:
    """The pods of a ``kubectl get pods -o json`` that are Ready and not being deleted."""
    out = []
    for pod in pods.get("items", []):
        if pod["metadata"].get("deletionTimestamp"):
            continue
        conditions = pod.get("status", {}).get("conditions", [])
        if any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
            out.append(pod)
    return out


def pod_to_kill(pods: dict[str, Any]) -> str | None:
    """The oldest ready pod: it has held partitions since the burst began, so it has work in flight."""
    ready = sorted(ready_pods(pods), key=lambda p: (p["metadata"]["creationTimestamp"], p["metadata"]["name"]))
    return str(ready[0]["metadata"]["name"]) if ready else None


class ReplicaWatch:
    """A thread sampling the executor's ready pods every ``interval_s``; ``most`` is the largest count seen."""

    def __init__(self, kubectl: Kubectl, namespace: str, interval_s: float = 1.0) -> None:
        self._kubectl = kubectl
        self._namespace = namespace
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rs-e2e-replicas", daemon=True)
        self.most = 0
        self.samples: list[tuple[float, int]] = []
        self.errors = 0

    def __enter__(self) -> ReplicaWatch:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def ready(self) -> int:
        return len(ready_pods(self.pods()))

    def pods(self) -> dict[str, Any]:
        found: dict[str, Any] = self._kubectl.get("pods", f"--namespace={self._namespace}", "-l", SELECTOR) or {}
        return found

    def _run(self) -> None:
        start = time.monotonic()
        while not self._stop.is_set():
            try:
                count = self.ready()
            except PlatformError:
                self.errors += 1
            else:
                self.samples.append((round(time.monotonic() - start, 1), count))
                self.most = max(self.most, count)
            self._stop.wait(self._interval_s)


def replicas(kubectl: Kubectl, namespace: str) -> int:
    """The executor Deployment's desired replicas (what KEDA's HPA set)."""
    found = kubectl.get("deployment", DEPLOYMENT, f"--namespace={namespace}")
    if found is None:
        raise PlatformError(f"deployment {DEPLOYMENT} not found in {namespace}")
    return int(found["spec"].get("replicas", 0))


def kill_pod(kubectl: Kubectl, namespace: str, name: str) -> None:
    """Delete the pod with a one-second grace: SIGTERM, then SIGKILL before its runs can finish or commit."""
    kubectl.run("delete", "pod", name, f"--namespace={namespace}", "--grace-period=1", "--wait=false")
