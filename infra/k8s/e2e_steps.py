"""The e2e's preparation and waiting steps on the local cluster: the image (reused, or ``make image``'s build),
the chart's Deployments available, KEDA's HPA in place, the burst's kill moment, the executor back at its
minimum. Each waits on a condition with a deadline.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from infra.k8s.e2e_watch import DEPLOYMENT, ReplicaWatch, replicas
from infra.k8s.kubectl import Kubectl, wait_for
from schemas.caps import STDERR_TAIL_BYTES
from schemas.errors import PlatformError

ROOT = Path(__file__).resolve().parents[2]
Report = Callable[[str], None]


def image_present(ref: str) -> bool:
    proc = subprocess.run(["docker", "image", "inspect", ref], capture_output=True, check=False, timeout=60)
    return proc.returncode == 0


def ensure_image(ref: str, families: str, rebuild: bool, report: Report) -> None:
    """``make image`` (``python -m infra.image``) when the image is missing or a rebuild is asked for."""
    if image_present(ref) and not rebuild:
        report(f"e2e: reusing the docker image {ref} (`make image` or --build-image rebuilds it)")
        return
    report(f"e2e: building the image {ref} (families {families})")
    argv = [sys.executable, "-m", "infra.image", "--families", families]
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False, timeout=3600)
    if proc.returncode != 0:
        raise PlatformError(f"the image build failed: {proc.stderr.strip()[-STDERR_TAIL_BYTES:]}")
    report(f"e2e: {proc.stdout.strip().splitlines()[-1]}")


def deployments_available(kubectl: Kubectl, namespace: str) -> bool:
    found = kubectl.get("deployments", f"--namespace={namespace}") or {}
    items = found.get("items", [])
    return bool(items) and all(d.get("status", {}).get("availableReplicas", 0) >= 1 for d in items)


def wait_installed(kubectl: Kubectl, namespace: str, timeout_s: float) -> float:
    """Every role's Deployment available and KEDA's HPA for the executor made; the seconds it took."""
    took = wait_for("every role's Deployment available", lambda: deployments_available(kubectl, namespace), timeout_s)
    hpa = f"keda-hpa-{DEPLOYMENT}"
    took += wait_for(f"KEDA's {hpa}", lambda: kubectl.get("hpa", hpa, f"--namespace={namespace}") is not None, 120)
    return took


def wait_kill_moment(
    watch: ReplicaWatch,
    lag: Callable[[], int],
    running: Callable[[], bool],
    *,
    partitions: int,
    published: int,
    timeout_s: float,
) -> int:
    """Until KEDA has two executors ready while the executor group is mid-burst: it has committed results (the
    lag is below the ``published`` count) and has work left (the lag counts the transaction markers after the
    last committed record, one per partition at most, as KEDA counts them too: work is left only above
    ``partitions``). Returns the lag then. Fails when the publisher is done (every reward in) first: the burst
    was too small for the scaling to catch it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not running():
            raise PlatformError("every reward was in before two executors were ready with lag left: a bigger burst")
        if watch.ready() >= 2 and partitions < (now := lag()) < published:
            return now
        time.sleep(0.5)
    raise PlatformError(f"KEDA did not bring a second executor within {timeout_s:.0f}s (samples {watch.samples[-5:]})")


def wait_scaled_down(kubectl: Kubectl, watch: ReplicaWatch, namespace: str, minimum: int, timeout_s: float) -> float:
    """The executor back at ``minimum`` replicas, that many ready; the seconds it took."""
    return wait_for(
        f"the executor back at {minimum} replica(s)",
        lambda: replicas(kubectl, namespace) == minimum == watch.ready(),
        timeout_s,
        interval_s=1.0,
    )
